"""Off-policy learners end to end in Flower's Simulation Engine (issue 17): federated DQN solves
heterogeneous CartPole and federated SAC heterogeneous Pendulum, each node keeping its replay
buffer in its SuperNode's state between rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.harness import REPO, LocalFlower

pytestmark = pytest.mark.slow


def test_federated_dqn_solves_heterogeneous_cartpole(flower: LocalFlower, tmp_path: Path) -> None:
    # 4 nodes (pole length 0.4-1.2), 2,048 env steps each per round: at most 51k steps per node
    summary, rows = flower.solve("algo.name='dqn' nodes.count=4 algo.local-steps=2048 num-server-rounds=25 "
                                 "eval.every=2 eval.episodes=2 eval.stop-at-target=true", tmp_path, "dqn")
    assert summary["best_eval_min_return"] >= 475
    assert rows[-1]["env_steps"] <= 4 * 25 * 2048
    assert all(len(r["nodes_trained"]) == 4 for r in rows)


def test_federated_sac_brings_every_pendulum_variant_above_minus_250(flower: LocalFlower, tmp_path: Path) -> None:
    # 4 nodes, gravity 8-12 and mass 0.8-1.2; Pendulum's return depends on the start state, so
    # each variant is scored on 10 episodes
    res = flower.run(REPO, "algo.name='sac' env.id='Pendulum-v1' env.vary='g=linspace(8, 12); m=uniform(0.8, 1.2)' "
                           "nodes.count=4 algo.local-steps=1024 num-server-rounds=12 eval.every=2 eval.episodes=10 "
                           "eval.target-return='-250' eval.stop-at-target=true strategy.server-lr=1.0 "
                           f"strategy.server-lr-end=-1 output-dir='{tmp_path}' run-name='sac'")
    folder = tmp_path / "sac"
    assert (folder / "summary.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["solved"] and summary["eval_min_return"] >= -250, summary["eval"]
    assert summary["env_steps_total"] <= 4 * 12 * 1024
