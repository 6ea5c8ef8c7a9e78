"""DQN's network and losses: Double DQN (van Hasselt et al., AAAI 2016) with n-step targets,
an optional dueling head (Wang et al., ICML 2016), the Huber loss and importance weights of
prioritized replay (Schaul et al., ICLR 2016).

The target of a transition ``(s, a, R, discount, s')`` (``fedrl.rl.nstep``) is
``R + discount * Q_target(s', argmax_b Q_online(s', b))``: the online network picks the action,
the target network values it, which removes the max-operator's overestimation.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedrl.rl.networks import PolicySpec


def _trunk(n_in: int, hidden: tuple[int, ...]) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    prev = n_in
    for h in hidden:
        layers += [nn.Linear(prev, h), nn.ReLU()]
        prev = h
    return nn.Sequential(*layers), prev


class QNetwork(nn.Module):
    """Q values of every discrete action: an MLP (ReLU, PyTorch's default init), or with
    ``dueling`` a shared trunk, a value head and an advantage head combined as
    ``V(s) + A(s, a) - mean_b A(s, b)``. Every tensor is federated (the whole ``state_dict``)."""

    def __init__(self, spec: PolicySpec, dueling: bool = False) -> None:
        super().__init__()
        if spec.action_kind != "discrete":
            raise ValueError("DQN needs discrete actions; use SAC for continuous ones")
        self.spec, self.dueling = spec, dueling
        self.trunk, width = _trunk(spec.obs_dim, spec.hidden)
        self.head = nn.Linear(width, spec.action_dim)
        if dueling:
            self.value = nn.Linear(width, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        h = self.trunk(obs)
        a = self.head(h)
        if not self.dueling:
            return a
        return self.value(h) + a - a.mean(-1, keepdim=True)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """argmax_a Q(obs, a): the action the exported policy takes."""
        return self(obs).argmax(-1)


def double_dqn_target(q_next_online: torch.Tensor, q_next_target: torch.Tensor, reward: torch.Tensor,
                      discount: torch.Tensor) -> torch.Tensor:
    """``reward + discount * q_next_target[argmax q_next_online]`` per row (no gradient)."""
    with torch.no_grad():
        best = q_next_online.argmax(-1, keepdim=True)
        return reward + discount * q_next_target.gather(-1, best).squeeze(-1)


def dqn_loss(q: torch.Tensor, action: torch.Tensor, target: torch.Tensor, weights: torch.Tensor,
             huber_delta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The importance-weighted Huber loss of ``Q(s, a)`` against ``target`` and the TD errors
    ``target - Q(s, a)`` (detached: the replay's new priorities)."""
    q_sa = q.gather(-1, action.long().view(-1, 1)).squeeze(-1)
    per_row = F.huber_loss(q_sa, target, reduction="none", delta=huber_delta)
    return (weights * per_row).mean(), (target - q_sa).detach()


def epsilon_at(progress: float, start: float, end: float, fraction: float) -> float:
    """ε-greedy's exploration rate at ``progress`` (0..1) of the run: linear from ``start`` to
    ``end`` over the first ``fraction`` of it, then ``end``."""
    if fraction <= 0:
        return end
    return start + (end - start) * min(1.0, progress / fraction)


def lr_at(progress: float, lr: float, end: float) -> float:
    """Adam's learning rate at ``progress`` (0..1) of the run: linear from ``lr`` to ``end``
    (``dqn.lr-end``), or ``lr`` throughout when ``end`` is negative (-1: off)."""
    return lr if end < 0 else lr + (end - lr) * min(1.0, max(0.0, progress))


def beta_at(progress: float, start: float) -> float:
    """The importance-sampling exponent at ``progress`` of the run: ``start`` annealed linearly to 1."""
    return start + (1.0 - start) * min(1.0, max(0.0, progress))


def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target <- tau * online + (1 - tau) * target`` (``tau = 1``: a copy)."""
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            t.mul_(1.0 - tau).add_(o, alpha=tau)


def greedy_or_random(q: torch.Tensor, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """ε-greedy actions for a batch of Q rows: each row explores (a uniform action) with
    probability ``epsilon``, else takes its argmax."""
    n, k = q.shape
    explore = rng.random(n) < epsilon
    return np.where(explore, rng.integers(0, k, n), q.argmax(-1).numpy()).astype(np.int64)
