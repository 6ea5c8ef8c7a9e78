"""Asynchronous rules: staleness weights, FedBuff's buffered mean, FedAsync's mix, version bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.aggregation.asynchronous import Buffered, Versions, async_mix, buffered_mean, staleness_weight


def test_staleness_weights() -> None:
    assert staleness_weight(0, 0.5) == 1.0
    assert staleness_weight(3, 0.5) == 0.5  # 1 / sqrt(4)
    assert staleness_weight(7, 0.0) == 1.0
    with pytest.raises(ValueError):
        staleness_weight(-1, 0.5)


def test_buffered_mean_weighs_by_env_steps_and_staleness() -> None:
    a = Buffered(0, [np.asarray([4.0], np.float32)], 100, version=5)  # fresh at 5
    b = Buffered(1, [np.asarray([8.0], np.float32)], 300, version=2)  # 3 versions old: weight 1/2
    # (1 x 100 x 4 + 0.5 x 300 x 8) / (100 + 300) = (400 + 1200) / 400 = 4
    np.testing.assert_array_equal(buffered_mean([a, b], 5, 0.5)[0], [4.0])
    # no staleness: the env-step weighted mean, (400 + 2400) / 400 = 7
    np.testing.assert_array_equal(buffered_mean([a, b], 5, 0.0)[0], [7.0])


def test_async_mix() -> None:
    out = async_mix([np.asarray([1.0, 2.0], np.float32)], [np.asarray([3.0, 0.0], np.float32)], 0.25)
    np.testing.assert_array_equal(out[0], [1.5, 1.5])


def test_versions_are_kept_while_used_and_copied() -> None:
    v = Versions()
    model = [np.zeros(2, np.float32)]
    v.acquire(0, model)
    v.acquire(0, model)
    model[0] += 1  # the server moves on; in-flight nodes started from the old weights
    np.testing.assert_array_equal(v.release(0)[0], [0.0, 0.0])
    assert 0 in v.models
    v.release(0)
    assert v.models == {} and v.users == {}
