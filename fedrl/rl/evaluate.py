"""Deterministic evaluation of a policy on a list of environment variants.

All (variant, episode) pairs run together in one vector env, one episode per sub-env, with
greedy actions and reset seeds derived from (seed, variant, episode): the same episodes at
every evaluation, in every engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fedrl.envs.batched import make_batched_env
from fedrl.errors import ConfigError
from fedrl.model.moments import Moments, normalize
from fedrl.rl.networks import ActorCritic, PolicySpec, set_weights
from fedrl.rl.rollout import to_env_actions
from fedrl.seeding import EVAL, derive


def evaluate(
    spec: PolicySpec,
    weights: list[np.ndarray],
    obs_moments: Moments | None,
    env_id: str,
    variants: Sequence[dict[str, float]],
    env_kwargs: dict[str, object],
    episodes: int,
    seed: int,
    nodes: Sequence[int] | None = None,
    make_model: Callable[[PolicySpec], nn.Module] = ActorCritic,
) -> list[float]:
    """Mean undiscounted return per variant over ``episodes`` full episodes each.

    ``nodes[k]`` names the node whose variant ``variants[k]`` is (default: k); episode seeds
    derive from it, so a variant is evaluated on the same episodes whatever list it is in.
    Variants run together in one vector env where their spaces agree; a parameter that
    changes a space (Pendulum's ``max_torque`` bounds) puts each variant in its own.
    ``make_model`` is the algorithm's (``Algorithm.model_for``): its ``greedy`` acts.
    """
    model = make_model(spec)
    set_weights(model, weights)
    ids = list(nodes) if nodes is not None else list(range(len(variants)))
    if len(ids) != len(variants):
        raise ValueError("one node id per variant")
    try:
        return _run(model, obs_moments, env_id, ids, variants, env_kwargs, episodes, seed)
    except ConfigError:
        out: list[float] = []
        for k, v in enumerate(variants):
            out += _run(model, obs_moments, env_id, [ids[k]], [v], env_kwargs, episodes, seed)
        return out


def _run(
    model: Any,  # the algorithm's model: greedy(obs) -> actions
    obs_moments: Moments | None,
    env_id: str,
    ids: list[int],
    variants: Sequence[dict[str, float]],
    env_kwargs: dict[str, object],
    episodes: int,
    seed: int,
) -> list[float]:
    params = [dict(v) for v in variants for _ in range(episodes)]
    envs = make_batched_env(env_id, params, env_kwargs)
    seeds: list[int | None] = [derive(seed, EVAL, i, e) for i in ids for e in range(episodes)]
    obs, _ = envs.reset(seed=seeds)
    totals = np.zeros(len(params))
    running = np.ones(len(params), bool)
    try:
        while running.any():
            x = normalize(obs, obs_moments) if obs_moments is not None else obs.astype(np.float32)
            with torch.inference_mode():
                act = model.greedy(torch.as_tensor(x)).numpy()
            obs, reward, term, trunc, _ = envs.step(to_env_actions(act, envs.single_action_space))
            totals += np.where(running, reward, 0.0)
            running &= ~np.logical_or(term, trunc)
    finally:
        envs.close()
    return [float(r) for r in totals.reshape(len(ids), episodes).mean(1)]
