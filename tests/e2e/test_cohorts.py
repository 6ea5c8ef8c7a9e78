"""Cohort messages through Flower's Simulation Engine (issue 16): each SuperNode trains the
logical nodes it hosts in one message and one vectorized pass (``nodes.cohort-size``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.harness import REPO, LocalFlower

pytestmark = pytest.mark.slow


def test_the_default_experiment_in_cohorts_solves_every_variant(flower: LocalFlower, tmp_path: Path) -> None:
    # 8 nodes on 2 SuperNodes: two messages of 4 plans per round instead of eight of one.
    summary, rows = flower.solve("nodes.cohort-size=4 eval.stop-at-target=true", tmp_path, "cohorts")
    assert summary["rounds_completed"] <= 10
    assert all(len(r["nodes_trained"]) == 8 for r in rows)


def test_per_node_features_keep_working_in_cohorts(flower: LocalFlower, tmp_path: Path) -> None:
    # 16 nodes, 8 per message: 8-bit uplinks with error feedback, central DP with its accountant,
    # an injected dropout inside a cohort that leaves only that node out.
    res = flower.run(REPO, "num-server-rounds=2 nodes.count=16 nodes.cohort-size=8 algo.local-steps=256 "
                           "eval.episodes=1 compression.up='quantize' compression.bits=8 "
                           "compression.error-feedback='on' privacy.mode='central' privacy.noise-multiplier=0.5 "
                           "nodes.dropout-prob=0.1 nodes.dropout-stage='train' "
                           f"output-dir='{tmp_path}' run-name='features'")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    folder = tmp_path / "features"
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["epsilon"] > 0
    for r in rows:
        assert len(r["nodes_trained"]) + len(r["nodes_failed"]) == 16
        assert all(why.startswith("client error") for why in r["nodes_failed"].values())
    assert sum(len(r["nodes_failed"]) for r in rows) >= 1  # a dropout happened inside a cohort, alone


def test_200_nodes_with_secure_aggregation_8_bit_codes_and_central_dp(flower: LocalFlower, tmp_path: Path) -> None:
    # Two cohort messages per stage (100 logical nodes each, every one a party of its own with its
    # own keys and session); nodes clip, the server noises the securely summed 8-bit codes.
    # Injected dropouts at every stage hit single members: the protocol recovers without them.
    # Observation statistics are the server's own (algo.norm-obs = server): no node sends any.
    res = flower.run(REPO, "num-server-rounds=2 nodes.count=200 nodes.cohort-size=100 algo.local-steps=256 "
                           "eval.episodes=1 eval.nodes=8 secagg.enabled=true secagg.neighbors=16 algo.norm-obs='server' "
                           "compression.up='quantize' compression.bits=8 secagg.clip-range=0.05 "
                           "privacy.mode='central' privacy.noise-multiplier=1.0 nodes.dropout-prob=0.02 "
                           f"output-dir='{tmp_path}' run-name='crowd'", timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "the server adds noise to the securely summed updates" in res.stdout
    folder = tmp_path / "crowd"
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and 0 < summary["epsilon"] <= 8
    for r in rows:
        assert r["secagg_aborted"] is None and r["secagg_bits"] >= 16
        assert 180 <= len(r["nodes_trained"]) < 200  # a few dropped, each alone
        # (a node that drops at unmask is still in the sum: its input was masked in already)
        assert set(r["nodes_trained"]) | {int(n) for n in r["nodes_failed"]} == set(range(200))
    assert len(rows[-1]["eval_returns"]) == 8
    stats = np.load(folder / "model.npz")["obs_moments"]
    assert stats[0] == 2 * 8 * 256  # 2 rounds of the server's rollouts (algo.num-envs x local-steps), no node's


def test_fedbuff_dispatches_idle_nodes_in_cohorts(flower: LocalFlower, tmp_path: Path) -> None:
    # 8 nodes on 2 SuperNodes, each message carries up to 4 idle nodes; a server step every 3 updates,
    # so a cohort's replies straddle steps and some land on a newer version (staleness > 0).
    res = flower.run(REPO, "strategy.name='fedbuff' strategy.buffer=3 nodes.cohort-size=4 num-server-rounds=6 "
                           f"algo.local-steps=256 eval.every=0 eval.episodes=1 output-dir='{tmp_path}' run-name='buf'")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "buf" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(len(r["nodes_trained"]) == 3 == len(r["staleness"]) for r in rows)
    assert any(t > 0 for r in rows for t in r["staleness"])
    assert not any(r["nodes_failed"] for r in rows)


def test_fedasync_stops_at_its_last_step_inside_a_cohorts_replies(flower: LocalFlower, tmp_path: Path) -> None:
    # FedAsync steps on every reply, and one message brings a cohort of 4: the 3rd step is the
    # last, and the cohort's 4th reply must not make a 4th (it did: 241 steps of 240).
    res = flower.run(REPO, "strategy.name='fedasync' nodes.cohort-size=4 num-server-rounds=3 algo.local-steps=256 "
                           f"eval.every=0 eval.episodes=1 output-dir='{tmp_path}' run-name='mix'")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "mix" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert json.loads((tmp_path / "mix" / "summary.json").read_text())["rounds_completed"] == 3
