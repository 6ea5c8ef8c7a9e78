"""PPO losses (Schulman et al., 2017, arXiv:1707.06347), as pure functions.

The implementation details follow CleanRL's ``ppo.py`` and "The 37 Implementation Details of
PPO" (Huang et al., ICLR Blog Track 2022): per-minibatch advantage normalization, clipped
value loss, approximate KL from ``(ratio - 1) - log(ratio)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch


class PPOLossParts(NamedTuple):
    """Scalar tensors of one minibatch; ``total`` is what gets differentiated."""

    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_fraction: torch.Tensor


def normalize_advantages(adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Zero mean, unit std (population std, so a batch of one maps to 0)."""
    return (adv - adv.mean()) / (adv.std(unbiased=False) + eps)


def clipped_surrogate(
    new_logprob: torch.Tensor, old_logprob: torch.Tensor, adv: torch.Tensor, clip_coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(loss, ratio)``; loss = mean(max(-A r, -A clip(r, 1-ε, 1+ε)))."""
    ratio = torch.exp(new_logprob - old_logprob)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    return torch.max(unclipped, clipped).mean(), ratio


# The floor's slope, per nat below it, in units of the (normalized) surrogate: steep enough that a
# state's policy gradient cannot push its entropy through the floor, so the floor acts as a
# constraint rather than as a second bonus.
ENTROPY_FLOOR_SLOPE = 1.0


def entropy_floor_penalty(entropy: torch.Tensor, floor: float) -> torch.Tensor:
    """``ENTROPY_FLOOR_SLOPE * relu(floor - H(s))`` per state (the input's shape; 0 where
    ``floor <= 0``). A hinge, so a state whose policy keeps ``floor`` nats feels nothing: unlike an
    entropy bonus it does not pull a converged policy towards uniform, and it is per state, so
    DP-SGD's per-sample gradients see one term per example."""
    if floor <= 0:
        return torch.zeros_like(entropy)
    return ENTROPY_FLOOR_SLOPE * torch.relu(floor - entropy)


def value_loss(
    new_value: torch.Tensor,
    old_value: torch.Tensor,
    returns: torch.Tensor,
    clip_coef: float,
    clip: bool,
) -> torch.Tensor:
    """0.5 * mean squared error, optionally with the value clipped around ``old_value``."""
    unclipped = (new_value - returns) ** 2
    if not clip:
        return 0.5 * unclipped.mean()
    v_clipped = old_value + torch.clamp(new_value - old_value, -clip_coef, clip_coef)
    return 0.5 * torch.max(unclipped, (v_clipped - returns) ** 2).mean()


def ppo_loss(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    entropy: torch.Tensor,
    new_value: torch.Tensor,
    old_value: torch.Tensor,
    adv: torch.Tensor,
    returns: torch.Tensor,
    *,
    clip_coef: float,
    clip_vloss: bool,
    ent_coef: float,
    vf_coef: float,
    ent_floor: float = 0.0,
) -> PPOLossParts:
    """Total loss = policy - ent_coef * entropy + floor penalty + vf_coef * value (advantages as
    given; the penalty is ``entropy_floor_penalty``'s mean, 0 when ``ent_floor`` is 0)."""
    pg, ratio = clipped_surrogate(new_logprob, old_logprob, adv, clip_coef)
    v = value_loss(new_value, old_value, returns, clip_coef, clip_vloss)
    ent = entropy.mean()
    with torch.no_grad():
        log_ratio = new_logprob - old_logprob
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean()
    total = pg - ent_coef * ent + vf_coef * v
    if ent_floor > 0:
        total = total + entropy_floor_penalty(entropy, ent_floor).mean()
    return PPOLossParts(total, pg, v, ent, approx_kl, clip_fraction)


def proximal_penalty(params: Iterable[torch.Tensor], anchor: list[torch.Tensor], mu: float) -> torch.Tensor:
    """FedProx's ``mu / 2 * ||w - anchor||^2`` over ``params`` (Li et al., MLSys 2020): keeps a
    node's local training near the weights it received this round."""
    total = torch.zeros(())
    for p, a in zip(params, anchor, strict=True):
        total = total + ((p - a) ** 2).sum()
    return 0.5 * mu * total
