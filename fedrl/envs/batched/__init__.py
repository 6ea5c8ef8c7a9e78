"""Batched physics with per-sub-env parameters: many nodes' variants in one vector env.

:func:`make_batched_env` is a drop-in for :func:`fedrl.envs.make.make_vector_env` (same
arguments, same observations, rewards, terminations, truncations, autoreset and ``infos``
layout, step for step): for the classic-control families (CartPole, Pendulum, Acrobot,
MountainCar, MountainCarContinuous) it returns one :class:`BatchedEnv` whose physics is one
NumPy pass over all sub-envs; for any other id, or ``env.kwargs`` other than
``max_episode_steps``, it falls back to Gymnasium's vector env with one instance per sub-env.

Why not Gymnasium's own ``CartPoleVectorEnv``: it holds one parameter set for all sub-envs,
draws every sub-env's resets from one shared generator and autoresets on the next step, so
its numbers cannot equal the per-node envs' for the same seeds; the other families have none.
"""

from __future__ import annotations

import gymnasium as gym

from fedrl.envs.batched.base import BatchedEnv
from fedrl.envs.batched.classic import Acrobot, CartPole, Pendulum
from fedrl.envs.batched.mountain_car import MountainCar, MountainCarContinuous
from fedrl.envs.families import check_env_id, check_params, check_values
from fedrl.envs.make import make_vector_env
from fedrl.errors import ConfigError

__all__ = ["BatchedEnv", "batched_supported", "make_batched_env"]

_BATCHED_KWARGS = frozenset({"max_episode_steps"})
FAMILIES: dict[str, type[BatchedEnv]] = {
    cls.env_id: cls for cls in (CartPole, Pendulum, Acrobot, MountainCar, MountainCarContinuous)
}
FAMILIES["CartPole-v0"] = CartPole  # same physics; its time limit (200) comes from the spec


def batched_supported(env_id: str, kwargs: dict[str, object]) -> bool:
    """True when :func:`make_batched_env` gives a :class:`BatchedEnv` for these arguments."""
    return env_id in FAMILIES and set(kwargs) <= _BATCHED_KWARGS


def make_batched_env(
    env_id: str, params_per_env: list[dict[str, float]], kwargs: dict[str, object]
) -> gym.vector.SyncVectorEnv | BatchedEnv:
    """One sub-env per entry of ``params_per_env``, batched where the family allows (module doc).

    Errors as ``make_vector_env``: an unknown id (``env.id``), an unknown or invalid parameter
    (``env.vary``), a bad ``max_episode_steps`` (``env.kwargs``).
    """
    if not batched_supported(env_id, kwargs):
        return make_vector_env(env_id, params_per_env, kwargs)
    if not params_per_env:
        raise ValueError("params_per_env must have at least one entry")
    check_env_id(env_id)
    for params in params_per_env:
        check_params(env_id, params)
        check_values(env_id, params)
    limit = kwargs.get("max_episode_steps", gym.spec(env_id).max_episode_steps)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigError("env.kwargs", f"max_episode_steps must be a positive int, got {limit!r}")
    return FAMILIES[env_id](params_per_env, limit)
