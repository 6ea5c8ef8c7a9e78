"""n-step transitions from a vector env's steps (Sutton & Barto ch. 7; Rainbow's multi-step targets).

Each emitted transition carries what a one-step learner needs to form the n-step target
``R + discount * Q(next_obs, .)``: ``R = r_t + gamma r_{t+1} + ... + gamma^{k-1} r_{t+k-1}`` and
``discount = gamma^k`` (0 when the episode terminated inside the window: nothing to bootstrap).
``k = n`` normally; it is shorter when the episode ends (terminated or truncated) inside the
window, or when the round ends (``flush``): a truncated episode bootstraps from its final
observation, an unfinished window at the end of a round from the current one. A k-step target is
as valid as an n-step one, so nothing has to survive the round but the replay buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Transitions:
    """A batch of n-step transitions (row ``i`` is one)."""

    obs: np.ndarray  # (b, obs_dim) float32
    action: np.ndarray  # (b, action_dim) float32; a discrete action is its index as a float
    reward: np.ndarray  # (b,) float32: the discounted k-step return
    discount: np.ndarray  # (b,) float32: gamma^k, or 0 after a termination
    next_obs: np.ndarray  # (b, obs_dim) float32

    def __len__(self) -> int:
        return int(self.reward.shape[0])


class NStep:
    """Collects one vector env's steps and emits n-step transitions as their windows close."""

    def __init__(self, num_envs: int, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        self.n, self.gamma = n, gamma
        self.pending: list[list[tuple[np.ndarray, np.ndarray, float]]] = [[] for _ in range(num_envs)]
        self.out: list[tuple[np.ndarray, np.ndarray, float, float, np.ndarray]] = []

    def _emit(self, e: int, next_obs: np.ndarray, terminal: bool) -> None:
        """Emit env ``e``'s oldest pending step with the window it has."""
        window = self.pending[e]
        ret = 0.0
        for j, (_, _, r) in enumerate(window):
            ret += self.gamma ** j * r
        disc = 0.0 if terminal else self.gamma ** len(window)
        obs, act, _ = window.pop(0)
        self.out.append((obs, act, ret, disc, next_obs))

    def step(self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
             truncated: np.ndarray, next_obs: np.ndarray) -> None:
        """One vector step: ``obs`` acted on with ``action``, then ``reward`` and flags; ``next_obs``
        is the observation that follows each env's step (its final observation where the episode
        ended, not the reset one)."""
        for e in range(len(self.pending)):
            self.pending[e].append((obs[e], np.atleast_1d(action[e]), float(reward[e])))
            if terminated[e] or truncated[e]:
                while self.pending[e]:
                    self._emit(e, next_obs[e], bool(terminated[e]))
            elif len(self.pending[e]) == self.n:
                self._emit(e, next_obs[e], False)

    def flush(self, current_obs: np.ndarray) -> None:
        """The round ends: every unfinished window bootstraps from the env's current observation."""
        for e in range(len(self.pending)):
            while self.pending[e]:
                self._emit(e, current_obs[e], False)

    def take(self) -> Transitions | None:
        """The transitions emitted since the last call (None if none)."""
        if not self.out:
            return None
        obs, act, ret, disc, nxt = zip(*self.out, strict=True)
        self.out = []
        return Transitions(np.asarray(obs, np.float32), np.asarray(act, np.float32), np.asarray(ret, np.float32),
                           np.asarray(disc, np.float32), np.asarray(nxt, np.float32))
