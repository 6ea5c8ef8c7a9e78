"""SAC's networks and losses (Haarnoja et al., ICML 2018 and "SAC algorithms and applications",
2018): a squashed Gaussian actor, twin Q critics with target copies, automatic entropy tuning.

Actions: the actor's Gaussian sample ``u`` is squashed, ``a = scale * tanh(u) + bias`` with
``scale, bias`` from the action bounds, and its log-probability corrected for the squashing,
``log pi(a|s) = log N(u; mu, sigma) - sum log(scale (1 - tanh(u)^2) + 1e-6)``. The bounds are not
weights (non-persistent buffers): a node acts within its own env's bounds, while the federated
tensors are the actor's and critics' layers.

Losses on a batch ``(s, a, R, discount, s')`` (``discount`` = 0 after a termination):
- critics: ``y = R + discount (min_j Q'_j(s', a') - alpha log pi(a'|s'))`` with ``a' ~ pi(s')``;
  each ``Q_j`` regresses ``(Q_j(s, a) - y)^2`` (mean over the batch, summed over the two);
- actor: ``alpha log pi(a~|s) - min_j Q_j(s, a~)`` with ``a~ ~ pi(s)`` reparameterized;
- temperature: ``-log alpha (log pi(a~|s) + H_target)``, ``H_target = -action_dim``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from fedrl.rl.networks import PolicySpec

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # CleanRL's sac_continuous_action bounds


def _mlp(n_in: int, hidden: tuple[int, ...], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    prev = n_in
    for h in hidden:
        layers += [nn.Linear(prev, h), nn.ReLU()]
        prev = h
    layers.append(nn.Linear(prev, n_out))
    return nn.Sequential(*layers)


class SACModel(nn.Module):
    """The federated SAC networks: ``actor`` (mean and log-std heads on one trunk) and the twin
    critics ``q1``, ``q2`` of ``(obs, action)``; ``greedy`` is the squashed mean action."""

    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(self, spec: PolicySpec) -> None:
        super().__init__()
        if spec.action_kind != "continuous":
            raise ValueError("SAC needs continuous actions; use DQN or PPO for discrete ones")
        d, k = spec.obs_dim, spec.action_dim
        self.spec = spec
        self.actor = _mlp(d, spec.hidden, 2 * k)
        self.q1 = _mlp(d + k, spec.hidden, 1)
        self.q2 = _mlp(d + k, spec.hidden, 1)
        low = torch.tensor(spec.action_low or (-1.0,) * k, dtype=torch.float32)
        high = torch.tensor(spec.action_high or (1.0,) * k, dtype=torch.float32)
        self.set_bounds(low, high)

    def set_bounds(self, low: torch.Tensor, high: torch.Tensor) -> None:
        """Act within ``[low, high]`` (a node's own env bounds); not part of the weights."""
        self.register_buffer("scale", (high - low) / 2, persistent=False)
        self.register_buffer("bias", (high + low) / 2, persistent=False)

    def _heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        return mean, log_std

    def sample(self, obs: torch.Tensor, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized action and its log-probability (summed over action dimensions);
        ``noise`` is the standard normal draw (default: ``torch.randn``)."""
        mean, log_std = self._heads(obs)
        std = log_std.exp()
        eps = torch.randn_like(mean) if noise is None else noise
        u = mean + std * eps
        t = torch.tanh(u)
        log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * torch.log(torch.tensor(2 * torch.pi))).sum(-1)
        log_prob = log_prob - torch.log(self.scale * (1 - t.pow(2)) + 1e-6).sum(-1)
        return self.scale * t + self.bias, log_prob

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The squashed mean action: what the exported policy does."""
        mean, _ = self._heads(obs)
        return self.scale * torch.tanh(mean) + self.bias

    def q(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], -1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)

    def critics(self) -> list[nn.Parameter]:
        return [*self.q1.parameters(), *self.q2.parameters()]


class SACLosses(NamedTuple):
    critic: torch.Tensor
    actor: torch.Tensor
    alpha: torch.Tensor
    log_prob: torch.Tensor  # of the actor's fresh actions (detached), for logging


def critic_target(target_q: tuple[torch.Tensor, torch.Tensor], next_log_prob: torch.Tensor, reward: torch.Tensor,
                  discount: torch.Tensor, alpha: float) -> torch.Tensor:
    """``R + discount (min(Q'_1, Q'_2) - alpha log pi(a'|s'))`` (no gradient)."""
    with torch.no_grad():
        return reward + discount * (torch.min(*target_q) - alpha * next_log_prob)


def critic_loss(q: tuple[torch.Tensor, torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(q[0], y) + F.mse_loss(q[1], y)


def actor_loss(q_new: tuple[torch.Tensor, torch.Tensor], log_prob: torch.Tensor, alpha: float) -> torch.Tensor:
    return (alpha * log_prob - torch.min(*q_new)).mean()


def alpha_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()
