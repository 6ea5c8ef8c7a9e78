"""The PPO update for a cohort: K nodes' minibatch epochs as one batched pass.

Node k does what ``fedrl.rl.ppo.ppo_update`` with ``SGDStep`` does for it alone: its own
shuffled minibatches (``randperm`` from its own generator), the same losses with advantages
normalized over its own minibatch, its own global gradient-norm clip, its own Adam moments and
step count, its own FedProx anchor and its own early stop on approximate KL. The K losses are
summed before one backward: node k's loss depends only on node k's slice of the stacked
parameters, so the gradient of the sum is each node's own gradient, side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedrl.rl.advantages import gae
from fedrl.rl.losses import entropy_floor_penalty
from fedrl.rl.ppo import PPOHyper
from fedrl.rl.rollout import Rollout
from fedrl.rl.stacked import StackedActorCritic


@dataclass
class StackedAdam:
    """``torch.optim.Adam`` (single-tensor form, no weight decay or amsgrad) on the ``[K, P]``
    parameters of a cohort (``StackedActorCritic.flat``) with per-node step counts and learning
    rates: the same elementwise operations, in the same order, as torch's for each node."""

    param: torch.Tensor  # [K, P]
    grad: torch.Tensor  # [K, P], filled by the backward pass
    steps: np.ndarray  # [K] float: Adam's step count per node
    m: torch.Tensor  # [K, P]
    v: torch.Tensor  # [K, P]
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-5
    _denom: torch.Tensor | None = None
    _step: torch.Tensor | None = None

    @staticmethod
    def fresh(param: torch.Tensor, grad: torch.Tensor, eps: float) -> StackedAdam:
        return StackedAdam(param, grad, np.zeros(param.shape[0]), torch.zeros_like(param), torch.zeros_like(param),
                           eps=eps)

    def step(self, lr: np.ndarray, active: np.ndarray) -> None:
        """One Adam step for the ``active`` nodes at learning rates ``lr [K]``; the others keep
        their parameters, moments and step count."""
        b1, b2 = self.betas
        self.steps = self.steps + active
        bc1 = 1 - b1 ** np.maximum(self.steps, 1)
        bc2_sqrt = (1 - b2 ** np.maximum(self.steps, 1)) ** 0.5
        p, g, m, v = self.param, self.grad, self.m, self.v

        def column(x: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(x, dtype=p.dtype).view(-1, 1)

        with torch.no_grad():
            if active.all():  # the common case: in place, as torch's Adam, in two reused buffers
                # (a fresh [K, P] temporary is a fresh mmap and its page faults: 4x slower here)
                if self._denom is None or self._step is None:
                    self._denom, self._step = torch.empty_like(p), torch.empty_like(p)
                denom, step = self._denom, self._step
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                torch.sqrt(v, out=denom).div_(column(bc2_sqrt)).add_(self.eps)
                torch.mul(column(-lr / bc1), m, out=step).div_(denom)
                p.add_(step)
                return
            new_m = m.lerp(g, 1 - b1)
            new_v = v.mul(b2).addcmul_(g, g, value=1 - b2)
            denom = (new_v.sqrt() / column(bc2_sqrt)).add_(self.eps)
            new_p = p + column(-lr / bc1) * new_m / denom
            keep = torch.as_tensor(active).view(-1, 1)
            m.copy_(torch.where(keep, new_m, m))
            v.copy_(torch.where(keep, new_v, v))
            p.copy_(torch.where(keep, new_p, p))


def _clip_grad_norms(grad: torch.Tensor, max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_`` for each node's row of the ``[K, P]`` gradient."""
    coef = torch.clamp(max_norm / (torch.linalg.vector_norm(grad, dim=1) + 1e-6), max=1.0)
    grad.mul_(coef.view(-1, 1))


def _normalize_advantages(adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``fedrl.rl.losses.normalize_advantages`` over each node's minibatch (dim 1)."""
    return (adv - adv.mean(1, keepdim=True)) / (adv.std(1, unbiased=False, keepdim=True) + eps)


def _node_losses(model: StackedActorCritic, obs: torch.Tensor, act: torch.Tensor, old_logp: torch.Tensor,
                 old_v: torch.Tensor, adv: torch.Tensor, ret: torch.Tensor, hp: PPOHyper) -> dict[str, torch.Tensor]:
    """``fedrl.rl.losses.ppo_loss`` per node (means over each node's minibatch): ``[K]`` tensors."""
    new_logp, entropy = model.log_prob_entropy(obs, act)
    new_v = model.value(obs)
    ratio = torch.exp(new_logp - old_logp)
    pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1.0 - hp.clip_coef, 1.0 + hp.clip_coef)).mean(1)
    unclipped = (new_v - ret) ** 2
    if hp.clip_vloss:
        v_clipped = old_v + torch.clamp(new_v - old_v, -hp.clip_coef, hp.clip_coef)
        v = 0.5 * torch.max(unclipped, (v_clipped - ret) ** 2).mean(1)
    else:
        v = 0.5 * unclipped.mean(1)
    ent = entropy.mean(1)
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - (new_logp - old_logp)).mean(1)
        clip_fraction = ((ratio - 1.0).abs() > hp.clip_coef).float().mean(1)
    total = pg - hp.ent_coef * ent + hp.vf_coef * v
    if hp.ent_floor > 0:
        total = total + entropy_floor_penalty(entropy, hp.ent_floor).mean(1)
    return {"total": total, "policy": pg, "value": v, "entropy": ent,
            "approx_kl": approx_kl, "clip_fraction": clip_fraction}


