"""What a run config makes before any training: the nodes' variants, the policy's shape, its first
weights and the return that counts as solved. Shared by the server, the nodes and the checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from fedrl.config import Config
from fedrl.envs.make import make_env
from fedrl.envs.spec import parse_kwargs, parse_vary, sample_heldout, sample_variant
from fedrl.envs.symmetry import mirror_for
from fedrl.rl.networks import ActorCritic, PolicySpec, get_weights, spec_for
from fedrl.seeding import INIT, derive

if TYPE_CHECKING:
    from torch import nn


def variants_of(cfg: Config) -> list[dict[str, float]]:
    specs = parse_vary(cfg.env.vary)
    return [sample_variant(specs, i, cfg.nodes.count, cfg.seed) for i in range(cfg.nodes.count)]


def heldout_variants_of(cfg: Config, training: list[dict[str, float]]) -> list[dict[str, float]]:
    """The ``eval.held-out`` variants no node trains on (``fedrl.envs.spec.sample_heldout``); [] when 0.

    ``training`` is ``variants_of(cfg)``. Raises ConfigError naming ``eval.held-out`` when
    ``env.vary`` leaves nothing to hold out.
    """
    specs = parse_vary(cfg.env.vary)
    return [sample_heldout(specs, j, training, cfg.seed) for j in range(cfg.eval.held_out)]


def policy_spec(cfg: Config, variant: dict[str, float]) -> PolicySpec:
    env = make_env(cfg.env.id, variant, dict(parse_kwargs(cfg.env.kwargs)))
    try:
        spec = spec_for(env.observation_space, env.action_space, cfg.algo.hidden_sizes)
    finally:
        env.close()
    mirror = mirror_for(cfg.env.id) if cfg.algo.mirror else None  # fedrl.checks.validate refuses an id without one
    return replace(spec, obs_mirror=mirror.obs, action_mirror=mirror.action) if mirror is not None else spec


def initial_weights(spec: PolicySpec, seed: int, make_model: Callable[[PolicySpec], nn.Module] = ActorCritic,
                    ) -> list[np.ndarray]:
    """The federation's first weights: ``make_model(spec)`` (the algorithm's) under torch's RNG
    seeded by ``(seed, INIT)``."""
    import torch

    torch.manual_seed(derive(seed, INIT))
    return get_weights(make_model(spec))


def target_return(cfg: Config) -> float | None:
    t = cfg.eval.target_return.strip().lower()
    if t == "none":
        return None
    if t == "auto":
        import gymnasium as gym

        thr = gym.spec(cfg.env.id).reward_threshold
        return None if thr is None else float(thr)
    return float(t)
