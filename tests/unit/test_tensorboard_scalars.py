"""``fedrl.runfolder.tensorboard_log.scalars``: which TensorBoard series one metrics row becomes."""

from __future__ import annotations

import math

import pytest

from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.runfolder.tensorboard_log import scalars


def test_a_row_becomes_its_numbers_per_variant_counts_and_per_node_summaries() -> None:
    row = {
        "round": 3, "wall_time_s": 12.5, "env_steps": 4096, "bytes_up": 100, "epsilon": 1.25, "delta": 1e-5,
        "eval_returns": [10.0, 30.0], "eval_mean_return": 20.0, "eval_min_return": 10.0,
        "heldout_returns": [7.0],
        "nodes_trained": [0, 2, 5], "nodes_failed": {"1": "timed out"},
        "train_returns": {"0": 1.0, "2": 5.0, "5": None},
        "secagg_seconds": {"keys": 0.5, "mask": 0.25},
        "aggregation_failed": None, "secagg_aborted": "too few", "unsafe": True, "nan": math.nan,
    }
    assert scalars(row) == {
        "round": 3.0, "wall_time_s": 12.5, "env_steps": 4096.0, "bytes_up": 100.0, "epsilon": 1.25, "delta": 1e-5,
        "eval_returns/0": 10.0, "eval_returns/1": 30.0, "eval_mean_return": 20.0, "eval_min_return": 10.0,
        "heldout_returns/0": 7.0,
        "nodes_trained": 3.0, "nodes_failed": 1.0,
        "train_returns/mean": 3.0, "train_returns/min": 1.0, "train_returns/max": 5.0,
        "secagg_seconds/keys": 0.5, "secagg_seconds/mask": 0.25,
    }


def test_a_per_node_map_without_numbers_adds_nothing() -> None:
    assert scalars({"train_returns": {"0": None, "3": None}, "nodes_failed": {}}) == {"nodes_failed": 0.0}


def test_log_tensorboard_is_off_by_default_and_does_not_change_the_experiment() -> None:
    from fedrl.config import LOCATION_KEYS

    assert from_run_config({}).log.tensorboard is False
    assert "log.tensorboard" in LOCATION_KEYS  # turning it on for a resume is allowed


def test_log_tensorboard_without_tensorboard_installed_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ConfigError) as err:
        check({"log.tensorboard": True})
    assert str(err.value) == ('log.tensorboard: is true but TensorBoard is not installed; install the extra with '
                              'pip install -e ".[tensorboard]", or set log.tensorboard = false')
    assert check({}).log.tensorboard is False  # off: never asked
