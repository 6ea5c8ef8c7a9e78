"""The machinery every batched family shares: per-sub-env parameters, seeds, time limit, autoreset.

A :class:`BatchedEnv` is a Gymnasium vector env whose physics is one NumPy pass over all
sub-envs, each with its own physical parameters (one array entry per sub-env), so one vector
env can hold many nodes' variants. It stands in for
``SyncVectorEnv([RecordEpisodeStatistics(TimeLimit(make_env(id, params_i)))...])`` with
``AutoresetMode.SAME_STEP`` (``fedrl.envs.make.make_vector_env``) and returns the same
numbers step for step:

- each sub-env has its own ``np.random.Generator`` seeded as ``Env.reset(seed=...)`` seeds it,
  and ``reset(seed=int)`` seeds sub-env ``i`` with ``seed + i`` as ``SyncVectorEnv`` does;
- a sub-env that terminates or truncates is reset in the same step from its own generator;
  ``infos`` then holds ``final_obs``/``_final_obs`` and ``final_info["episode"]`` (``r``, ``l``,
  ``t``) with their masks, laid out as ``SyncVectorEnv`` lays out ``RecordEpisodeStatistics``;
- rewards are float64, observations float32, as there.

A family subclass says what one sub-env's reset draws (the scalar code of Gymnasium's
``reset``, so the random stream is consumed identically) and how all sub-envs step at once
(Gymnasium's ``step`` written over arrays, with its dtypes: where the single env computes in
float32, so does the batch). ``tests/unit/test_batched_envs.py`` checks every family against
Gymnasium over 10,000 random steps.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector.utils import batch_space

Params = dict[str, np.ndarray]


class BatchedEnv(gym.vector.VectorEnv):  # type: ignore[type-arg]
    """Sub-env ``i`` runs the variant ``params_per_env[i]``; see the module doc.

    Subclasses set ``env_id``, ``defaults`` (every parameter's Gymnasium default, by its
    ``env.vary`` name) and implement ``spaces``, ``reset_one`` and ``physics``; ``derive``
    computes derived quantities (CartPole's ``polemass_length``) from the parameter arrays.
    """

    env_id: ClassVar[str]
    defaults: ClassVar[dict[str, float]]
    state_size: ClassVar[int]

    def __init__(self, params_per_env: list[dict[str, float]], max_episode_steps: int) -> None:
        if not params_per_env:
            raise ValueError("params_per_env must have at least one entry")
        n = len(params_per_env)
        self.num_envs = n
        self.max_episode_steps = int(max_episode_steps)
        self.p: Params = {
            name: np.array([float(ps.get(name, default)) for ps in params_per_env], np.float64)
            for name, default in self.defaults.items()
        }
        self.derive()
        self.single_observation_space, self.single_action_space = self.spaces()
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self.render_mode = None
        self.state = np.zeros((n, self.state_size), np.float64)
        self.elapsed = np.zeros(n, np.int64)
        self.ep_return = np.zeros(n, np.float64)  # RecordEpisodeStatistics' counters: since the
        self.ep_length = np.zeros(n, np.int64)  # last reset, untouched by restore()
        self.ep_start = np.zeros(n, np.float64)
        self.rngs: list[np.random.Generator | None] = [None] * n
        shape = self.single_observation_space.shape
        assert shape is not None  # every family's observations are a Box
        self._obs = np.zeros((n, *shape), np.float32)

    # --- what a family provides ----------------------------------------------------------

    def derive(self) -> None:
        """Recompute derived quantities in ``self.p`` (none by default)."""

    @abstractmethod
    def spaces(self) -> tuple[gym.Space[Any], gym.Space[Any]]:
        """One sub-env's observation and action spaces (all sub-envs share them)."""

    @abstractmethod
    def reset_one(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Sub-env ``i``'s new state (float64 ``[state_size]``) and first observation, drawn
        from ``rng`` exactly as the single env's ``reset`` draws them."""

    @abstractmethod
    def physics(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step every sub-env: update ``self.state``; return ``(obs float32 [n, ...],
        reward float64 [n], terminated bool [n])``."""

    def observe(self) -> np.ndarray:
        """Observations of the current states (for :meth:`restore`)."""
        raise NotImplementedError

    # --- the vector env ------------------------------------------------------------------

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if options:
            raise ValueError(f"{type(self).__name__} takes no reset options, got {options}")
        seeds = _seeds(seed, self.num_envs)
        for i, s in enumerate(seeds):
            if s is not None or self.rngs[i] is None:
                self.rngs[i] = seeding.np_random(s)[0]
            self._reset_row(i)
        return self._obs.copy(), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if any(r is None for r in self.rngs):
            raise RuntimeError("call reset before step")
        obs, reward, terminated = self.physics(self._check_actions(actions))
        self._obs[:] = obs
        self.elapsed += 1
        self.ep_return += reward
        self.ep_length += 1
        truncated = self.elapsed >= self.max_episode_steps
        done = terminated | truncated
        infos: dict[str, Any] = {}
        if done.any():
            infos = self._finish(np.flatnonzero(done))
        return self._obs.copy(), reward, terminated, truncated, infos

    def _finish(self, ended: np.ndarray) -> dict[str, Any]:
        """Record the ended episodes as ``SyncVectorEnv`` + ``RecordEpisodeStatistics`` do, then
        reset those sub-envs (same-step autoreset)."""
        n = self.num_envs
        mask = np.zeros(n, np.bool_)
        mask[ended] = True
        final_obs = np.full(n, None, dtype=object)
        r, length, t = np.zeros(n), np.zeros(n, np.int64), np.zeros(n)
        now = time.perf_counter()
        for i in ended:
            final_obs[i] = self._obs[i].copy()
            r[i], length[i], t[i] = self.ep_return[i], self.ep_length[i], round(now - self.ep_start[i], 6)
            self._reset_row(int(i))
        episode = {"r": r, "_r": mask.copy(), "l": length, "_l": mask.copy(), "t": t, "_t": mask.copy()}
        return {"final_obs": final_obs, "_final_obs": mask.copy(),
                "final_info": {"episode": episode, "_episode": mask.copy()}, "_final_info": mask.copy()}

    def _reset_row(self, i: int) -> None:
        rng = self.rngs[i]
        assert rng is not None
        self.state[i], self._obs[i] = self.reset_one(i, rng)
        self.elapsed[i] = 0
        self.ep_return[i] = 0.0
        self.ep_length[i] = 0
        self.ep_start[i] = time.perf_counter()

    def _check_actions(self, actions: Any) -> np.ndarray:
        space = self.single_action_space
        a = np.asarray(actions)
        if isinstance(space, gym.spaces.Discrete):
            if a.shape != (self.num_envs,) or not np.issubdtype(a.dtype, np.integer) \
                    or a.min() < 0 or a.max() >= space.n:
                raise ValueError(f"actions must be {self.num_envs} ints in [0, {space.n}), got {a!r}")
            return a.astype(np.int64)
        assert isinstance(space, gym.spaces.Box)
        if a.shape != (self.num_envs, *space.shape):
            raise ValueError(f"actions must have shape {(self.num_envs, *space.shape)}, got {a.shape}")
        return a.astype(space.dtype)  # the single env receives its space's dtype from the vector env

    # --- carrying episodes across rounds (fedrl.envs.snapshot) ---------------------------

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """``(states [n, S] float64, elapsed [n] int64)`` of the running episodes."""
        return self.state.copy(), self.elapsed.copy()

    def restore(self, states: np.ndarray, elapsed: np.ndarray, rows: slice = slice(None)) -> np.ndarray | None:
        """Put the (already reset) sub-envs ``rows`` (default all) back into saved states; their
        observations, or None (nothing changed) when the snapshot does not fit."""
        if states.shape != self.state[rows].shape or elapsed.shape != self.elapsed[rows].shape:
            return None
        self.state[rows] = states
        self.elapsed[rows] = elapsed
        self._obs[:] = self.observe()
        return self._obs[rows].copy()

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: no sub-processes, no windows."""


def _seeds(seed: int | list[int | None] | None, n: int) -> list[int | None]:
    """Per-sub-env reset seeds, as ``SyncVectorEnv.reset`` spreads them."""
    if seed is None:
        return [None] * n
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(n)]
    if len(seed) != n:
        raise ValueError(f"expected {n} seeds, got {len(seed)}")
    return list(seed)
