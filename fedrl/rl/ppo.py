"""The PPO update: minibatch epochs over one rollout (CleanRL's ``ppo.py``, importable).

Reads top to bottom: advantages (GAE), then epochs of minibatches with the clipped surrogate,
clipped value loss, entropy bonus, optional FedProx proximal term, a gradient step and optional
early stop on approximate KL.

How minibatches are drawn and how a loss becomes a step is a ``Stepper``: ``SGDStep`` (shuffled
minibatches of transitions, global gradient-norm clip, the optimizer's step) by default; DP-SGD
(``fedrl.rl.dpsgd.DPSGDStep``: Poisson samples of rollout segments, per-segment clipping and
noise) plugs into the same loop, so there is one PPO update, not a private copy of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from fedrl.rl.advantages import gae
from fedrl.rl.losses import normalize_advantages, ppo_loss, proximal_penalty
from fedrl.rl.networks import ActorCritic
from fedrl.rl.rollout import Rollout


@dataclass(frozen=True)
class PPOHyper:
    """PPO knobs (run-config ``ppo.*``)."""

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
    ent_floor: float = 0.0  # nats a state's policy keeps (losses.entropy_floor_penalty); 0: off


@dataclass(frozen=True)
class Proximal:
    """FedProx term mu/2 * ||w - anchor||^2 (Li et al., MLSys 2020); mu = 0 disables it."""

    mu: float
    anchor: list[torch.Tensor]


def proximal_term(model: ActorCritic, prox: Proximal) -> torch.Tensor:
    return proximal_penalty(model.parameters(), prox.anchor, prox.mu)


class Batch(NamedTuple):
    """The update's examples, first dimension indexed by a minibatch's indices."""

    obs: torch.Tensor
    actions: torch.Tensor
    old_logp: torch.Tensor
    old_v: torch.Tensor
    adv: torch.Tensor
    returns: torch.Tensor


class Stepper(Protocol):
    """How the update turns one rollout into minibatch steps (see the module doc)."""

    normalize_minibatch_adv: bool  # normalize advantages per minibatch (else ``examples`` did)

    def examples(self, ro: Rollout, adv: torch.Tensor, returns: torch.Tensor) -> Batch:
        """The rollout as examples (transitions, or segments for DP-SGD)."""
        ...

    def epoch(self, n: int) -> Iterator[torch.Tensor]:
        """One epoch's minibatch indices into ``n`` examples (an index set may be empty)."""
        ...

    def step(self, model: ActorCritic, loss: torch.Tensor | None) -> None:
        """One optimizer step on ``loss`` (None: an empty minibatch, still a step for DP-SGD)."""
        ...


class SGDStep:
    """Plain PPO: shuffled minibatches of ``n // num_minibatches`` transitions drawn with
    ``generator``, the global gradient-norm clip ``max_grad_norm``, the optimizer's step."""

    normalize_minibatch_adv = True

    def __init__(self, optimizer: torch.optim.Optimizer, hp: PPOHyper, generator: torch.Generator) -> None:
        self.optimizer, self.hp, self.generator = optimizer, hp, generator

    def examples(self, ro: Rollout, adv: torch.Tensor, returns: torch.Tensor) -> Batch:
        n = ro.rewards.numel()
        return Batch(ro.obs.reshape(n, -1), ro.actions.reshape(n, *ro.actions.shape[2:]), ro.logprobs.reshape(n),
                     ro.values.reshape(n), adv.reshape(n), returns.reshape(n))

    def epoch(self, n: int) -> Iterator[torch.Tensor]:
        mb_size = max(1, n // self.hp.num_minibatches)
        perm = torch.randperm(n, generator=self.generator)
        for start in range(0, n - mb_size + 1, mb_size):
            yield perm[start : start + mb_size]

    def step(self, model: ActorCritic, loss: torch.Tensor | None) -> None:
        assert loss is not None  # a permutation's minibatches are never empty
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), self.hp.max_grad_norm)
        self.optimizer.step()


def ppo_update(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    ro: Rollout,
    hp: PPOHyper,
    generator: torch.Generator,
    prox: Proximal | None = None,
    stepper: Stepper | None = None,
) -> dict[str, float]:
    """One PPO update on rollout ``ro``; mutates ``model`` and ``optimizer``; returns stats of
    the last minibatch (and explained variance, epochs run). ``stepper`` defaults to ``SGDStep``."""
    stepper = stepper or SGDStep(optimizer, hp, generator)
    adv, returns = gae(ro.rewards, ro.values, ro.next_values, ro.terminated, ro.done, hp.gamma, hp.gae_lambda)
    data = stepper.examples(ro, adv, returns)
    n = data.obs.shape[0]
    stats: dict[str, float] = {}
    parts = None
    epochs_done = 0
    for _ in range(hp.update_epochs):
        for idx in stepper.epoch(n):
            if idx.numel() == 0:
                stepper.step(model, None)
                continue
            new_logp, entropy = model.log_prob_entropy(data.obs[idx], data.actions[idx])
            new_v = model.value(data.obs[idx])
            mb_adv = normalize_advantages(data.adv[idx]) if hp.norm_adv and stepper.normalize_minibatch_adv \
                else data.adv[idx]
            parts = ppo_loss(
                new_logp, data.old_logp[idx], entropy, new_v, data.old_v[idx], mb_adv, data.returns[idx],
                clip_coef=hp.clip_coef, clip_vloss=hp.clip_vloss,
                ent_coef=hp.ent_coef, vf_coef=hp.vf_coef, ent_floor=hp.ent_floor,
            )
            loss = parts.total
            if prox is not None and prox.mu > 0:
                loss = loss + proximal_term(model, prox)
            stepper.step(model, loss)
        epochs_done += 1
        if hp.target_kl > 0 and parts is not None and float(parts.approx_kl) > hp.target_kl:
            break
    returns, old_v = data.returns, data.old_v
    var_y = returns.var()
    explained = float("nan") if var_y == 0 else float(1 - (returns - old_v).var() / var_y)
    if parts is not None:
        stats.update(
            policy_loss=float(parts.policy.detach()), value_loss=float(parts.value.detach()),
            entropy=float(parts.entropy.detach()), approx_kl=float(parts.approx_kl),
            clip_fraction=float(parts.clip_fraction),
        )
    stats.update(explained_variance=explained, epochs=float(epochs_done))
    return stats
