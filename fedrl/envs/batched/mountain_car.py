"""Gymnasium's mountain-car physics over arrays (see ``fedrl.envs.batched.classic`` for the rules).

``MountainCar-v0`` (Moore 1990) and ``MountainCarContinuous-v0`` with settable gravity
(``fedrl.envs.mountain_car``), one variant per sub-env, equal to Gymnasium's step for step.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from fedrl.envs.batched.base import BatchedEnv
from fedrl.envs.mountain_car import DEFAULT_GRAVITY

F32 = np.float32


class MountainCar(BatchedEnv):
    """``MountainCarEnv`` (Moore 1990): push left, none or right; reward -1 a step."""

    env_id = "MountainCar-v0"
    defaults: ClassVar[dict[str, float]] = {"force": 0.001, "gravity": 0.0025}
    state_size = 2
    min_position, max_position, max_speed, goal_position = -1.2, 0.6, 0.07, 0.5

    def spaces(self) -> tuple[gym.Space[Any], gym.Space[Any]]:
        low = np.array([self.min_position, -self.max_speed], np.float32)
        high = np.array([self.max_position, self.max_speed], np.float32)
        return gym.spaces.Box(low, high, dtype=np.float32), gym.spaces.Discrete(3)

    def reset_one(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        state = np.array([rng.uniform(low=-0.6, high=-0.4), 0])
        return state, np.array(state, np.float32)

    def observe(self) -> np.ndarray:
        return self.state.astype(np.float32)

    def physics(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        position, velocity = self.state.T
        velocity = velocity + ((actions - 1) * self.p["force"] + np.cos(3 * position) * (-self.p["gravity"]))
        velocity = np.clip(velocity, -self.max_speed, self.max_speed)
        position = np.clip(position + velocity, self.min_position, self.max_position)
        velocity = np.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        self.state = np.stack([position, velocity], axis=1)
        terminated = (position >= self.goal_position) & (velocity >= 0)
        return self.observe(), np.full(self.num_envs, -1.0), terminated


class MountainCarContinuous(BatchedEnv):
    """``Continuous_MountainCarEnv`` with settable gravity (``fedrl.envs.mountain_car``).

    Its ``step`` computes in float64 on the first step after a reset (the reset state is
    float64) and in float32 after (it stores the state as float32); a clipped action is a
    Python float, an unclipped one float32. ``fresh`` marks the sub-envs on their first step.
    """

    env_id = "MountainCarContinuous-v0"
    defaults: ClassVar[dict[str, float]] = {"power": 0.0015, "gravity": DEFAULT_GRAVITY}
    state_size = 2
    min_position, max_position, max_speed, goal_position = -1.2, 0.6, 0.07, 0.45

    def __init__(self, params_per_env: list[dict[str, float]], max_episode_steps: int) -> None:
        super().__init__(params_per_env, max_episode_steps)
        self.fresh = np.ones(self.num_envs, np.bool_)

    def spaces(self) -> tuple[gym.Space[Any], gym.Space[Any]]:
        low = np.array([self.min_position, -self.max_speed], np.float32)
        high = np.array([self.max_position, self.max_speed], np.float32)
        return (gym.spaces.Box(low, high, dtype=np.float32),
                gym.spaces.Box(low=-1.0, high=1.0, shape=(1,), dtype=np.float32))

    def reset_one(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        self.fresh[i] = True
        state = np.array([rng.uniform(low=-0.6, high=-0.4), 0])
        return state, np.array(state, np.float32)

    def observe(self) -> np.ndarray:
        return self.state.astype(np.float32)

    def restore(self, states: np.ndarray, elapsed: np.ndarray, rows: slice = slice(None)) -> np.ndarray | None:
        obs = super().restore(states, elapsed, rows)
        if obs is not None:
            self.fresh[rows] = False  # a restored state is the float32 state of a running episode
        return obs

    def physics(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = actions[:, 0]
        power, gravity = self.p["power"], self.p["gravity"]
        position, velocity = self.state.T
        clipped = (a < -1.0) | (a > 1.0)
        force64 = np.clip(a.astype(np.float64), -1.0, 1.0)
        # math.cos of 3 * position: a float64 product when fresh, a float32 one after.
        pos3 = np.where(self.fresh, 3 * position, (3 * position.astype(F32)).astype(np.float64))
        pull = gravity * np.cos(pos3)
        # force * power - pull: float32 arithmetic for an unclipped (float32) force, float64 for a clipped one.
        inc32 = (a * power.astype(F32) - pull.astype(F32)).astype(np.float64)
        inc = np.where(clipped, force64 * power - pull, inc32)
        v64, p64 = self._advance(position, velocity + inc, np.float64)
        v32, p32 = self._advance(position.astype(F32), velocity.astype(F32) + inc.astype(F32), F32)
        position = np.where(self.fresh, p64, p32.astype(np.float64))
        velocity = np.where(self.fresh, v64, v32.astype(np.float64))
        terminated = np.where(self.fresh, (p64 >= self.goal_position) & (v64 >= 0),
                              (p32 >= F32(self.goal_position)) & (v32 >= 0))
        reward = np.where(terminated, 100.0, 0.0) - a.astype(np.float64) ** 2 * 0.1
        # The single env keeps its state as float32 from the first step on.
        self.state = np.stack([position, velocity], axis=1).astype(F32).astype(np.float64)
        self.fresh[:] = False
        return self.observe(), reward, terminated

    def _advance(self, position: np.ndarray, velocity: np.ndarray, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """Clip the speed, move, clip the position, stop at the left wall: in ``dtype``."""
        speed, lo, hi = dtype(self.max_speed), dtype(self.min_position), dtype(self.max_position)
        velocity = np.maximum(np.minimum(velocity, speed), -speed)
        position = np.maximum(np.minimum(position + velocity, hi), lo)
        velocity = np.where((position == lo) & (velocity < 0), dtype(0), velocity)
        return velocity, position
