"""K actor-critics as one: stacked parameters and one batched forward for K nodes (a cohort).

Each parameter of :class:`fedrl.rl.networks.ActorCritic` becomes one tensor ``[K, *shape]``; a
linear layer becomes a batched matmul (``baddbmm``) over ``[K, B, in]`` inputs, so K nodes' policies
run in one call instead of K. Node k's numbers are those of its own ``ActorCritic`` up to float
rounding (a batched matmul sums in another order). Sampling draws from node k's own generator,
with the same calls as ``ActorCritic.sample``, so each node's random stream is the one it would
use alone.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from fedrl.rl.networks import LOG_STD, ActorCritic, PolicySpec, as_real

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _layers(seq: nn.Module, prefix: str) -> list[str | None]:
    """Parameter prefix of each linear layer of an MLP, None for each tanh."""
    out: list[str | None] = []
    for name, layer in seq.named_children():
        if isinstance(layer, nn.Linear):
            out.append(f"{prefix}.{name}")
        elif isinstance(layer, nn.Tanh):
            out.append(None)
        else:
            raise TypeError(f"a stacked actor-critic takes Linear and Tanh layers, got {type(layer).__name__}")
    return out


class StackedActorCritic:
    """``K`` actor-critics of one ``spec``; ``params[name]`` is ``[K, *shape]`` (leaf tensors that
    require grad), named and ordered as ``ActorCritic.state_dict()``."""

    def __init__(self, spec: PolicySpec, weights: list[list[np.ndarray]]) -> None:
        template = ActorCritic(spec)
        self.spec = spec
        self.names = list(template.state_dict().keys())
        self.k = len(weights)
        self.params: dict[str, torch.Tensor] = {}
        for i, (name, ref) in enumerate(template.state_dict().items()):
            stacked = np.stack([np.asarray(w[i], np.float32) for w in weights])
            if stacked.shape[1:] != tuple(ref.shape):
                raise ValueError(f"{name}: expected shape {tuple(ref.shape)}, got {stacked.shape[1:]}")
            self.params[name] = as_real(stacked).clone().requires_grad_(True)
        self._actor = _layers(template.actor, "actor")
        self._critic = _layers(template.critic, "critic")

    def parameters(self) -> list[torch.Tensor]:
        return [self.params[n] for n in self.names]

    def weights(self, k: int) -> list[np.ndarray]:
        """Node ``k``'s weights as float32 arrays in ``state_dict`` order."""
        return [self.params[n][k].detach().numpy().astype(np.float32, copy=True) for n in self.names]

    def _mlp(self, layers: list[str | None], x: torch.Tensor) -> torch.Tensor:
        for prefix in layers:
            if prefix is None:
                x = torch.tanh(x)
            else:
                w, b = self.params[f"{prefix}.weight"], self.params[f"{prefix}.bias"]
                x = torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))
        return x

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``[K, B]`` values of ``[K, B, D]`` observations."""
        return self._mlp(self._critic, obs).squeeze(-1)

    def actor(self, obs: torch.Tensor) -> torch.Tensor:
        """``[K, B, A]``: logits (discrete) or Gaussian means (continuous)."""
        return self._mlp(self._actor, obs)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[K, B]`` log-probabilities of ``actions`` and entropies (summed over action dims),
        as ``ActorCritic.log_prob_entropy`` computes them with torch's distributions."""
        return self._log_prob_entropy(self.actor(obs), actions)

    def _log_prob_entropy(self, out: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``log_prob_entropy`` from the actor's output ``out`` (``actor(obs)``)."""
        if self.spec.action_kind == "discrete":
            logits = out - out.logsumexp(-1, keepdim=True)
            logp = logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            clamped = logits.clamp(min=torch.finfo(logits.dtype).min)
            return logp, -(clamped * torch.softmax(logits, -1)).sum(-1)
        log_std = self.params[LOG_STD].unsqueeze(1)  # [K, 1, A]
        std = log_std.exp().expand_as(out)
        logp = -((actions - out) ** 2) / (2 * std**2) - std.log() - _LOG_SQRT_2PI
        entropy = 0.5 + 0.5 * math.log(2 * math.pi) + std.log()
        return logp.sum(-1), entropy.sum(-1)

    def sample(self, obs: torch.Tensor, generators: list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions ``[K, B(, A)]`` and their log-probabilities ``[K, B]``; node k draws from
        ``generators[k]`` exactly as ``ActorCritic.sample`` would."""
        out = self.actor(obs)
        if self.spec.action_kind == "discrete":
            probs = torch.softmax(out - out.logsumexp(-1, keepdim=True), -1)
            action = torch.stack([torch.multinomial(probs[k], 1, generator=g).squeeze(-1)
                                  for k, g in enumerate(generators)])
        else:
            std = self.params[LOG_STD].exp().unsqueeze(1).expand_as(out)
            noise = torch.stack([torch.randn(out.shape[1:], generator=g) for g in generators])
            action = out + std * noise
        return action, self._log_prob_entropy(out, action)[0]  # the same forward, not a second one
