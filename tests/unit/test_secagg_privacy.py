"""What the server sees: a single masked input is uniform on the ring, whatever the input."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from tooling.secagg_round import simulate_round

from fedrl.secagg import make_params

BITS = 8
BINS = 1 << BITS
LENGTH = BINS * 200  # 200 expected hits per value
# Chi-square critical value for 255 degrees of freedom at p = 1e-6 (scipy.stats.chi2.isf(1e-6, 255)).
# The masks come from os.urandom and cannot be seeded, so a conservative p keeps the test from flaking.
CRITICAL = 377.08


def chi_square(values: np.ndarray) -> float:
    counts = np.bincount(values.astype(np.int64), minlength=BINS)
    expected = values.size / BINS
    return float(((counts - expected) ** 2 / expected).sum())


def masked_inputs(xs: dict[int, np.ndarray], k: int = 0) -> dict[int, np.ndarray]:
    p = make_params(1, os.urandom(16), sorted(xs), k, 0.5, BITS, LENGTH, 0)
    seen: dict[int, Any] = {}

    def spy(stage: str, msgs: dict[int, Any]) -> dict[int, Any]:
        if stage == "mask":
            seen.update({u: m.y for u, m in msgs.items()})
        return msgs

    out = simulate_round(xs, p, tamper=spy)
    assert out.total.tolist() == (sum(xs.values()) % BINS).tolist()
    return seen


@pytest.mark.parametrize("value", [0, 77])
def test_single_masked_input_is_uniform(value: int) -> None:
    xs = {u: np.full(LENGTH, value, dtype=np.uint64) for u in range(4)}
    for y in masked_inputs(xs).values():
        assert chi_square(y) < CRITICAL
        # and in particular it does not look like the input
        assert np.count_nonzero(y == value) < 2 * LENGTH / BINS


def test_masked_input_of_structured_vector_is_uniform() -> None:
    x = (np.arange(LENGTH) % BINS).astype(np.uint64)  # every value equally often: y - x must still be uniform
    xs = {0: x, 1: np.zeros(LENGTH, dtype=np.uint64), 2: x.copy()}
    ys = masked_inputs(xs)
    assert chi_square((ys[0] - x) % np.uint64(BINS)) < CRITICAL
    assert chi_square(ys[0]) < CRITICAL


def test_fresh_masks_every_round() -> None:
    xs = {u: np.zeros(LENGTH, dtype=np.uint64) for u in range(3)}
    first, second = masked_inputs(xs), masked_inputs(xs)
    assert np.count_nonzero(first[0] == second[0]) < 2 * LENGTH / BINS


def test_chi_square_detects_bias() -> None:
    # Sanity check of the statistic: a mildly biased sample is flagged.
    rng = np.random.default_rng(0)
    biased = np.concatenate([rng.integers(0, BINS, LENGTH - 2000), np.zeros(2000, dtype=np.int64)])
    assert chi_square(biased) > CRITICAL
    assert chi_square(rng.integers(0, BINS, LENGTH)) < CRITICAL
