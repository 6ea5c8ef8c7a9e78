"""One hostile node per attack kind, end to end through Flower's Simulation Engine: every round
completes, every hostile reply is left out with its reason, the model stays finite, and the
honest nodes still solve heterogeneous CartPole."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from fedrl.inject.attacks import RECORD_ATTACKS, REPLY_ATTACKS
from tests.e2e.harness import REPO, LocalFlower

sys.path.insert(0, str(REPO / "simulations"))
from privacy_sweep import preset as sweep_preset  # the sweep runner's preset reader

pytestmark = pytest.mark.slow

KINDS = REPLY_ATTACKS + RECORD_ATTACKS
HOSTILE_NODES = [1, 2, 4, 5, 7, 8, 10, 11, 13, 14]  # interleaved: the 6 honest nodes span every pole length
# What stops each kind: the decoder (fedrl.flower.codec) or a server check (fedrl.server.guards).
REASON = {
    "huge-weights": "strategy.max-update-norm", "nan-weights": "non-finite", "lie-steps": "the plan asked for",
    "bad-moments": "observation", "wrong-node": "asked for", "wrong-shape": "malformed reply",
    "bad-dtype": "malformed reply", "bad-stype": "malformed reply", "npy-bomb": "malformed reply",
    "topk-overflow": "topk payload",
}
PRESET = sweep_preset(str(REPO / "simulations" / "configs" / "cartpole_hostile.toml"))
RUN = f"{PRESET} eval.episodes=2 eval.stop-at-target=true"


def test_the_preset_gives_one_hostile_node_per_kind() -> None:
    assert f"attack.nodes='{','.join(map(str, HOSTILE_NODES))}'" in PRESET
    assert f"attack.name='{','.join(KINDS)}'" in PRESET


def test_one_hostile_node_per_kind_is_left_out_and_the_honest_nodes_solve(flower: LocalFlower, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{RUN} output-dir='{out}' run-name='h'", timeout=600)
    folder = out / "h"
    assert (folder / "summary.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == list(range(1, len(rows) + 1)) == list(range(1, summary["rounds_completed"] + 1))
    honest = [n for n in range(16) if n not in HOSTILE_NODES]
    for r in rows:
        assert r["aggregation_failed"] is None, r
        assert r["nodes_trained"] == honest, r  # every node is selected every round (fraction-train = 1)
        assert sorted(map(int, r["nodes_failed"])) == HOSTILE_NODES, r
        for node, kind in zip(HOSTILE_NODES, KINDS, strict=True):
            assert REASON[kind] in r["nodes_failed"][str(node)], (kind, r["nodes_failed"][str(node)])
    with np.load(folder / "model.npz", allow_pickle=False) as z:
        assert all(np.all(np.isfinite(z[k])) for k in z.files)
    assert summary["solved"] and min(summary["eval"][n]["mean_return"] for n in honest) >= 475, summary["eval"]


def test_a_node_that_never_answers_in_time_does_not_stall_fedbuff(flower: LocalFlower, tmp_path: Path) -> None:
    """FedBuff with a buffer of every node (4) and node 3 far slower than round.timeout-s: once the
    other three have answered and node 3's message timed out, the buffer steps with three updates.
    (It stalled: the timed-out node was sent the same version again, forever.) One step: the
    simulated SuperNodes share one Ray actor here, which node 3's sleep then holds."""
    res = flower.run(REPO, "strategy.name='fedbuff' strategy.buffer=4 nodes.count=4 nodes.speed='1,1,1,500' "
                           "round.timeout-s=8 num-server-rounds=1 algo.local-steps=256 eval.every=0 eval.episodes=1 "
                           f"output-dir='{tmp_path}' run-name='dead'", supernodes=4, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "dead" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1] and sorted(rows[0]["nodes_trained"]) == [0, 1, 2], rows
    assert list(rows[0]["nodes_failed"]) == ["3"] and "round.timeout-s" in rows[0]["nodes_failed"]["3"], rows
