"""Client-level DP end to end through `flwr run` and Flower's Simulation Engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fedrl.privacy import epsilon_after
from tests.e2e.harness import REPO, LocalFlower

sys.path.insert(0, str(REPO / "simulations"))
from privacy_sweep import preset as sweep_preset

pytestmark = pytest.mark.slow

SMALL = "nodes.count=4 algo.local-steps=512 eval.episodes=2"


def preset(name: str) -> str:
    """A ``simulations/configs`` preset as a run-config override string (the sweep runner's reader)."""
    return sweep_preset(str(REPO / "simulations" / "configs" / name))


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_central_dp_meets_its_target_and_reports_epsilon_every_round(flower: LocalFlower, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{SMALL} num-server-rounds=6 privacy.mode='central' privacy.target-epsilon=8.0 "
                           f"privacy.clip-norm=0.05 output-dir='{out}' run-name='c'")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "privacy: central DP" in res.stdout and "sampling rate 1" in res.stdout
    rows = _rows(out / "c")
    eps = [r["epsilon"] for r in rows]
    assert len(rows) == 6 and eps == sorted(eps) and all(r["delta"] == 1e-5 for r in rows)
    assert 7.9 <= eps[-1] <= 8.0, eps
    assert all(r["nodes_trained"] == [0, 1, 2, 3] for r in rows)
    assert all("train_returns" not in r or all(v is None for v in r["train_returns"].values()) for r in rows)
    summary = json.loads((out / "c" / "summary.json").read_text())
    assert summary["epsilon"] == eps[-1] and summary["delta"] == 1e-5


def test_the_budget_stops_the_run_cleanly_before_it_is_exceeded(flower: LocalFlower, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{SMALL} num-server-rounds=10 privacy.mode='central' privacy.noise-multiplier=2.0 "
                           f"privacy.target-epsilon=5.0 output-dir='{out}' run-name='b'")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "stopping after round 4" in res.stdout
    rows = _rows(out / "b")
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert [r["epsilon"] for r in rows] == [epsilon_after(2.0, 1.0, r, 1e-5) for r in (1, 2, 3, 4)]
    summary = json.loads((out / "b" / "summary.json").read_text())
    assert summary["rounds_completed"] == 4 and summary["epsilon"] <= 5.0
    for name in ("model.npz", "checkpoint.npz", "config.json", "eval_vs_round.png"):
        assert (out / "b" / name).exists(), name


def test_local_dp_runs_and_accounts(flower: LocalFlower, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{SMALL} num-server-rounds=2 privacy.mode='local' privacy.noise-multiplier=1.0 "
                           f"privacy.clip-norm-end=0.25 compression.up='quantize' output-dir='{out}' run-name='l'")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "annealed linearly to 0.25 by round 2" in res.stdout
    rows = _rows(out / "l")
    assert [r["epsilon"] for r in rows] == [epsilon_after(1.0, 1.0, r, 1e-5) for r in (1, 2)]  # a schedule costs no ε
    assert [r["clip_norm"] for r in rows] == [1.0, 0.25]  # each round's plans carried its clip norm


def test_adaptive_clipping_moves_the_clip_norm_between_rounds(flower: LocalFlower, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{SMALL} num-server-rounds=3 privacy.mode='central' privacy.noise-multiplier=0.5 "
                           "privacy.adaptive-clip=true privacy.count-noise=0.5 privacy.clip-norm=1e-4 "
                           f"privacy.clip-lr=0.5 output-dir='{out}' run-name='a'")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = _rows(out / "a")
    clips = [r["clip_norm"] for r in rows]
    # Every PPO update is far longer than 1e-4: all clipped, so the norm grows by about e^(0.5 * 0.5) a round.
    assert clips[0] == 1e-4 and clips[2] > clips[1] > clips[0], clips
    assert [r["epsilon"] for r in rows] == [epsilon_after(0.5, 1.0, r, 1e-5) for r in (1, 2, 3)]


def test_central_dp_at_epsilon_8_trains_heterogeneous_cartpole(flower: LocalFlower, tmp_path: Path) -> None:
    """The preset for central DP (32 nodes, 211 parameters, ε = 8 at δ = 1e-5 over 30 rounds).

    The noise is seeded from the OS, so every run differs. In-process runs of this preset reached
    a best eval mean of 211-500 (5 runs; random play is about 20); 100 leaves a wide margin.
    """
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{preset('cartpole_dp.toml')} output-dir='{out}' run-name='dp8'", timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (out / "dp8" / "metrics.jsonl").exists(), res.stdout[-3000:] + res.stderr[-3000:]  # flwr run exits 0
    rows = _rows(out / "dp8")
    assert len(rows) == 30 and all(r["delta"] == 1e-5 for r in rows)
    eps = [r["epsilon"] for r in rows]
    assert eps == sorted(eps) and eps[0] > 0 and eps[-1] <= 8.0, eps
    evals = [r["eval_mean_return"] for r in rows if "eval_mean_return" in r]
    assert len(evals) == 6 and max(evals) >= 100, evals


def test_the_audit_flags_a_run_without_noise_and_passes_a_noised_one(flower: LocalFlower, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    base = (f"{SMALL} num-server-rounds=5 privacy.mode='central' privacy.target-epsilon=1.0 privacy.clip-norm=0.05 "
            f"privacy.audit-canaries=200 output-dir='{out}'")
    audits = {}
    for name, extra in (("noised", ""), ("broken", " privacy.unsafe-no-noise=true")):
        res = flower.run(REPO, f"{base}{extra} run-name='{name}'")
        assert (out / name / "summary.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
        audits[name] = json.loads((out / name / "summary.json").read_text())["audit"]
        assert "privacy audit (one run, 200 canaries, 5 rounds)" in res.stdout
    assert audits["broken"]["flagged"] and audits["broken"]["unsafe_no_noise"], audits
    assert audits["broken"]["epsilon_lower"] > 2 * audits["broken"]["epsilon_claimed"]
    assert not audits["noised"]["flagged"] and audits["noised"]["epsilon_lower"] < 1.0, audits
    assert audits["noised"]["epsilon_claimed"] <= 1.0


def test_secure_aggregation_with_distributed_dp_runs_and_accounts_every_round(flower: LocalFlower,
                                                                              tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{SMALL} num-server-rounds=4 secagg.enabled=true compression.up='quantize' "
                           "privacy.mode='distributed' privacy.target-epsilon=8.0 privacy.clip-norm=0.05 "
                           f"nodes.dropout-prob=0.15 nodes.dropout-stage='mask' output-dir='{out}' run-name='d'")
    assert (out / "d" / "summary.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
    assert "privacy: distributed DP" in res.stdout and "3 of 4 nodes in a sum" in res.stdout
    rows = _rows(out / "d")
    assert len(rows) == 4 and all(r["secagg_bits"] == 24 and r["delta"] == 1e-5 for r in rows)
    eps = [r["epsilon"] for r in rows]
    assert eps == sorted(eps) and 0 < eps[0] and eps[-1] <= 8.0, eps
    unmasked = [r for r in rows if not r["secagg_aborted"]]
    assert unmasked and all(len(r["nodes_trained"]) >= 3 for r in unmasked)
    assert all("train_returns" not in r or all(v is None for v in r["train_returns"].values()) for r in rows)


def test_dp_at_the_edge_under_secure_aggregation_noises_each_edges_secure_sum_and_accounts_once_a_round(
        flower: LocalFlower, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{SMALL} num-server-rounds=3 topology.name='hierarchical' topology.edges=2 "
                           "secagg.enabled=true compression.up='quantize' privacy.mode='central' "
                           f"privacy.noise-multiplier=2.0 privacy.clip-norm=0.1 output-dir='{out}' run-name='e'")
    assert (out / "e" / "summary.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
    assert "DP at the edge: each of the 2 edges adds the noise to the sum of its own nodes (its secure sum)" in res.stdout
    rows = _rows(out / "e")
    for r in rows:  # nodes 0-1 and 2-3: one secure session per edge, both unmasked, one ledger step a round
        assert r["secagg_aborted"] is None and r["nodes_trained"] == [0, 1, 2, 3], r
        assert {k: (e["nodes"], e["survivors"]) for k, e in r["secagg_edges"].items()} == {"0": (2, 2), "1": (2, 2)}
        assert r["epsilon"] == pytest.approx(epsilon_after(2.0, 1.0, r["round"], 1e-5))


def test_dpsgd_in_local_training_reports_the_nodes_sample_level_epsilon(flower: LocalFlower, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{SMALL} num-server-rounds=2 algo.hidden='16' privacy.dpsgd=true "
                           f"privacy.dpsgd-noise-multiplier=1.1 output-dir='{out}' run-name='s'")
    assert (out / "s" / "summary.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
    rows = _rows(out / "s")
    steps = 2 * 4 * 4  # iterations per round (512 / (8 x 32)) x epochs x minibatches
    from opacus.accountants import RDPAccountant

    for r in rows:  # every node took the same number of steps: their ε are equal
        acc = RDPAccountant()
        acc.history = [(1.1, 0.25, r["round"] * steps)]
        assert r["dpsgd_epsilon"] == pytest.approx(acc.get_epsilon(delta=1e-5), rel=1e-9)
        assert all(v is None for v in r["train_returns"].values())  # data-dependent: not sent
    summary = json.loads((out / "s" / "summary.json").read_text())
    assert summary["dpsgd_epsilon"] == rows[-1]["dpsgd_epsilon"] and summary["epsilon"] is None


def test_dp_fedbuff_accounts_every_server_step_and_stops_at_its_budget(flower: LocalFlower, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    # z = 3 with q = 1: four steps cost 2.985, a fifth would take ε to 3.38 > the budget of 3 (the clip
    # schedule costs no ε)
    res = flower.run(REPO, "nodes.count=8 algo.hidden='16' algo.local-steps=256 num-server-rounds=30 eval.every=0 "
                           "eval.episodes=1 strategy.name='fedbuff' strategy.buffer=4 privacy.mode='central' "
                           "privacy.noise-multiplier=3.0 privacy.target-epsilon=3.0 privacy.clip-norm=1.0 "
                           f"privacy.clip-norm-end=0.42 output-dir='{out}' run-name='b'", supernodes=8)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "privacy budget: round 5 would take" in res.stdout
    rows = _rows(out / "b")
    assert [len(r["nodes_trained"]) for r in rows] == [4] * 4  # four DP-FedBuff steps of K = 4 updates
    assert [r["epsilon"] for r in rows] == pytest.approx([epsilon_after(3.0, 1.0, k, 1e-5) for k in (1, 2, 3, 4)])
    # each row shows the clip norm its step released under, as a synchronous round's row does (1 -> 0.42
    # over 30 steps: 0.02 a step); the asynchronous loop once showed the next step's
    assert [r["clip_norm"] for r in rows] == pytest.approx([1.0, 0.98, 0.96, 0.94])
    assert json.loads((out / "b" / "summary.json").read_text())["rounds_completed"] == 4
