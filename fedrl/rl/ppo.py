"""The PPO update: minibatch epochs over one rollout (CleanRL's ``ppo.py``, importable).

Reads top to bottom: advantages (GAE), then epochs of shuffled minibatches with the clipped
surrogate, clipped value loss, entropy bonus, optional FedProx proximal term, gradient-norm
clipping and optional early stop on approximate KL.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrl.rl.advantages import gae
from fedrl.rl.losses import normalize_advantages, ppo_loss
from fedrl.rl.networks import ActorCritic
from fedrl.rl.rollout import Rollout


@dataclass(frozen=True)
class PPOHyper:
    """PPO knobs (run-config ``algo.*``)."""

    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float = 0.0  # 0 disables the KL early stop


@dataclass(frozen=True)
class Proximal:
    """FedProx term mu/2 * ||w - anchor||^2 (Li et al., MLSys 2020); mu = 0 disables it."""

    mu: float
    anchor: list[torch.Tensor]


def proximal_term(model: ActorCritic, prox: Proximal) -> torch.Tensor:
    total = torch.zeros(())
    for p, a in zip(model.parameters(), prox.anchor, strict=True):
        total = total + ((p - a) ** 2).sum()
    return 0.5 * prox.mu * total


def ppo_update(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    ro: Rollout,
    hp: PPOHyper,
    generator: torch.Generator,
    prox: Proximal | None = None,
) -> dict[str, float]:
    """One PPO update on rollout ``ro``; mutates ``model`` and ``optimizer``; returns stats."""
    adv, returns = gae(ro.rewards, ro.values, ro.next_values, ro.terminated, ro.done, hp.gamma, hp.gae_lambda)
    n = ro.rewards.numel()
    obs = ro.obs.reshape(n, -1)
    actions = ro.actions.reshape(n, *ro.actions.shape[2:])
    old_logp, old_v = ro.logprobs.reshape(n), ro.values.reshape(n)
    adv, returns = adv.reshape(n), returns.reshape(n)
    mb_size = max(1, n // hp.num_minibatches)
    stats: dict[str, float] = {}
    epochs_done = 0
    for _ in range(hp.update_epochs):
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n - mb_size + 1, mb_size):
            idx = perm[start : start + mb_size]
            new_logp, entropy = model.log_prob_entropy(obs[idx], actions[idx])
            new_v = model.value(obs[idx])
            mb_adv = normalize_advantages(adv[idx]) if hp.norm_adv else adv[idx]
            parts = ppo_loss(
                new_logp, old_logp[idx], entropy, new_v, old_v[idx], mb_adv, returns[idx],
                clip_coef=hp.clip_coef, clip_vloss=hp.clip_vloss,
                ent_coef=hp.ent_coef, vf_coef=hp.vf_coef,
            )
            loss = parts.total
            if prox is not None and prox.mu > 0:
                loss = loss + proximal_term(model, prox)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), hp.max_grad_norm)
            optimizer.step()
        epochs_done += 1
        if hp.target_kl > 0 and float(parts.approx_kl) > hp.target_kl:
            break
    var_y = returns.var()
    explained = float("nan") if var_y == 0 else float(1 - (returns - old_v).var() / var_y)
    stats.update(
        policy_loss=float(parts.policy.detach()), value_loss=float(parts.value.detach()),
        entropy=float(parts.entropy.detach()), approx_kl=float(parts.approx_kl),
        clip_fraction=float(parts.clip_fraction), explained_variance=explained,
        epochs=float(epochs_done),
    )
    return stats
