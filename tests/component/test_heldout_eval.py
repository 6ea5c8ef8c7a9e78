"""Held-out evaluation (eval.held-out) through a Federation and a run folder: exact counts, the model
evaluated for each topology, the fields of metrics rows, summary.json and config.json, and N = 0
adding nothing; fedrl check refuses what cannot be held out naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedrl.cli import main
from fedrl.config import from_run_config
from fedrl.rl.evaluate import evaluate
from fedrl.seeding import HELDOUT, derive
from fedrl.server.federation import Federation
from fedrl.server.rundir import resolved_config
from tests.component.one_round import one_round

REPO = Path(__file__).resolve().parents[2]
SMALL = {"nodes.count": 3, "algo.local-steps": 256, "eval.episodes": 1, "env.kwargs": "max_episode_steps=50",
         "env.vary": "length=uniform(0.3, 0.9)"}
FIELDS = {"heldout_returns", "heldout_mean_return", "heldout_min_return", "heldout"}


def _fed(**over: object) -> Federation:
    return Federation(from_run_config({**SMALL, **over}))


def test_evaluation_returns_one_value_per_held_out_variant() -> None:
    fed = _fed(**{"eval.held-out": 4})
    assert len(fed.heldout) == 4
    returns = fed.evaluate_heldout()
    assert len(returns) == 4 and all(1.0 <= r <= 50.0 for r in returns)  # CartPole: 1 per step, at most 50
    assert fed.evaluate_heldout() == returns  # the same episodes at every evaluation
    assert resolved_config(fed)["heldout"] == [{"index": j, "params": v} for j, v in enumerate(fed.heldout)]
    assert all(v["length"] not in {t["length"] for t in fed.variants} for v in fed.heldout)


def test_zero_held_out_adds_nothing() -> None:
    fed = _fed()
    assert fed.heldout == [] and fed.evaluate_heldout() == []
    assert "heldout" not in resolved_config(fed)


@pytest.mark.parametrize("strategy", ["fedavg", "local"])
def test_the_exported_model_is_what_held_out_evaluation_scores(strategy: str) -> None:
    fed = _fed(**{"eval.held-out": 2, "strategy.name": strategy})
    rng = np.random.default_rng(0)
    fed.rule.models = [[rng.normal(size=w.shape).astype(np.float32) for w in m] for m in fed.models]
    # local: no global model; node 0's model stands for the run (server_model(), saved as model.npz)
    expected = evaluate(fed.spec, fed.models[0], None, "CartPole-v1", fed.heldout, fed.kwargs, 1,
                        derive(fed.cfg.seed, HELDOUT))
    assert fed.evaluate_heldout() == expected
    assert fed.server_model() is fed.models[0]


def _one_round(tmp_path: Path, held_out: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    fed = _fed(**{"eval.held-out": held_out, "num-server-rounds": 1, "output-dir": str(tmp_path), "run-name": "r"})
    return one_round(fed, tmp_path / "r")


def test_rows_summary_and_config_report_held_out_variants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row, summary, config = _one_round(tmp_path, 3)
    returns = row["heldout_returns"]
    assert isinstance(returns, list) and len(returns) == 3
    assert row["heldout_mean_return"] == sum(returns) / 3 and row["heldout_min_return"] == min(returns)
    assert summary["heldout"] == [{"index": h["index"], "params": h["params"], "mean_return": r}
                                  for h, r in zip(config["heldout"], returns, strict=True)]
    assert [h["index"] for h in config["heldout"]] == [0, 1, 2]
    assert (summary["heldout_mean_return"], summary["heldout_min_return"]) == (row["heldout_mean_return"],
                                                                               row["heldout_min_return"])
    out = capsys.readouterr().out
    assert "held-out mean" in out and "\n  h2  length=" in out


def test_zero_held_out_leaves_rows_summary_and_config_unchanged(tmp_path: Path) -> None:
    row, summary, config = _one_round(tmp_path, 0)
    assert not FIELDS & (set(row) | set(summary) | set(config))


def _check(capsys: pytest.CaptureFixture[str], override: str) -> tuple[int, str]:
    rc = main(["check", str(REPO), "--run-config", override])
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize(("override", "fragment"), [
    ("eval.held-out=-1", "eval.held-out: got -1; must be in [0, 1000] (0: off)"),
    ("eval.held-out=2 env.vary='length=0.5'", "eval.held-out: env.vary has no parameter that varies"),
])
def test_check_refuses_naming_the_key(override: str, fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _check(capsys, override)
    assert rc == 2 and len(err.splitlines()) == 1
    assert fragment in err, err


def test_check_accepts_held_out_variants_of_the_default_vary(capsys: pytest.CaptureFixture[str]) -> None:
    assert _check(capsys, "eval.held-out=3")[0] == 0
