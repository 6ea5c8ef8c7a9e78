"""SAC's maths (issue 17): the squashed Gaussian's action and log-probability, the critic target
and the three losses, on tiny batches computed by hand (numpy, independently of torch's
distributions)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedrl.rl.networks import PolicySpec
from fedrl.rl.sac import LOG_STD_MAX, LOG_STD_MIN, SACModel, actor_loss, alpha_loss, critic_loss, critic_target

SPEC = PolicySpec(3, "continuous", 1, (4,), (-2.0,), (2.0,))


def _model_with_heads(mean: float, raw_log_std: float) -> SACModel:
    """An actor whose output is (mean, raw log-std) for every observation (zero weights, set biases)."""
    m = SACModel(SPEC)
    with torch.no_grad():
        for p in m.actor.parameters():
            p.zero_()
        m.actor[-1].bias.copy_(torch.tensor([mean, raw_log_std]))
    return m


def test_squashed_gaussian_action_and_log_probability_by_hand() -> None:
    m = _model_with_heads(0.3, 0.0)
    obs, eps = torch.zeros(2, 3), torch.tensor([[0.5], [-1.2]])
    action, log_prob = m.sample(obs, eps)
    log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (math.tanh(0.0) + 1)  # -1.5
    std = math.exp(log_std)
    for i, e in enumerate([0.5, -1.2]):
        u = 0.3 + std * e
        want_a = 2.0 * math.tanh(u)  # bounds [-2, 2]: scale 2, bias 0
        gauss = -0.5 * e * e - log_std - 0.5 * math.log(2 * math.pi)
        want_lp = gauss - math.log(2.0 * (1 - math.tanh(u) ** 2) + 1e-6)
        assert action[i, 0].item() == pytest.approx(want_a, rel=1e-6)
        assert log_prob[i].item() == pytest.approx(want_lp, rel=1e-5)
    assert m.greedy(obs)[0, 0].item() == pytest.approx(2.0 * math.tanh(0.3), rel=1e-6)


def test_bounds_are_not_weights_and_follow_each_node() -> None:
    m = SACModel(SPEC)
    assert not any(k in ("scale", "bias") for k in m.state_dict())
    assert [k.split(".")[0] for k in m.state_dict()][::2] == ["actor", "actor", "q1", "q1", "q2", "q2"]
    m.set_bounds(torch.tensor([0.0]), torch.tensor([1.0]))  # a node with other bounds, same weights
    a, _ = m.sample(torch.zeros(500, 3))
    assert 0.0 <= a.min().item() and a.max().item() <= 1.0
    with pytest.raises(ValueError, match="continuous"):
        SACModel(PolicySpec(3, "discrete", 2, (4,)))


def test_critic_target_uses_the_smaller_twin_and_the_entropy_bonus() -> None:
    q1, q2 = torch.tensor([3.0, 5.0]), torch.tensor([4.0, 1.0])
    y = critic_target((q1, q2), torch.tensor([-1.0, 2.0]), torch.tensor([1.0, 0.5]), torch.tensor([0.9, 0.0]), 0.2)
    # row 0: 1 + 0.9 * (min(3, 4) - 0.2 * -1) = 1 + 0.9 * 3.2; row 1 terminal: 0.5
    np.testing.assert_allclose(y.numpy(), [1 + 0.9 * 3.2, 0.5], rtol=1e-6)


def test_losses_by_hand() -> None:
    q = (torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0]))
    y = torch.tensor([2.0, 2.0])
    # ((1-2)^2 + 0) / 2 + ((0-2)^2 + (4-2)^2) / 2 = 0.5 + 4
    assert critic_loss(q, y).item() == pytest.approx(4.5)
    log_prob = torch.tensor([-1.0, 0.5])
    # mean(0.1 * lp - min(q1, q2)) = mean(-0.1 - 0, 0.05 - 2)
    assert actor_loss(q, log_prob, 0.1).item() == pytest.approx(((-0.1 - 0.0) + (0.05 - 2.0)) / 2)
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    loss = alpha_loss(log_alpha, log_prob, target_entropy=-1.0)
    # -log_alpha * mean(lp + H) = -log(0.5) * mean(-2, -0.5)
    assert loss.item() == pytest.approx(-math.log(0.5) * (-1.25))
    loss.backward()
    assert log_alpha.grad is not None
    assert log_alpha.grad.item() == pytest.approx(1.25)  # entropy above target (lp + H < 0): alpha goes down


def test_proximal_penalty_by_hand() -> None:
    from fedrl.rl.losses import proximal_penalty

    w = [torch.tensor([1.0, 2.0]), torch.tensor([[3.0]])]
    anchor = [torch.tensor([0.0, 2.0]), torch.tensor([[1.0]])]
    # 0.1 / 2 * ((1 - 0)^2 + 0 + (3 - 1)^2) = 0.05 * 5
    assert proximal_penalty(w, anchor, 0.1).item() == pytest.approx(0.25)
