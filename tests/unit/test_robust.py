"""Robust aggregation rules on hand-computed cases, and Krum against its stated number of attackers."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.aggregation.robust import coordinate_median, krum_scores, multi_krum, robust_aggregate, trimmed_mean


def test_median_and_trimmed_mean_by_hand() -> None:
    u = np.array([[1.0, 5.0], [2.0, 0.0], [10.0, 3.0]])
    np.testing.assert_array_equal(coordinate_median(u), [2.0, 3.0])
    np.testing.assert_array_equal(coordinate_median(np.array([[1.0], [2.0], [3.0], [100.0]])), [2.5])
    np.testing.assert_array_equal(trimmed_mean(np.array([[1.0], [2.0], [3.0], [100.0]]), 1), [2.5])
    np.testing.assert_array_equal(trimmed_mean(u, 0), u.mean(axis=0).astype(np.float32))
    with pytest.raises(ValueError, match="leaves none"):
        trimmed_mean(u, 2)


def test_krum_scores_and_choices_by_hand() -> None:
    u = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [100.0, 100.0]])
    # f = 0, n - f - 2 = 2 nearest: a: 1 + 1; b: 1 + 2; c: 1 + 2; d: 19801 + 19801
    np.testing.assert_allclose(krum_scores(u, 0), [2.0, 3.0, 3.0, 39602.0])
    np.testing.assert_array_equal(multi_krum(u, 0, 1), [0.0, 0.0])
    np.testing.assert_allclose(multi_krum(u, 0, 3), [1 / 3, 1 / 3], rtol=1e-6)
    with pytest.raises(ValueError, match="n > 2f \\+ 2"):
        krum_scores(u, 1)


def test_krum_tolerates_f_colluding_attackers_when_n_exceeds_2f_plus_2() -> None:
    rng = np.random.default_rng(0)
    honest = 1.0 + 0.1 * rng.standard_normal((5, 20))
    attackers = np.full((2, 20), -50.0)  # identical, so they vouch for each other
    u = np.concatenate([attackers, honest])
    chosen = multi_krum(u, 2, 1)
    assert any(np.allclose(chosen, h.astype(np.float32)) for h in honest)
    assert np.all(multi_krum(u, 2, 3) > 0.5)  # multi-krum's 3 best are honest too
    # the plain mean is dragged far off
    assert np.all(u.mean(axis=0) < -10)


def test_the_rule_dispatch_uses_each_rules_settings() -> None:
    u = np.array([[0.0], [1.0], [2.0], [3.0], [100.0]])
    assert robust_aggregate("median", u, 1, 0.2, 0)[0] == 2.0
    assert robust_aggregate("trimmed-mean", u, 1, 0.2, 0)[0] == 2.0  # trims 1 each side
    assert robust_aggregate("multi-krum", u, 1, 0.0, 0)[0] == pytest.approx(1.5)  # m = n - f = 4: 0..3
    with pytest.raises(ValueError, match="one of"):
        robust_aggregate("mean", u, 0, 0.0, 0)
