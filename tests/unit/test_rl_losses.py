"""Unit tests for fedrl.rl.losses: hand-computed PPO loss values."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from fedrl.rl.losses import clipped_surrogate, normalize_advantages, ppo_loss, value_loss

EPS = 0.2


def _logp_for_ratios(ratios: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """(new, old) log-probs whose exp-difference is the given ratios (old = -1)."""
    old = torch.full((len(ratios),), -1.0, dtype=torch.float64)
    new = old + torch.log(torch.tensor(ratios, dtype=torch.float64))
    return new, old


@pytest.mark.parametrize(
    ("ratio", "adv", "expected"),
    [
        # loss = max(-A r, -A clip(r, 0.8, 1.2))
        (0.5, 2.0, -1.0),  # A>0, r below range: max(-1.0, -1.6) = -1.0 (unclipped, pessimistic)
        (1.1, 2.0, -2.2),  # inside the range: -2 * 1.1
        (1.5, 2.0, -2.4),  # A>0, r above range: max(-3.0, -2.4) = -2.4 (clipped)
        (0.5, -2.0, 1.6),  # A<0, r below range: max(1.0, 1.6) = 1.6 (clipped)
        (1.1, -2.0, 2.2),  # inside: 2 * 1.1
        (1.5, -2.0, 3.0),  # A<0, r above range: max(3.0, 2.4) = 3.0 (unclipped, pessimistic)
    ],
)
def test_clipped_surrogate_single_samples(ratio: float, adv: float, expected: float) -> None:
    new, old = _logp_for_ratios([ratio])
    loss, r = clipped_surrogate(new, old, torch.tensor([adv], dtype=torch.float64), EPS)
    assert_close(r, torch.tensor([ratio], dtype=torch.float64))
    assert_close(loss, torch.tensor(expected, dtype=torch.float64))


def test_clipped_surrogate_is_mean_over_batch() -> None:
    new, old = _logp_for_ratios([0.5, 1.1, 1.5, 0.5, 1.1, 1.5])
    adv = torch.tensor([2.0, 2.0, 2.0, -2.0, -2.0, -2.0], dtype=torch.float64)
    loss, _ = clipped_surrogate(new, old, adv, EPS)
    # (-1.0 - 2.2 - 2.4 + 1.6 + 2.2 + 3.0) / 6 = 1.2 / 6 = 0.2
    assert_close(loss, torch.tensor(0.2, dtype=torch.float64))


def test_clipped_surrogate_gradient_is_zero_when_clipped() -> None:
    # A>0 and r = 1.5 > 1.2: the clipped branch wins and has no gradient w.r.t. new_logprob.
    new, old = _logp_for_ratios([1.5])
    new = new.clone().requires_grad_(True)
    loss, _ = clipped_surrogate(new, old, torch.tensor([2.0], dtype=torch.float64), EPS)
    loss.backward()
    assert new.grad is not None
    assert_close(new.grad, torch.zeros(1, dtype=torch.float64))
    # Inside the range: d/dnew (-A exp(new - old)) = -A r = -2 * 1.1 = -2.2
    new2, old2 = _logp_for_ratios([1.1])
    new2 = new2.clone().requires_grad_(True)
    loss2, _ = clipped_surrogate(new2, old2, torch.tensor([2.0], dtype=torch.float64), EPS)
    loss2.backward()
    assert_close(new2.grad, torch.tensor([-2.2], dtype=torch.float64))


NEW_V = torch.tensor([1.0, 3.0], dtype=torch.float64)
OLD_V = torch.tensor([0.5, 2.0], dtype=torch.float64)
RETURNS = torch.tensor([2.0, 2.5], dtype=torch.float64)


def test_value_loss_unclipped() -> None:
    # (1 - 2)^2 = 1, (3 - 2.5)^2 = 0.25 -> 0.5 * (1.25 / 2) = 0.3125
    assert_close(value_loss(NEW_V, OLD_V, RETURNS, 0.2, clip=False), torch.tensor(0.3125, dtype=torch.float64))


def test_value_loss_clipped() -> None:
    # v_clipped = old + clamp(new - old, -0.2, 0.2) = [0.5 + 0.2, 2.0 + 0.2] = [0.7, 2.2]
    # clipped errors: (0.7 - 2)^2 = 1.69, (2.2 - 2.5)^2 = 0.09
    # max with unclipped [1, 0.25] = [1.69, 0.25] -> 0.5 * (1.94 / 2) = 0.485
    assert_close(value_loss(NEW_V, OLD_V, RETURNS, 0.2, clip=True), torch.tensor(0.485, dtype=torch.float64))


def test_value_loss_clipped_equals_unclipped_inside_range() -> None:
    new = torch.tensor([0.6, 2.1], dtype=torch.float64)  # |new - old| = 0.1 <= 0.2
    # (0.6-2)^2 = 1.96, (2.1-2.5)^2 = 0.16 -> 0.5 * 2.12 / 2 = 0.53
    expected = torch.tensor(0.53, dtype=torch.float64)
    assert_close(value_loss(new, OLD_V, RETURNS, 0.2, clip=True), expected)
    assert_close(value_loss(new, OLD_V, RETURNS, 0.2, clip=False), expected)


def test_ppo_loss_total_and_diagnostics() -> None:
    ratios = [0.5, 1.1, 1.5]
    new, old = _logp_for_ratios(ratios)
    adv = torch.tensor([2.0, 2.0, -2.0], dtype=torch.float64)
    entropy = torch.tensor([0.3, 0.6, 0.9], dtype=torch.float64)
    new_v = torch.tensor([1.0, 3.0, 0.0], dtype=torch.float64)
    old_v = torch.tensor([0.5, 2.0, 0.0], dtype=torch.float64)
    ret = torch.tensor([2.0, 2.5, 1.0], dtype=torch.float64)
    parts = ppo_loss(
        new, old, entropy, new_v, old_v, adv, ret, clip_coef=0.2, clip_vloss=False, ent_coef=0.01, vf_coef=0.5
    )
    # policy: (-1.0 - 2.2 + 3.0) / 3 = -0.2 / 3
    pg = -0.2 / 3
    # value (unclipped): 0.5 * (1 + 0.25 + 1) / 3 = 0.375
    # entropy: (0.3 + 0.6 + 0.9) / 3 = 0.6
    # total = pg - 0.01 * 0.6 + 0.5 * 0.375 = -0.0666.. - 0.006 + 0.1875
    f64 = torch.float64
    assert_close(parts.policy, torch.tensor(pg, dtype=f64))
    assert_close(parts.value, torch.tensor(0.375, dtype=f64))
    assert_close(parts.entropy, torch.tensor(0.6, dtype=f64))
    assert_close(parts.total, torch.tensor(pg - 0.006 + 0.1875, dtype=f64))
    # approx_kl = mean((r - 1) - log r)
    kl = sum((r - 1) - math.log(r) for r in ratios) / 3  # = (0.193147 + 0.004690 + 0.094535) / 3
    assert_close(parts.approx_kl, torch.tensor(kl, dtype=f64))
    assert abs(kl - 0.0974573) < 1e-6
    # |r - 1| > 0.2 for r = 0.5 and 1.5 only: 2/3
    assert_close(parts.clip_fraction, torch.tensor(2 / 3, dtype=torch.float32))
    assert not parts.approx_kl.requires_grad


def test_ppo_loss_total_formula_with_clip_vloss() -> None:
    new, old = _logp_for_ratios([0.9, 1.3])
    adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
    ent = torch.tensor([1.0, 2.0], dtype=torch.float64)
    parts = ppo_loss(
        new, old, ent, NEW_V, OLD_V, adv, RETURNS, clip_coef=0.2, clip_vloss=True, ent_coef=0.1, vf_coef=2.0
    )
    # value is the clipped one from test_value_loss_clipped: 0.485; entropy mean 1.5
    assert_close(parts.value, torch.tensor(0.485, dtype=torch.float64))
    assert_close(parts.total, parts.policy - 0.1 * 1.5 + 2.0 * 0.485)


def test_normalize_advantages_mean_zero_std_one() -> None:
    adv = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    out = normalize_advantages(adv)
    # mean 2.5, population std sqrt(1.25) = 1.1180340; (1 - 2.5) / 1.1180340 = -1.3416408
    assert_close(out, torch.tensor([-1.3416408, -0.4472136, 0.4472136, 1.3416408], dtype=torch.float64))
    assert_close(out.mean(), torch.tensor(0.0, dtype=torch.float64))
    assert_close(out.std(unbiased=False), torch.tensor(1.0, dtype=torch.float64))


def test_normalize_advantages_degenerate_batches_are_finite() -> None:
    assert_close(normalize_advantages(torch.tensor([5.0])), torch.tensor([0.0]))
    assert_close(normalize_advantages(torch.full((4,), 3.0)), torch.zeros(4))
