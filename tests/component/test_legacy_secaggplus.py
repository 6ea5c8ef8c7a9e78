"""Flower's own legacy SecAgg+ (run for real through the Simulation Runtime) aggregates as documented.

Error bound (see simulations/tooling/legacy_secaggplus.py): client i scales its vector by
d_i = round(w_i / max_weight * Q) / Q, quantizes with step 2C/Q (C = clipping_range,
Q = quantization_range) by stochastic rounding (error below one step), and the server divides the
unmasked sum by sum(d_i). So each element of the result is within n * (2C/Q) / sum(d_i) of
sum(d_i x_i) / sum(d_i). Equal weights at Flower's defaults (C=8, Q=2**22, max_weight=1000, w=1):
2C / (Q * d) = 16 / 4194 ~ 3.8e-3.
"""

from __future__ import annotations

import numpy as np
import pytest
from tooling.legacy_secaggplus import run_flower_secaggplus

pytestmark = pytest.mark.slow

C, Q = 8.0, 2**22


def _inputs(n: int, seed: int, size: int = 30) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.uniform(-1, 1, size).astype(np.float32), rng.uniform(-1, 1, (4, 5)).astype(np.float32)]
            for _ in range(n)]


def _flower_weights(weights: list[int], max_weight: float) -> np.ndarray:
    return np.array([round(w / max_weight * Q) / Q for w in weights])


def _bound(d: np.ndarray) -> float:
    return len(d) * (2 * C / Q) / float(d.sum())


def test_secaggplus_returns_the_mean_within_quantization_error() -> None:
    inputs = _inputs(4, seed=1, size=1000)  # big enough to tell int64 from int32 on the wire
    res = run_flower_secaggplus(inputs, num_shares=3, reconstruction_threshold=2)
    bound = _bound(_flower_weights([1] * 4, 1000.0))
    assert 3.7e-3 < bound < 3.9e-3
    assert [a.shape for a in res.aggregate] == [a.shape for a in inputs[0]]
    for k, got in enumerate(res.aggregate):
        assert got.dtype == np.float64
        want = np.mean([c[k].astype(np.float64) for c in inputs], axis=0)
        assert np.abs(got - want).max() < bound
    # four stages; the masked vector travels as int64 (8 bytes a parameter, plus the weight factor)
    assert [s.name for s in res.stages] == ["setup", "share-keys", "collect-masked-vectors", "unmask"]
    assert 4 * 8 * 1021 <= res.stages[2].bytes_up < 4 * (8 * 1021 + 2500)
    assert res.bytes_up == sum(s.bytes_up for s in res.stages) and res.bytes_down > 0 and res.seconds > 0


def test_secaggplus_weights_by_num_examples() -> None:
    inputs, weights, max_weight = _inputs(3, seed=2), [1, 2, 5], 5.0
    res = run_flower_secaggplus(inputs, num_shares=1.0, reconstruction_threshold=1.0, weights=weights,
                                max_weight=max_weight)
    d = _flower_weights(weights, max_weight)
    bound = _bound(d)  # 16 / Q * 3 / 1.6 ~ 7.2e-6
    for k, got in enumerate(res.aggregate):
        stack = np.stack([c[k].astype(np.float64) for c in inputs])
        assert np.abs(got - np.average(stack, axis=0, weights=d)).max() < bound
        # d is proportional to the weights here up to rounding, so numpy's weighted mean agrees too
        assert np.abs(got - np.average(stack, axis=0, weights=weights)).max() < 2 * bound


def test_plain_fedavg_path_is_the_exact_mean_and_sends_float32() -> None:
    inputs = _inputs(3, seed=3)
    res = run_flower_secaggplus(inputs, num_shares=3, reconstruction_threshold=2, secure=False)
    assert [s.name for s in res.stages] == ["fit"]
    for k, got in enumerate(res.aggregate):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, np.mean([c[k] for c in inputs], axis=0), rtol=0, atol=1e-6)
    assert 3 * 4 * 50 <= res.bytes_up < 3 * (4 * 50 + 2500)
