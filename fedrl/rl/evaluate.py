"""Deterministic evaluation of a policy on a list of environment variants.

All (variant, episode) pairs run together in one vector env, one episode per sub-env, with
greedy actions and reset seeds derived from (seed, variant, episode): the same episodes at
every evaluation, in every engine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedrl.envs.make import make_vector_env
from fedrl.rl.networks import ActorCritic, PolicySpec, set_weights
from fedrl.rl.normalize import Moments, normalize
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
) -> list[float]:
    """Mean undiscounted return per variant over ``episodes`` full episodes each."""
    model = ActorCritic(spec)
    set_weights(model, weights)
    params = [dict(v) for v in variants for _ in range(episodes)]
    envs = make_vector_env(env_id, params, env_kwargs)
    seeds: list[int | None] = [derive(seed, EVAL, i // episodes, i % episodes) for i in range(len(params))]
    obs, _ = envs.reset(seed=seeds)
    totals = np.zeros(len(params))
    running = np.ones(len(params), bool)
    try:
        while running.any():
            x = normalize(obs, obs_moments) if obs_moments is not None else obs.astype(np.float32)
            with torch.inference_mode():
                act = model.greedy(torch.as_tensor(x)).numpy()
            if spec.action_kind == "discrete":
                act = act.astype(np.int64)
            else:
                act = np.clip(act, spec.action_low, spec.action_high)
            obs, reward, term, trunc, _ = envs.step(act)
            totals += np.where(running, reward, 0.0)
            running &= ~np.logical_or(term, trunc)
    finally:
        envs.close()
    return [float(r) for r in totals.reshape(len(variants), episodes).mean(1)]
