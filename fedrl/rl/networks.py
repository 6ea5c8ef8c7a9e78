"""Actor-critic networks and their flat weight lists.

Weights cross every boundary (wire, checkpoint, aggregation) as an ordered list of float32
numpy arrays in ``state_dict`` order; ``weight_names`` gives the matching names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from fedrl.errors import ConfigError

# Argument validation costs more than the forward pass of these small networks, and every
# input is produced by our own code; turn it off for the rollout's hot loop.
Distribution.set_default_validate_args(False)


@dataclass(frozen=True)
class PolicySpec:
    """What the network needs to know about an environment's spaces."""

    obs_dim: int
    action_kind: Literal["discrete", "continuous"]
    action_dim: int  # number of actions (discrete) or action dimensions (continuous)
    hidden: tuple[int, ...] = (64, 64)
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    # algo.mirror (fedrl.envs.symmetry.Mirror): a sign per observation coordinate, and the mirrored
    # action of each action index (discrete) or a sign per action dimension (continuous); () = off
    obs_mirror: tuple[int, ...] = ()
    action_mirror: tuple[int, ...] = ()


@lru_cache(maxsize=32)
def _constant(values: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """``values`` as a tensor, built once: ``mirrored`` runs at every step of a rollout. Read only.
    Built outside inference mode, as a cached inference tensor would break a later backward pass."""
    with torch.inference_mode(False):
        return torch.tensor(values, dtype=dtype)


def mirrored(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, spec: PolicySpec,
             action: bool) -> torch.Tensor:
    """``f(x)`` made mirror-symmetric (``algo.mirror``): the mean of ``f`` at ``x`` and, mirrored
    back, at the mirrored observations. For the actor (``action``) that is
    ``(f(x) + A f(M x)) / 2`` with ``M`` the observation signs and ``A`` the action permutation or
    signs, so the mirrored observation gets the mirrored action distribution exactly; for the critic
    ``(f(x) + f(M x)) / 2``, so a state and its mirror have one value. ``x [..., B, D]`` goes through
    ``f`` once, with its mirror appended along the batch dimension. ``f`` unchanged when
    ``spec.obs_mirror`` is empty.

    ``x`` are the network's inputs, normalized observations: the mirror commutes with
    normalization only when the statistics are not centred (``algo.norm-obs-center = false``) or
    there are none, which ``fedrl.checks.validate`` requires.
    """
    if not spec.obs_mirror:
        return f(x)
    flat = x.dim() == 1
    if flat:
        x = x.unsqueeze(0)
    n = x.shape[-2]
    out = f(torch.cat([x, x * _constant(spec.obs_mirror, x.dtype)], dim=-2))
    own, other = out[..., :n, :], out[..., n:, :]
    if action:
        other = (other[..., _constant(spec.action_mirror, torch.long)] if spec.action_kind == "discrete"
                 else other * _constant(spec.action_mirror, other.dtype))
    out = (own + other) * 0.5
    return out.squeeze(0) if flat else out


def _layer(n_in: int, n_out: int, gain: float) -> nn.Linear:
    # Orthogonal init with small output gains: PPO implementation detail #2 (Huang et al.).
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def _mlp(n_in: int, hidden: tuple[int, ...], n_out: int, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    prev = n_in
    for h in hidden:
        layers += [_layer(prev, h, float(np.sqrt(2))), nn.Tanh()]
        prev = h
    layers.append(_layer(prev, n_out, out_gain))
    return nn.Sequential(*layers)


LOG_STD = "std.log_std"  # the log-std's weight name (state_dict key)


class LogStd(nn.Module):
    """A Gaussian policy's state-independent log-standard-deviation, as a layer: ``forward(mean)``
    returns it broadcast to ``mean``'s shape.

    A layer rather than a bare parameter so that Opacus hooks it and DP-SGD can clip its
    per-sample gradient (its grad sampler is registered in ``fedrl.rl.dpsgd``, which alone
    imports Opacus). Its weight is named ``std.log_std``.
    """

    def __init__(self, action_dim: int) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.zeros(action_dim))

    def forward(self, mean: torch.Tensor) -> torch.Tensor:
        """The log-std, broadcast to ``mean``'s shape. Pass ``mean`` detached: only its shape is
        used, and a module whose inputs need no gradient gets its backward hook (Opacus') from the
        output's gradient."""
        return self.log_std.expand_as(mean)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (tanh). Continuous actions use a Gaussian with a
    state-independent, learned log-std (``LogStd``); discrete actions a Categorical over logits.

    Weights in ``state_dict`` order: ``std.log_std`` (continuous only), the critic's, the actor's.
    """

    def __init__(self, spec: PolicySpec) -> None:
        super().__init__()
        self.spec = spec
        if spec.action_kind == "continuous":
            self.std = LogStd(spec.action_dim)  # registered first: its weight leads, as the bare parameter did
        self.critic = _mlp(spec.obs_dim, spec.hidden, 1, 1.0)
        self.actor = _mlp(spec.obs_dim, spec.hidden, spec.action_dim, 0.01)

    @property
    def log_std(self) -> nn.Parameter:
        """The Gaussian's log-std parameter (continuous actions only)."""
        return self.std.log_std

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return mirrored(self.critic, obs, self.spec, action=False).squeeze(-1)

    def actor_out(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's logits (discrete) or Gaussian means (continuous), mirror-symmetric under
        ``algo.mirror`` (``mirrored``)."""
        return mirrored(self.actor, obs, self.spec, action=True)

    def dist(self, obs: torch.Tensor) -> Distribution:
        out = self.actor_out(obs)
        if self.spec.action_kind == "discrete":
            return Categorical(logits=out)
        return Normal(out, self.std(out.detach()).exp())

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample log-probability and entropy (summed over action dims if continuous)."""
        d = self.dist(obs)
        if self.spec.action_kind == "discrete":
            return d.log_prob(actions.long()), d.entropy()
        return d.log_prob(actions).sum(-1), d.entropy().sum(-1)

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample actions with an explicit generator (no global RNG); returns (action, logp)."""
        d = self.dist(obs)
        if isinstance(d, Categorical):
            action = torch.multinomial(d.probs, 1, generator=generator).squeeze(-1)
            return action, d.log_prob(action)
        assert isinstance(d, Normal)
        noise = torch.randn(d.mean.shape, generator=generator)
        action = d.mean + d.stddev * noise
        return action, d.log_prob(action).sum(-1)

    def random_action(self, obs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """An action that ignores the policy: uniform over the actions (discrete) or standard normal
        (continuous, before the env's clipping). FedPG-BR's random-action Byzantine node acts so."""
        n = obs.shape[0]
        if self.spec.action_kind == "discrete":
            return torch.randint(self.spec.action_dim, (n,), generator=generator)
        return torch.randn((n, self.spec.action_dim), generator=generator)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action: argmax for discrete, the mean for continuous."""
        out = self.actor_out(obs)
        return out.argmax(-1) if self.spec.action_kind == "discrete" else out


def as_real(x: object) -> torch.Tensor:
    """``x`` as a tensor of torch's default float dtype: the dtype the networks compute in.

    That is float32 unless a caller sets another (the cohort equivalence test trains in float64
    to show the cohort and single paths are one algorithm, below float32's rounding noise)."""
    return torch.as_tensor(x, dtype=torch.get_default_dtype())


def weight_names(model: nn.Module) -> list[str]:
    return list(model.state_dict().keys())


def weight_layout(model: nn.Module) -> list[tuple[str, int]]:
    """Each weight's name and number of values, in ``state_dict`` order (the flat update's layout)."""
    return [(name, t.numel()) for name, t in model.state_dict().items()]


def get_weights(model: nn.Module) -> list[np.ndarray]:
    """Copies of the model's tensors as float32 arrays, in ``state_dict`` order."""
    return [t.detach().cpu().numpy().astype(np.float32, copy=True) for t in model.state_dict().values()]


def set_weights(model: nn.Module, weights: list[np.ndarray]) -> None:
    """Load arrays in ``state_dict`` order; raises ValueError on a count or shape mismatch."""
    state = model.state_dict()
    if len(weights) != len(state):
        raise ValueError(f"expected {len(state)} arrays, got {len(weights)}")
    new = {}
    for (name, ref), arr in zip(state.items(), weights, strict=True):
        if tuple(arr.shape) != tuple(ref.shape):
            raise ValueError(f"{name}: expected shape {tuple(ref.shape)}, got {tuple(arr.shape)}")
        new[name] = torch.as_tensor(np.asarray(arr, dtype=np.float32))
    model.load_state_dict(new)


def check_weights(reference: list[np.ndarray], weights: list[np.ndarray]) -> str | None:
    """Why ``weights`` cannot stand in for ``reference`` (count, shape, non-finite), or None."""
    if len(weights) != len(reference):
        return f"expected {len(reference)} arrays, got {len(weights)}"
    for i, (ref, arr) in enumerate(zip(reference, weights, strict=True)):
        if arr.shape != ref.shape:
            return f"array {i}: expected shape {ref.shape}, got {arr.shape}"
        if not np.all(np.isfinite(arr)):
            return f"array {i}: non-finite values"
    return None


def spec_for(observation_space: object, action_space: object, hidden: tuple[int, ...]) -> PolicySpec:
    """PolicySpec for flat Box observations and Discrete or Box actions."""
    from gymnasium import spaces

    if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 1:
        raise ValueError(f"observations must be a flat Box, got {observation_space}")
    obs_dim = int(observation_space.shape[0])
    if isinstance(action_space, spaces.Discrete):
        return PolicySpec(obs_dim, "discrete", int(action_space.n), hidden)
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        return PolicySpec(
            obs_dim, "continuous", int(action_space.shape[0]), hidden,
            tuple(float(x) for x in action_space.low), tuple(float(x) for x in action_space.high),
        )
    raise ValueError(f"actions must be Discrete or a flat Box, got {action_space}")


# Bounds on a policy a config may ask for (checked before any weights are allocated)
MAX_POLICY_PARAMS = 2**26
MAX_LAYERS = 64


def check_policy_size(spec: PolicySpec, make_model: Callable[[PolicySpec], nn.Module] = ActorCritic) -> int:
    """The parameter count of ``make_model(spec)`` (the algorithm's), computed without allocating
    (torch's meta device).

    Raises:
        ConfigError: ``algo.hidden`` when it exceeds ``MAX_POLICY_PARAMS``.
    """
    # bounds first: the meta device allocates nothing but still builds one module per layer
    if len(spec.hidden) <= MAX_LAYERS and max(spec.hidden) <= MAX_POLICY_PARAMS:
        with torch.device("meta"):
            n = sum(p.numel() for p in make_model(spec).parameters())
        if n <= MAX_POLICY_PARAMS:
            return n
        size = f"{n} parameters"
    else:
        size = f"{len(spec.hidden)} layers of up to {max(spec.hidden)} units"
    raise ConfigError("algo.hidden", f"{','.join(map(str, spec.hidden))} gives a policy of {size}; at most "
                                     f"{MAX_POLICY_PARAMS} parameters in at most {MAX_LAYERS} hidden layers")