def cohort_ppo_update(
    model: StackedActorCritic,
    optimizer: StackedAdam,
    lr: np.ndarray,
    ro: Rollout,
    hp: PPOHyper,
    generators: list[torch.Generator],
    prox: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> list[dict[str, float]]:
    """One PPO update of every node on its columns of ``ro`` (``[T, K*E]``); mutates ``model`` and
    ``optimizer``; returns each node's stats as ``ppo_update`` reports them. ``prox``: FedProx's
    ``(mu [K], anchors [K, P])`` (a node with mu 0 has no proximal term)."""
    k = model.k
    adv, returns = gae(ro.rewards, ro.values, ro.next_values, ro.terminated, ro.done, hp.gamma, hp.gae_lambda)
    steps, n_cols = ro.rewards.shape
    e = n_cols // k

    def per_node(x: torch.Tensor) -> torch.Tensor:  # [T, K*E, ...] -> [K, T*E, ...], ppo_update's order
        return x.reshape(steps, k, e, *x.shape[2:]).transpose(0, 1).reshape(k, steps * e, *x.shape[2:])

    obs, act, old_logp, old_v = per_node(ro.obs), per_node(ro.actions), per_node(ro.logprobs), per_node(ro.values)
    data_adv, data_ret = per_node(adv), per_node(returns)
    n = steps * e
    mb = max(1, n // hp.num_minibatches)
    active = np.ones(k, bool)
    epochs = np.zeros(k)
    last: dict[str, torch.Tensor] | None = None
    rows = torch.arange(k)[:, None]
    for _ in range(hp.update_epochs):
        perms = torch.stack([torch.randperm(n, generator=g) if active[j] else torch.arange(n)
                             for j, g in enumerate(generators)])
        for start in range(0, n - mb + 1, mb):
            idx = perms[:, start : start + mb]
            mb_adv = _normalize_advantages(data_adv[rows, idx]) if hp.norm_adv else data_adv[rows, idx]
            parts = _node_losses(model, obs[rows, idx], act[rows, idx], old_logp[rows, idx], old_v[rows, idx],
                                 mb_adv, data_ret[rows, idx], hp)
            loss = parts["total"]
            if prox is not None:
                mu, anchors = prox
                loss = loss + 0.5 * mu * model.proximal(anchors)
            model.backward((loss * torch.as_tensor(active, dtype=loss.dtype)).sum())
            _clip_grad_norms(model.grad, hp.max_grad_norm)
            optimizer.step(lr, active)
            last = {name: torch.where(torch.as_tensor(active), value.detach(), last[name] if last else value.detach())
                    for name, value in parts.items()}
        epochs += active
        if hp.target_kl > 0 and last is not None:
            active &= ~(last["approx_kl"].numpy() > hp.target_kl)
        if not active.any():
            break
    out = []
    for j in range(k):
        y, old = data_ret[j], old_v[j]
        var_y = y.var()
        stats = {"explained_variance": float("nan") if var_y == 0 else float(1 - (y - old).var() / var_y),
                 "epochs": float(epochs[j])}
        if last is not None:
            stats = {"policy_loss": float(last["policy"][j]), "value_loss": float(last["value"][j]),
                     "entropy": float(last["entropy"][j]), "approx_kl": float(last["approx_kl"][j]),
                     "clip_fraction": float(last["clip_fraction"][j]), **stats}
        out.append(stats)
    return out
