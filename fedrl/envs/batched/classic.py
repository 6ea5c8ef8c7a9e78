"""Gymnasium's classic-control physics over arrays (CartPole, Pendulum, Acrobot; the mountain cars are in
``fedrl.envs.batched.mountain_car``): one entry per sub-env, each its own variant.

Each ``physics`` is the corresponding Gymnasium 1.x ``step`` (``gymnasium/envs/classic_control``)
written over arrays in the same order of operations, so each sub-env's numbers equal the single
env's; each ``reset_one`` is the single env's ``reset`` draw. Where the single env mixes dtypes
(a float32 action times a Python float is float32 under NumPy's promotion rules), the batch
does the same explicitly; the comments say where. Parameters are ``env.vary`` names
(``fedrl.envs.families``); derived quantities follow the families' ``derive``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from fedrl.envs.batched.base import BatchedEnv
from fedrl.envs.batched.exact import pow_square, powf_square
from fedrl.errors import ConfigError

F32 = np.float32


class CartPole(BatchedEnv):
    """``CartPoleEnv`` (Barto, Sutton and Anderson 1983), Euler integration, reward 1 a step."""

    env_id = "CartPole-v1"
    defaults: ClassVar[dict[str, float]] = {"length": 0.5, "masspole": 0.1, "masscart": 1.0, "gravity": 9.8, "force_mag": 10.0}
    state_size = 4
    tau = 0.02
    x_threshold = 2.4
    theta_threshold = 12 * 2 * math.pi / 360

    def derive(self) -> None:
        p = self.p
        p["total_mass"] = p["masspole"] + p["masscart"]
        p["polemass_length"] = p["masspole"] * p["length"]

    def spaces(self) -> tuple[gym.Space[Any], gym.Space[Any]]:
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold * 2, np.inf], np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(2)

    def reset_one(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        state = rng.uniform(low=-0.05, high=0.05, size=(4,))
        return state, np.array(state, np.float32)

    def observe(self) -> np.ndarray:
        return self.state.astype(np.float32)

    def physics(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = self.p
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(actions == 1, p["force_mag"], -p["force_mag"])
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + p["polemass_length"] * np.square(theta_dot) * sintheta) / p["total_mass"]
        thetaacc = (p["gravity"] * sintheta - costheta * temp) / (
            p["length"] * (4.0 / 3.0 - p["masspole"] * np.square(costheta) / p["total_mass"]))
        xacc = temp - p["polemass_length"] * thetaacc * costheta / p["total_mass"]
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        self.state = np.stack((x, x_dot, theta, theta_dot), axis=1)
        terminated = (x < -self.x_threshold) | (x > self.x_threshold) \
            | (theta < -self.theta_threshold) | (theta > self.theta_threshold)
        return self.observe(), np.ones(self.num_envs), terminated


def _angle_normalize(x: np.ndarray) -> np.ndarray:
    return ((x + np.pi) % (2 * np.pi)) - np.pi


class Pendulum(BatchedEnv):
    """``PendulumEnv``: reward -(theta^2 + 0.1 thetadot^2 + 0.001 u^2), never terminates."""

    env_id = "Pendulum-v1"
    defaults: ClassVar[dict[str, float]] = {"g": 10.0, "m": 1.0, "l": 1.0, "max_torque": 2.0}
    state_size = 2
    max_speed, dt = 8.0, 0.05

    def derive(self) -> None:
        self.p["l_sq"] = pow_square(self.p["l"])

    def spaces(self) -> tuple[gym.Space[Any], gym.Space[Any]]:
        torque = self.p["max_torque"]
        if np.any(torque != torque[0]):
            raise ConfigError("env.vary", f"{self.env_id} sub-envs have different action_spaces (max_torque "
                              f"{sorted(set(torque.tolist()))}); a vector env needs one space, so vary this "
                              "parameter across nodes, not within one vector env")
        high = np.array([1.0, 1.0, self.max_speed], np.float32)
        bound = float(torque[0])
        return (gym.spaces.Box(-high, high, dtype=np.float32),
                gym.spaces.Box(low=-bound, high=bound, shape=(1,), dtype=np.float32))

    def reset_one(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        high = np.array([np.pi, 1.0])
        state = rng.uniform(low=-high, high=high)
        return state, np.array([np.cos(state[0]), np.sin(state[0]), state[1]], np.float32)

    def observe(self) -> np.ndarray:
        th, thdot = self.state.T
        return np.stack([np.cos(th), np.sin(th), thdot], axis=1).astype(np.float32)

    def physics(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = self.p
        th, thdot = self.state.T
        # The single env clips a float32 action to Python-float bounds: the result stays float32.
        u = np.clip(actions[:, 0], -p["max_torque"], p["max_torque"]).astype(F32)
        costs = pow_square(_angle_normalize(th)) + 0.1 * pow_square(thdot) + 0.001 * powf_square(u)
        # 3 / (m l^2) is a Python float there, so its product with the float32 u is float32.
        newthdot = thdot + (3 * p["g"] / (2 * p["l"]) * np.sin(th) + (3.0 / (p["m"] * p["l_sq"])).astype(F32) * u) \
            * self.dt
        newthdot = np.clip(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * self.dt
        self.state = np.stack([newth, newthdot], axis=1)
        return self.observe(), -costs, np.zeros(self.num_envs, np.bool_)


class Acrobot(BatchedEnv):
    """``AcrobotEnv`` (Sutton 1996; the book's dynamics), RK4 over dt = 0.2, no torque noise."""

    env_id = "Acrobot-v1"
    defaults: ClassVar[dict[str, float]] = {"link_length_1": 1.0, "link_length_2": 1.0, "link_mass_1": 1.0, "link_mass_2": 1.0}
    state_size = 4
    dt, moi = 0.2, 1.0
    max_vel_1, max_vel_2 = 4 * np.pi, 9 * np.pi
    torques = np.array([-1.0, 0.0, 1.0])

    def derive(self) -> None:
        # As fedrl.envs.families' Acrobot: uniform links, centre of mass at half length.
        p = self.p
        p["com_1"], p["com_2"] = p["link_length_1"] / 2, p["link_length_2"] / 2
        p["com_1_sq"], p["com_2_sq"], p["l1_sq"] = pow_square(p["com_1"]), pow_square(p["com_2"]), \
            pow_square(p["link_length_1"])

    def spaces(self) -> tuple[gym.Space[Any], gym.Space[Any]]:
        high = np.array([1.0, 1.0, 1.0, 1.0, self.max_vel_1, self.max_vel_2], np.float32)
        return gym.spaces.Box(low=-high, high=high, dtype=np.float32), gym.spaces.Discrete(3)

    def reset_one(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        s = rng.uniform(low=-0.1, high=0.1, size=(4,)).astype(np.float32)
        # The first observation is computed from the float32 state, in float32, as there.
        obs = np.array([np.cos(s[0]), np.sin(s[0]), np.cos(s[1]), np.sin(s[1]), s[2], s[3]], np.float32)
        return s.astype(np.float64), obs

    def observe(self) -> np.ndarray:
        s = self.state.T
        return np.stack([np.cos(s[0]), np.sin(s[0]), np.cos(s[1]), np.sin(s[1]), s[2], s[3]], axis=1) \
            .astype(np.float32)

    def _dsdt(self, s: np.ndarray) -> np.ndarray:
        p = self.p
        m1, m2, l1, lc1, lc2 = p["link_mass_1"], p["link_mass_2"], p["link_length_1"], p["com_1"], p["com_2"]
        lc1_sq, lc2_sq, l1_sq = p["com_1_sq"], p["com_2_sq"], p["l1_sq"]
        i1 = i2 = self.moi
        g = 9.8
        theta1, theta2, dtheta1, dtheta2, a = s
        d1 = m1 * lc1_sq + m2 * (l1_sq + lc2_sq + 2 * l1 * lc2 * np.cos(theta2)) + i1 + i2
        d2 = m2 * (lc2_sq + l1 * lc2 * np.cos(theta2)) + i2
        phi2 = m2 * lc2 * g * np.cos(theta1 + theta2 - np.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * pow_square(dtheta2) * np.sin(theta2)
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * np.sin(theta2)
                + (m1 * lc1 + m2 * l1) * g * np.cos(theta1 - np.pi / 2) + phi2)
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * pow_square(dtheta1) * np.sin(theta2) - phi2) \
            / (m2 * lc2_sq + i2 - pow_square(d2) / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return np.stack([dtheta1, dtheta2, ddtheta1, ddtheta2, np.zeros_like(a)])

    def physics(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        y0 = np.concatenate([self.state.T, self.torques[actions][None]])  # [5, n]: state and torque
        # gymnasium's rk4 over t = [0, dt]: one Runge-Kutta step.
        dt = self.dt - 0
        dt2 = dt / 2.0
        k1 = self._dsdt(y0)
        k2 = self._dsdt(y0 + dt2 * k1)
        k3 = self._dsdt(y0 + dt2 * k2)
        k4 = self._dsdt(y0 + dt * k3)
        ns = (y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4))[:4]
        ns[0], ns[1] = _wrap(ns[0], -np.pi, np.pi), _wrap(ns[1], -np.pi, np.pi)
        ns[2] = np.minimum(np.maximum(ns[2], -self.max_vel_1), self.max_vel_1)
        ns[3] = np.minimum(np.maximum(ns[3], -self.max_vel_2), self.max_vel_2)
        self.state = np.ascontiguousarray(ns.T)
        terminated = -np.cos(ns[0]) - np.cos(ns[1] + ns[0]) > 1.0
        return self.observe(), np.where(terminated, 0.0, -1.0), terminated


def _wrap(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Gymnasium's ``wrap``: shift by (hi - lo) until within [lo, hi], element by element."""
    diff = hi - lo
    while np.any(above := x > hi):
        x = np.where(above, x - diff, x)
    while np.any(below := x < lo):
        x = np.where(below, x + diff, x)
    return x
