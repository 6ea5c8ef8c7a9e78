"""Carrying unfinished episodes across rounds.

A ClientApp is rebuilt for every message (and in deployment runs in a fresh process), so its
environments are rebuilt each round. Starting every round with fresh episodes would cut
every episode at the round length: the agent would never see late-episode states (for
CartPole, the cart drifting off the track after a few hundred steps). Classic-control envs
keep their whole physical state in ``env.unwrapped.state``, so for them we save that vector,
the time-limit step counter and re-derive the observation; the snapshot is a few floats per
env and travels in ``context.state``. Envs without such a state start fresh episodes each
round (``snapshot`` returns None), which is correct but cuts episodes at round boundaries.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from fedrl.envs.batched.base import BatchedEnv


def _time_limit(env: gym.Env) -> gym.wrappers.TimeLimit | None:
    e: object = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, gym.wrappers.TimeLimit):
            return e
        e = e.env
    return None


def _observe(env: gym.Env) -> np.ndarray | None:
    u = env.unwrapped
    for name in ("_get_obs", "_get_ob"):
        if callable(getattr(u, name, None)):
            return np.asarray(getattr(u, name)(), np.float32)
    state = np.asarray(getattr(u, "state"), np.float32)  # noqa: B009  (not on the Env type)
    return state if env.observation_space.shape == state.shape else None


def snapshot(envs: gym.vector.VectorEnv) -> tuple[np.ndarray, np.ndarray] | None:
    """``(states [E, S] float64, elapsed [E] int64)`` or None when not snapshottable."""
    if isinstance(envs, BatchedEnv):
        return envs.snapshot()
    assert isinstance(envs, gym.vector.SyncVectorEnv)
    states, elapsed = [], []
    for env in envs.envs:
        state = getattr(env.unwrapped, "state", None)
        if state is None:
            return None
        try:
            arr = np.asarray(state, np.float64).reshape(-1)
        except (TypeError, ValueError):
            return None
        tl = _time_limit(env)
        states.append(arr)
        elapsed.append(0 if tl is None else int(tl._elapsed_steps or 0))
    if len({len(s) for s in states}) != 1:
        return None
    return np.stack(states), np.asarray(elapsed, np.int64)


def restore(envs: gym.vector.VectorEnv, states: np.ndarray, elapsed: np.ndarray) -> np.ndarray | None:
    """Put each (already reset) sub-env back into a saved state; return the observations
    ``[E, D]``, or None (envs untouched beyond the reset) when the snapshot does not fit."""
    if isinstance(envs, BatchedEnv):
        return envs.restore(states, elapsed)
    assert isinstance(envs, gym.vector.SyncVectorEnv)
    if states.shape[0] != len(envs.envs) or elapsed.shape[0] != len(envs.envs):
        return None
    obs = []
    for env, s, n in zip(envs.envs, states, elapsed, strict=True):
        u: Any = env.unwrapped
        old = getattr(u, "state", None)
        if old is None or np.asarray(old).reshape(-1).shape != s.shape:
            return None
        u.state = s.astype(np.asarray(old).dtype).reshape(np.asarray(old).shape)
        if hasattr(u, "steps_beyond_terminated"):
            u.steps_beyond_terminated = None
        tl = _time_limit(env)
        if tl is not None:
            tl._elapsed_steps = int(n)  # type: ignore[assignment]
        o = _observe(env)
        if o is None:
            return None
        obs.append(o)
    return np.stack(obs)
