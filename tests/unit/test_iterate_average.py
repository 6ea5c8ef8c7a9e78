"""``fedrl.server.iterate_average``: the bias-corrected moving average of the server's models (strategy.ema)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.server.iterate_average import IterateAverage


def _avg(decay: float, values: list[float]) -> IterateAverage:
    a = IterateAverage(decay)
    for v in values:
        a.update([np.array([v], np.float32), np.full((2, 2), 2 * v, np.float32)])
    return a


def test_the_average_is_the_bias_corrected_weighted_mean() -> None:
    a = _avg(0.5, [1.0, 3.0, 5.0])
    # weights 0.25, 0.5, 1 over 1.75: (0.25 + 1.5 + 5) / 1.75
    assert a.weight == 1.75
    assert a.mean is not None
    assert a.mean[0][0] == pytest.approx(6.75 / 1.75, rel=1e-15)
    np.testing.assert_allclose(a.mean[1], np.full((2, 2), 2 * 6.75 / 1.75), rtol=1e-15)
    assert [m.dtype for m in a.model()] == [np.float32, np.float32]


def test_the_first_model_is_its_own_average_and_decay_zero_keeps_the_latest() -> None:
    assert _avg(0.9, [4.0]).model()[0][0] == 4.0
    assert _avg(0.0, [4.0, -1.0, 7.0]).model()[0][0] == 7.0


def test_the_average_does_not_alias_the_models_it_was_given() -> None:
    w = [np.array([1.0], np.float32)]
    a = IterateAverage(0.5)
    a.update(w)
    w[0][0] = 100.0
    assert a.model()[0][0] == 1.0


def test_a_checkpoint_round_trip_continues_the_same_average() -> None:
    a = _avg(0.8, [1.0, 2.0])
    b = IterateAverage(0.8)
    b.load_checkpoint(*a.to_checkpoint(), n=2)
    for x in (a, b):
        x.update([np.array([9.0], np.float32), np.full((2, 2), 18.0, np.float32)])
    np.testing.assert_array_equal(b.model()[0], a.model()[0])
    assert b.weight == a.weight


def test_an_empty_average_checkpoints_as_empty_and_has_no_model() -> None:
    a = IterateAverage(0.5)
    meta, arrays = a.to_checkpoint()
    assert (meta, arrays) == ({"ema_weight": 0.0}, {})
    b = IterateAverage(0.5)
    b.load_checkpoint(meta, arrays, n=2)
    assert b.mean is None
    with pytest.raises(ValueError, match="no model"):
        b.model()


@pytest.mark.parametrize("decay", [-0.1, 1.0, 1.5])
def test_a_decay_outside_zero_one_is_refused(decay: float) -> None:
    with pytest.raises(ValueError, match=r"decay must be in \[0, 1\)"):
        IterateAverage(decay)
