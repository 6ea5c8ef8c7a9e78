"""``strategy.ema`` inside the Federation: the model the run keeps is the average of its server models,
training steps from the latest one, the average survives a checkpoint, and bad settings are refused."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.errors import ConfigError, RunFileError
from fedrl.model.layout import flatten, unflatten
from fedrl.server.federation import Federation
from fedrl.server.snapshot import restore, snapshot
from fedrl.storage.checkpoint import Checkpoint
from fedrl.wire import Reply

SMALL = {"nodes.count": 3, "algo.local-steps": 256, "eval.episodes": 1, "strategy.server-lr": 1.0,
         "strategy.server-lr-end": -1}


def _round(fed: Federation, rnd: int, rng: np.random.Generator) -> np.ndarray:
    """One aggregation of three random replies, then the round ends; returns the new global model."""
    g = fed.models[0]
    replies = [Reply(n, unflatten(flatten(g) + rng.normal(0, 0.01, fed.n_params).astype(np.float32), g), 256, None,
                     {}) for n in range(3)]
    fed.aggregate(replies, rnd)
    fed.completed(rnd)
    return flatten(fed.models[0]).astype(np.float64)


def test_the_kept_model_is_the_bias_corrected_average_and_training_steps_from_the_latest() -> None:
    fed = Federation(from_run_config({**SMALL, "strategy.ema": 0.5}))
    rng = np.random.default_rng(0)
    globals_ = [_round(fed, r, rng) for r in (1, 2, 3)]
    expected = (0.25 * globals_[0] + 0.5 * globals_[1] + globals_[2]) / 1.75
    np.testing.assert_allclose(flatten(fed.server_model()), expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(flatten(fed.server_model()), globals_[2])  # the average, not the latest
    np.testing.assert_array_equal(flatten(fed.models[0]), globals_[2].astype(np.float32))  # what nodes train from


def test_without_ema_the_kept_model_is_the_latest() -> None:
    fed = Federation(from_run_config(SMALL))
    last = _round(fed, 1, np.random.default_rng(0))
    np.testing.assert_array_equal(flatten(fed.server_model()), last.astype(np.float32))


def test_the_average_survives_a_checkpoint_and_a_restore_does_not_fold_the_model_in_twice() -> None:
    over = {**SMALL, "strategy.ema": 0.8}
    fed, rng = Federation(from_run_config(over)), np.random.default_rng(1)
    for r in (1, 2):
        _round(fed, r, rng)
    again = Federation(from_run_config(over))
    ck = snapshot(fed, 0.0)
    restore(again, Checkpoint(ck.meta, ck.arrays))
    np.testing.assert_array_equal(flatten(again.server_model()), flatten(fed.server_model()))
    a, b = _round(fed, 3, np.random.default_rng(2)), _round(again, 3, np.random.default_rng(2))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(flatten(again.server_model()), flatten(fed.server_model()))


@pytest.mark.parametrize("edit, field", [
    (lambda ck: ck.arrays.pop("ema/0"), "ema/0: is missing"),
    (lambda ck: ck.arrays.__setitem__("ema/1", np.zeros(3)), "ema/1: is float64 of shape (3,)"),
    (lambda ck: ck.meta.__setitem__("ema_weight", 0.5), "ema_weight: is 0.5; a number >= 1"),
])
def test_a_checkpoint_with_a_broken_average_is_refused_naming_the_field(edit, field: str) -> None:  # type: ignore[no-untyped-def]
    over = {**SMALL, "strategy.ema": 0.8}
    fed = Federation(from_run_config(over))
    _round(fed, 1, np.random.default_rng(0))
    ck = snapshot(fed, 0.0)
    edit(ck)
    with pytest.raises(RunFileError) as err:
        restore(Federation(from_run_config(over)), ck, "checkpoint.npz")
    assert str(err.value).startswith(f"checkpoint.npz: {field}")


@pytest.mark.parametrize("over, which", [
    ({"strategy.name": "local"}, "strategy.name = local"),
    ({"topology.name": "gossip", "algo.norm-obs": "off"}, "topology.name = gossip"),
])
def test_ema_is_refused_where_each_node_keeps_its_own_model(over: dict[str, object], which: str) -> None:
    with pytest.raises(ConfigError) as info:
        check({"nodes.count": 4, "strategy.ema": 0.9, **over})
    assert str(info.value) == (f"strategy.ema: averages the server's models, but {which} keeps one model per node; "
                               "leave it at 0")


@pytest.mark.parametrize("value", [1.0, -0.5])
def test_ema_outside_zero_one_is_refused(value: float) -> None:
    with pytest.raises(ConfigError, match=r"strategy\.ema.*must be in \[0, 1\) \(0: off\)"):
        check({"strategy.ema": value})
