"""Distributed DP's Skellam mechanism: rounding bound, noise shares, accounting, ring coding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrl.privacy import epsilon_after
from fedrl.privacy.skellam import (
    BETA,
    SkellamLedger,
    coding_for,
    conditional_round,
    rounded_l2,
    skellam,
    skellam_epsilon,
    skellam_rdp,
    z_for_target,
)


def test_the_rounding_bound_is_kairouz_et_al_s() -> None:
    # beta = e^-1/2 makes sqrt(2 ln(1/beta)) = 1: sqrt(min(9 + 16/4 + (3 + 4/2), (3 + 4)^2)) = sqrt(18).
    assert BETA == pytest.approx(math.exp(-0.5))
    assert rounded_l2(3.0, 16) == pytest.approx(math.sqrt(18.0), rel=1e-12)
    assert rounded_l2(0.0, 100) == pytest.approx(math.sqrt(min(25 + 5, 100)), rel=1e-12)


def test_conditional_rounding_is_unbiased_and_within_its_bound() -> None:
    rng = np.random.default_rng(0)
    x = np.array([0.3, -1.7, 2.5, 0.0])
    draws = np.array([conditional_round(x, 10.0, rng) for _ in range(20000)])
    assert draws.dtype == np.int64
    np.testing.assert_allclose(draws.mean(axis=0), x, atol=0.02)
    bound = rounded_l2(float(np.linalg.norm(x)), 4)
    assert all(np.linalg.norm(conditional_round(x, bound, rng)) <= bound for _ in range(2000))
    with pytest.raises(RuntimeError, match="norm bound"):
        conditional_round(np.full(4, 1.5), 1.5, rng, tries=50)  # every draw has norm >= 2


def test_skellam_noise_shares_sum_to_the_intended_variance() -> None:
    rng = np.random.default_rng(1)
    assert skellam(10, 0.0, rng).tolist() == [0] * 10
    one = skellam(400_000, 8.0, rng)
    assert one.dtype == np.int64 and one.var() == pytest.approx(16.0, rel=0.01) and abs(one.mean()) < 0.02
    # 5 nodes each adding Sk(mu / 5): the sum is Sk(mu), variance 2 mu.
    total = sum(skellam(400_000, 8.0 / 5, rng) for _ in range(5))
    assert total.var() == pytest.approx(16.0, rel=0.01)


def test_the_skellam_rdp_bound_matches_a_hand_computed_value() -> None:
    # a = 2, mu = 10, l1 = 3, l2 = 2: 2*4/40 + min((2*2*4 + 18) / 1600, 9/40) = 0.2 + 0.02125.
    assert skellam_rdp(2, 10.0, 3.0, 2.0) == pytest.approx(0.22125, rel=1e-12)
    assert skellam_epsilon([], 1.0, 1.0, 1e-5) == 0.0
    assert skellam_epsilon([(0.0, 3)], 1.0, 1.0, 1e-5) == math.inf


def test_with_a_large_scale_skellam_accounting_approaches_the_gaussian() -> None:
    # sigma = z l2 with l2 ~ 1e5 integer units: Skellam is then all but Gaussian.
    c = coding_for(24, 0.3, 211, 32, 20, 3.5)
    assert c.z == pytest.approx(3.5, rel=1e-9)
    eps = c.epsilon([(c.mu, 30)], 1e-5)
    assert eps == pytest.approx(epsilon_after(3.5, 1.0, 30, 1e-5), rel=0.01)
    assert eps >= epsilon_after(3.5, 1.0, 30, 1e-5)  # never below the Gaussian it approximates
    z = z_for_target(8.0, 1e-5, 30, 24, 0.3, 211, 32, 20)
    c = coding_for(24, 0.3, 211, 32, 20, z)
    assert 7.9 <= c.epsilon([(c.mu, 30)], 1e-5) <= 8.0


def test_coded_updates_sum_in_the_ring_to_the_clipped_sum_plus_noise() -> None:
    rng = np.random.default_rng(2)
    n, share, dim, clip = 8, 5, 3000, 0.5
    c = coding_for(20, clip, dim, n, share, 1.0)
    # worst case fits: n l2 + 12 sigma_n < 2^19
    assert n * c.l2 + 12 * math.sqrt(2 * c.mu_with(n)) < 2**19
    updates = [rng.normal(0, 1, dim) for _ in range(n)]
    updates = [u * clip / np.linalg.norm(u) for u in updates]
    ring = sum(c.encode(u, rng).astype(np.uint64) for u in updates) & np.uint64(2**20 - 1)
    got = c.decode_sum(ring)
    noise = got - np.sum(updates, axis=0)
    # noise of n nodes: std sqrt(2 mu n / share) / scale
    assert noise.std() == pytest.approx(math.sqrt(2 * c.mu_with(n)) / c.scale, rel=0.05)
    assert abs(noise.mean()) < 5 * noise.std() / math.sqrt(dim)
    with pytest.raises(ValueError, match="exceeds the clip norm"):
        c.encode(updates[0] * 2, rng)


def test_too_small_a_ring_is_refused_and_the_ledger_composes() -> None:
    with pytest.raises(ValueError, match="cannot hold"):
        coding_for(8, 1.0, 1000, 100, 60, 50.0)
    c = coding_for(24, 0.3, 211, 10, 6, 2.0)
    led = SkellamLedger(c, 1e-5)
    led.step(c.mu)
    led.step(c.mu)
    led.step(c.mu_with(10))
    assert led.steps == 3 and led.history == [(c.mu, 1.0, 2), (c.mu_with(10), 1.0, 1)]
    assert led.epsilon() == skellam_epsilon([(c.mu, 2), (c.mu_with(10), 1)], c.l1, c.l2, 1e-5)
    assert led.epsilon((c.mu, 1.0)) > led.epsilon() > 0
    other = SkellamLedger(c, 1e-5)
    other.load_list(led.to_list())
    assert other.history == led.history
