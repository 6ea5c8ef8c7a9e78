"""The paper reproductions (``simulations/papers``): every run they make is a config ``fedrl check``
accepts, and the x-axis they read from a run folder (trajectories per agent, the first and the
held evaluation at a target) has exact values on a made-up folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from flwr.common.config import parse_config_args

from fedrl.checks.validate import check

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "simulations" / "papers"))
sys.path.insert(0, str(REPO / "simulations"))
import decbyzpg
import fedpg_br
import jin_heterogeneity
from benchmark import _join
from runs import Run, at, first_at, held_from


def _configs() -> list[str]:
    out = [f"{fedpg_br.SETTING} nodes.count={k} seed=0" for k in fedpg_br.AGENTS]
    out += [f"{decbyzpg.BASE} {rc} num-server-rounds=25 seed=0" for rc, _, _ in decbyzpg.ROWS.values()]
    for common, budget, intervals in jin_heterogeneity.FAMILIES.values():
        out += [f"{jin_heterogeneity.DQN} {common} algo.local-steps={s} num-server-rounds={budget // s}"
                for s in intervals.values()]
        out.append(f"{jin_heterogeneity.DQN} {common} eval.held-out=0 strategy.name='local' "
                   f"algo.local-steps={jin_heterogeneity.LOCAL_STEPS} eval.every=0")
    return out


@pytest.mark.parametrize("rc", _configs())
def test_every_paper_run_is_a_valid_config(rc: str) -> None:
    check(parse_config_args([_join(rc)]))  # merged as runs.run merges it: later keys win


def _folder(tmp_path: Path, rows: list[dict]) -> Path:
    (tmp_path / "summary.json").write_text(json.dumps({"eval": []}))
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return tmp_path


def test_trajectories_per_agent_and_the_evaluations(tmp_path: Path) -> None:
    rows = [  # two nodes, 1,000 env steps each a round
        {"round": 1, "env_steps": 2000, "nodes_trained": [0, 1], "train_returns": {"0": 20.0, "1": 50.0},
         "eval_min_return": 100.0, "eval_mean_return": 120.0},
        {"round": 2, "env_steps": 4000, "nodes_trained": [0, 1], "train_returns": {"0": 100.0, "1": 250.0}},
        {"round": 3, "env_steps": 6000, "nodes_trained": [0, 1], "train_returns": {"0": 500.0, "1": 500.0},
         "eval_min_return": 480.0, "eval_mean_return": 490.0},
        {"round": 4, "env_steps": 8000, "nodes_trained": [0, 1], "train_returns": {"0": 500.0, "1": 500.0},
         "eval_min_return": 470.0, "eval_mean_return": 485.0},
        {"round": 5, "env_steps": 10000, "nodes_trained": [0, 1], "train_returns": {"0": 500.0, "1": 500.0},
         "eval_min_return": 500.0, "eval_mean_return": 500.0},
    ]
    run = Run(_folder(tmp_path, rows), 1.0)
    # round 1: (1000/20 + 1000/50) / 2 = 35; round 2: (10 + 4) / 2 = 7; then 2 a round
    assert run.trajectories() == pytest.approx([35.0, 42.0, 44.0, 46.0, 48.0])
    ev = run.evals()
    assert ev == [(35.0, 100.0, 120.0), (44.0, 480.0, 490.0), (46.0, 470.0, 485.0), (48.0, 500.0, 500.0)]
    assert first_at(ev, 475.0) == 44.0
    assert first_at(ev, 480.0, mean=True) == 44.0
    assert held_from(ev, 475.0) == 48.0  # round 4's 470 breaks the first stretch
    assert held_from(ev, 480.0, mean=True) == 44.0
    assert held_from(ev, 501.0) is None
    assert at(ev, 45.0) == 480.0 and at(ev, 1000.0) == 500.0 and at(ev, 10.0) is None
    # Acrobot's return is minus the episode's length
    rows[0]["train_returns"] = {"0": -500.0, "1": -200.0}
    assert Run(_folder(tmp_path, rows), 1.0).trajectories(-1.0)[0] == pytest.approx((2 + 5) / 2)
