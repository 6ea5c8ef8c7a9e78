"""Colored exploration noise (fedrl.rl.colored_noise): unit Gaussian marginals at every step,
correlation over time growing with beta, white noise exactly the generator's own draws."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.rl.colored_noise import colored_noise


def _lag1(x: np.ndarray) -> float:
    return float(np.mean(x[1:] * x[:-1]))


def test_beta_zero_is_the_generators_own_standard_normal_draws() -> None:
    x = colored_noise(0.0, 5, (3, 2), np.random.default_rng(4))
    assert x.shape == (5, 3, 2) and x.dtype == np.float32
    np.testing.assert_array_equal(x, np.random.default_rng(4).standard_normal((5, 3, 2)).astype(np.float32))


@pytest.mark.parametrize("length", [7, 64, 1000])
@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_every_step_is_unit_gaussian(beta: float, length: int) -> None:
    # 20,000 series: the variance at each step is 1 within 5 standard errors (se = sqrt(2/n) = 0.01)
    x = colored_noise(beta, length, (20_000,), np.random.default_rng(0)).astype(np.float64)
    assert np.all(np.abs(x.var(axis=1) - 1) < 0.05)
    assert np.all(np.abs(x.mean(axis=1)) < 0.05)


def test_correlation_over_time_grows_with_beta() -> None:
    lags = [_lag1(colored_noise(b, 256, (2_000,), np.random.default_rng(1))) for b in (0.0, 1.0, 2.0)]
    assert abs(lags[0]) < 0.02 and 0.5 < lags[1] < lags[2] and lags[2] > 0.95


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="beta"):
        colored_noise(-1.0, 8, (1,), np.random.default_rng(0))
    with pytest.raises(ValueError, match="length"):
        colored_noise(1.0, 0, (1,), np.random.default_rng(0))
