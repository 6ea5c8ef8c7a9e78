"""fedrl's secure aggregation and Flower's legacy SecAgg+ agree on the same inputs.

Both compute a weighted mean of quantized, masked vectors. fedrl: each node codes
``ratio_i * x_i`` with ``bits``-bit stochastic rounding over ``[-clip, clip]`` (error below one
step ``2 clip / (2**bits - 1)`` per node) and the weight ratio as one more code, so the decoded
mean is within ``n * step / sum(ratio)`` of the exact weighted mean, plus the weight code's
rounding. Flower (see simulations/tooling/legacy_secaggplus.py): within ``n * (2C/Q) / sum(d_i)``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from tooling.legacy_secaggplus import run_flower_secaggplus
from tooling.secagg_round import run_round

from fedrl.compression.ring_codes import RingCoding, required_ring_bits
from fedrl.model.layout import flatten
from fedrl.secagg import make_params

pytestmark = pytest.mark.slow


def test_our_secure_mean_agrees_with_flowers_secaggplus() -> None:
    n, size = 5, 400
    rng = np.random.default_rng(7)
    inputs = [[rng.uniform(-1, 1, size).astype(np.float32)] for _ in range(n)]
    exact = np.mean([c[0].astype(np.float64) for c in inputs], axis=0)

    flower = run_flower_secaggplus(inputs, num_shares=1.0, reconstruction_threshold=0.6, max_weight=1.0)
    flower_bound = n * (2 * 8.0 / 2**22) / n

    coding = RingCoding(bits=12, clip=1.0, weight_bound=1.0)
    bits = required_ring_bits(12, n)
    codes = {i: coding.encode(flatten(c), 1, np.random.default_rng(i)) for i, c in enumerate(inputs)}
    params = make_params(1, os.urandom(16), range(n), 0, 0.6, bits, size + 1, graph_seed=3)
    mean, ratio_sum = coding.decode_sum(run_round(codes, params), n)
    ours_bound = n * (2 * 1.0 / coding.levels) / ratio_sum
    assert ratio_sum == n  # weight 1 codes exactly

    assert np.abs(flower.aggregate[0] - exact).max() < flower_bound
    assert np.abs(mean - exact).max() < ours_bound
    assert np.abs(mean - flower.aggregate[0]).max() < ours_bound + flower_bound
    # ...and the difference is quantization noise, not a systematic offset.
    assert abs(float(np.mean(mean - flower.aggregate[0]))) < ours_bound / 4
