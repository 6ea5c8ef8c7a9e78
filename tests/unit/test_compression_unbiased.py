"""Statistical unbiasedness: the mean of many seeded decodes is within a few standard errors of x."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.compression import Compressor, make_compressor

DRAWS = 2000
Z = 5.0  # per-coordinate z-score limit; with ~60 coordinates a false failure has probability ~1e-5


@pytest.mark.parametrize(
    "comp",
    [
        make_compressor("quantize", bits=2),
        make_compressor("quantize", bits=3, chunk=16),
        make_compressor("qsgd", levels=2),
        make_compressor("randk", fraction=0.1),
    ],
    ids=repr,
)
def test_mean_of_decodes_is_x(comp: Compressor) -> None:
    assert comp.unbiased
    x = np.random.default_rng(0).standard_normal(60).astype(np.float32)
    rng = np.random.default_rng(2024)
    draws = np.stack([comp.decode(comp.encode(x, rng)) for _ in range(DRAWS)]).astype(np.float64)
    mean = draws.mean(axis=0)
    se = draws.std(axis=0, ddof=1) / np.sqrt(DRAWS)
    # Coordinates on a grid point have zero variance and must then be exact up to float32 rounding.
    tol = Z * se + 1e-6 * (1 + np.abs(x))
    assert np.all(np.abs(mean - x) <= tol), np.max(np.abs(mean - x) / np.maximum(se, 1e-12))
    # And the estimator really is random (the test is not vacuous).
    assert np.mean(se > 0) > 0.5
    # Aggregate check: the mean squared z-score is about 1 for an unbiased estimator.
    z = (mean - x)[se > 0] / se[se > 0]
    assert np.mean(z**2) < 2.0


def test_biased_compressor_fails_the_same_check() -> None:
    """Sanity: the test above does detect bias (top-k's mean is not x)."""
    comp = make_compressor("topk", fraction=0.1)
    x = np.random.default_rng(0).standard_normal(60).astype(np.float32)
    d = comp.decode(comp.encode(x, np.random.default_rng(0)))
    assert np.max(np.abs(d - x)) > 0.1
