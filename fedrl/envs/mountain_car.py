"""MountainCarContinuous with a settable ``gravity``.

Gymnasium's ``Continuous_MountainCarEnv.step`` hard-codes the gravity term ``0.0025``
(``MountainCarEnv`` reads ``self.gravity``; the continuous one does not), so setting an
attribute would silently do nothing. This subclass repeats the original ``step`` with
``self.gravity`` in place of the literal; at the default ``gravity = 0.0025`` it reproduces
the original bit for bit (a unit test checks 200 random steps). It is used as the
``entry_point`` of the ``MountainCarContinuous-v0`` spec by :func:`fedrl.envs.make.make_env`,
so ``gym.make``'s wrappers (TimeLimit, order enforcing, checker) are unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium.envs.classic_control.continuous_mountain_car import (
    Continuous_MountainCarEnv,
)

DEFAULT_GRAVITY = 0.0025  # the constant in gymnasium 1.4's step()


class GravityMountainCarContinuous(Continuous_MountainCarEnv):
    """``Continuous_MountainCarEnv`` whose step uses ``self.gravity`` (default 0.0025)."""

    def __init__(self, render_mode: str | None = None, goal_velocity: float = 0) -> None:
        super().__init__(render_mode=render_mode, goal_velocity=goal_velocity)
        self.gravity = DEFAULT_GRAVITY

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        # gymnasium 1.4 continuous_mountain_car.py step(); only the gravity term differs.
        position = self.state[0]
        velocity = self.state[1]
        force = min(max(action[0], self.min_action), self.max_action)

        velocity += force * self.power - self.gravity * math.cos(3 * position)
        # min/max return the same objects the original if-chains assign (checked bit for bit).
        velocity = min(velocity, self.max_speed)
        velocity = max(velocity, -self.max_speed)
        position += velocity
        position = min(position, self.max_position)
        position = max(position, self.min_position)
        if position == self.min_position and velocity < 0:
            velocity = 0

        terminated = bool(position >= self.goal_position and velocity >= self.goal_velocity)

        reward = 0.0
        if terminated:
            reward = 100.0
        reward -= math.pow(action[0], 2) * 0.1

        self.state = np.array([position, velocity], dtype=np.float32)

        if self.render_mode == "human":
            self.render()
        return self.state, reward, terminated, False, {}
