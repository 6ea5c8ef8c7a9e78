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
import warnings

import numpy as np
import torch
from torch import nn

from fedrl.rl.networks import LOG_STD, ActorCritic, PolicySpec, as_real, mirrored

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
    """``K`` actor-critics of one ``spec``, their parameters in one tensor ``flat [K, P]``: node k's
    row holds its ``ActorCritic.state_dict()`` tensors flattened, in that order, and ``grad [K, P]``
    their gradients. ``params[name]`` (``[K, *shape]``) is a leaf that requires grad and shares
    ``flat``'s memory; its ``.grad`` is the matching view of ``grad``, so a backward pass fills
    ``grad`` in place. One flat tensor lets the optimizer and the per-node gradient clip run as a
    few whole-tensor operations rather than one set per parameter (``fedrl.rl.cohort_update``)."""

    def __init__(self, spec: PolicySpec, weights: list[list[np.ndarray]]) -> None:
        template = ActorCritic(spec)
        self.spec = spec
        self.names = list(template.state_dict().keys())
        self.k = len(weights)
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.slices: dict[str, slice] = {}
        rows: list[np.ndarray] = []
        offset = 0
        for i, (name, ref) in enumerate(template.state_dict().items()):
            stacked = np.stack([np.asarray(w[i], np.float32) for w in weights])
            if stacked.shape[1:] != tuple(ref.shape):
                raise ValueError(f"{name}: expected shape {tuple(ref.shape)}, got {stacked.shape[1:]}")
            self.shapes[name] = tuple(ref.shape)
            self.slices[name] = slice(offset, offset + ref.numel())
            offset += ref.numel()
            rows.append(stacked.reshape(self.k, -1))
        self.flat = as_real(np.concatenate(rows, axis=1)).clone()
        self.grad = torch.zeros_like(self.flat)
        self.params: dict[str, torch.Tensor] = {}
        for name in self.names:
            self.params[name] = self._view(self.flat, name).requires_grad_(True)
            self.params[name].grad = self._view(self.grad, name)
        self._actor = _layers(template.actor, "actor")
        self._critic = _layers(template.critic, "critic")

    def _view(self, t: torch.Tensor, name: str) -> torch.Tensor:
        return t[:, self.slices[name]].view(self.k, *self.shapes[name])

    def proximal(self, anchor: torch.Tensor) -> torch.Tensor:
        """``[K]``: each node's squared L2 distance from its row of ``anchor [K, P]`` (FedProx's
        term, differentiable in the parameters)."""
        return sum((((self.params[n] - self._view(anchor, n)) ** 2).reshape(self.k, -1).sum(1) for n in self.names),
                   torch.zeros(self.k, dtype=self.flat.dtype))

    def backward(self, loss: torch.Tensor) -> None:
        """``grad`` := the gradient of the scalar ``loss`` (zeroed first, then filled in place)."""
        self.grad.zero_()
        with warnings.catch_warnings():
            # Each .grad is a strided view of ``grad`` on purpose; torch's note on the gradient
            # layout contract concerns DDP's buckets, not correctness.
            warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")
            loss.backward()
        for n in self.names:
            g = self.params[n].grad
            if g is None or g.data_ptr() != self._view(self.grad, n).data_ptr():
                raise RuntimeError(f"autograd replaced the .grad of {n}; the flat gradient is stale")

    def weights(self, k: int) -> list[np.ndarray]:
        """Node ``k``'s weights as float32 arrays in ``state_dict`` order."""
        row = self.flat[k].detach().numpy()
        return [row[self.slices[n]].reshape(self.shapes[n]).astype(np.float32, copy=True) for n in self.names]

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
        return mirrored(lambda x: self._mlp(self._critic, x), obs, self.spec, action=False).squeeze(-1)

    def actor(self, obs: torch.Tensor) -> torch.Tensor:
        """``[K, B, A]``: logits (discrete) or Gaussian means (continuous), mirror-symmetric under
        ``algo.mirror`` as ``ActorCritic.actor_out``."""
        return mirrored(lambda x: self._mlp(self._actor, x), obs, self.spec, action=True)

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
            # torch.multinomial(p, 1, generator=g) is ATen's one-sample path: q = Exp(1) draws by
            # exponential_ on p's shape, then argmax(p / q). Drawing each node's q so and dividing
            # once for all K is the same draw (tests/unit/test_stacked_sampling.py) at a fifth of
            # the cost of K multinomial calls, which validate their input each time.
            q = torch.stack([torch.empty_like(probs[k]).exponential_(1, generator=g) for k, g in enumerate(generators)])
            action = (probs / q).argmax(-1)
        else:
            std = self.params[LOG_STD].exp().unsqueeze(1).expand_as(out)
            noise = torch.stack([torch.randn(out.shape[1:], generator=g) for g in generators])
            action = out + std * noise
        return action, self._log_prob_entropy(out, action)[0]  # the same forward, not a second one
