"""Build environments for a node's variant; stepping them is the rollout's job.

Construction is kept apart from stepping so a future batched engine can build many
variants up front and step them together.

Vector envs use ``AutoresetMode.SAME_STEP``. Layout of ``infos`` from ``step`` in
gymnasium 1.4 (checked by tests), for a vector of ``n`` sub-envs each wrapped in
``RecordEpisodeStatistics``:

- On a step where sub-env ``i`` terminates or truncates, the returned ``obs[i]`` is
  already the *reset* observation of its next episode, and the true last observation is
  ``infos["final_obs"][i]``. ``infos["final_obs"]`` is an ``object`` array of length
  ``n`` holding ``None`` for the other sub-envs; ``infos["_final_obs"]`` is the bool mask.
  Use it to bootstrap the value of a *truncated* episode (see :func:`next_observations`).
- That sub-env's last step info moves to ``infos["final_info"]`` (a dict of batched
  arrays, mask ``infos["_final_info"]``); the top-level info of ``i`` is its reset info.
  Hence the episode statistics are **not** at ``infos["episode"]``: they are at
  ``infos["final_info"]["episode"]`` = ``{"r": float64[n], "l": int[n], "t": float64[n]}``
  with mask ``infos["final_info"]["_episode"]`` (and per-field masks ``"_r"``, ``"_l"``,
  ``"_t"``). Unfinished entries hold 0. See :func:`finished_episodes`.
- When no sub-env finished this step, none of these keys is present.

We choose SAME_STEP over the default NEXT_STEP because with NEXT_STEP the step after an
episode end is a dummy transition (reset obs, reward 0) that every rollout must mask out.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, cast

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvCreator, EnvSpec

from fedrl.envs.families import check_env_id, family_for
from fedrl.errors import ConfigError

Env = gym.Env[Any, Any]


def make_env(env_id: str, params: dict[str, float], kwargs: dict[str, object]) -> Env:
    """``gym.make(env_id, **kwargs)`` with the variant ``params`` applied to its family.

    ``kwargs`` may include ``gym.make``'s own arguments (``max_episode_steps``,
    ``disable_env_checker``, ``render_mode``). An unregistered id raises
    :class:`ConfigError` ``env.id``; arguments the constructor rejects raise ``env.kwargs``;
    bad params raise ``env.vary``. The env is not reset.
    """
    check_env_id(env_id)
    family = family_for(env_id)
    # A family may substitute its own class (e.g. MountainCarContinuous with settable
    # gravity); swapping the spec's entry point keeps gym.make's wrappers and kwargs.
    spec: str | EnvSpec = env_id
    if family.entry_point is not None:
        creator = cast(EnvCreator, family.entry_point)  # a class is a valid creator
        spec = dataclasses.replace(gym.spec(env_id), entry_point=creator)
    try:
        env = gym.make(spec, **kwargs)  # type: ignore[arg-type]  # gym.make's own args pass too
    except TypeError as err:
        raise ConfigError("env.kwargs", f"gym.make('{env_id}') rejected {kwargs}: {err}") from err
    try:
        family.apply(env, params)
    except BaseException:
        env.close()
        raise
    return env


def make_vector_env(
    env_id: str, params_per_env: list[dict[str, float]], kwargs: dict[str, object]
) -> gym.vector.SyncVectorEnv:
    """One sub-env per entry of ``params_per_env`` (so each can be a different variant).

    Each sub-env is ``RecordEpisodeStatistics(make_env(env_id, params, kwargs))`` and the
    vector env uses ``AutoresetMode.SAME_STEP``; see the module docstring for where final
    observations and episode statistics appear in ``infos``. All sub-envs must share
    observation and action spaces (a vector env batches them): varying a parameter that
    changes a space, like Pendulum's ``max_torque``, raises :class:`ConfigError` ``env.vary``.
    """
    if not params_per_env:
        raise ValueError("params_per_env must have at least one entry")
    envs: list[Env] = []
    try:
        for params in params_per_env:
            envs.append(gym.wrappers.RecordEpisodeStatistics(make_env(env_id, params, kwargs)))
        _check_same_spaces(env_id, envs, params_per_env)
    except BaseException:
        for env in envs:
            env.close()
        raise
    # Bind each built env by default argument; a bare closure would see only the last.
    return gym.vector.SyncVectorEnv(
        [lambda env=env: env for env in envs],  # type: ignore[misc]
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )


def _check_same_spaces(
    env_id: str, envs: list[Env], params_per_env: list[dict[str, float]]
) -> None:
    first = envs[0]
    for i, env in enumerate(envs[1:], start=1):
        for what in ("observation_space", "action_space"):
            if getattr(env, what) != getattr(first, what):
                raise ConfigError(
                    "env.vary",
                    f"{env_id} sub-envs 0 and {i} have different {what}s "
                    f"({getattr(first, what)} vs {getattr(env, what)}) for params "
                    f"{params_per_env[0]} vs {params_per_env[i]}; a vector env needs one "
                    "space, so vary this parameter across nodes, not within one vector env",
                )


class EpisodeStats(NamedTuple):
    """One finished episode of sub-env ``env_index``: undiscounted return and length."""

    env_index: int
    ret: float
    length: int


def finished_episodes(infos: dict[str, Any]) -> list[EpisodeStats]:
    """Episodes that ended on this step of a :func:`make_vector_env` env, by sub-env index."""
    final_info = infos.get("final_info", {})
    if "episode" not in final_info:
        return []
    episode, mask = final_info["episode"], final_info["_episode"]
    return [
        EpisodeStats(int(i), float(episode["r"][i]), int(episode["l"][i]))
        for i in np.flatnonzero(mask)
    ]


def next_observations(obs: np.ndarray, infos: dict[str, Any]) -> np.ndarray:
    """The true successor observations of this step: ``obs`` with the rows of sub-envs that
    just ended replaced by ``infos["final_obs"]``. Returns a new array; for bootstrapping
    truncated episodes (terminated ones have value 0 whatever the observation).
    """
    result = np.array(obs, copy=True)
    if "final_obs" in infos:
        for i in np.flatnonzero(infos["_final_obs"]):
            result[i] = infos["final_obs"][i]
    return result
