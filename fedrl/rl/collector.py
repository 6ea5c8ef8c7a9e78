"""A replay learner's env loop (DQN, SAC): a node's vector envs stepped with the learner's
actions, each step's n-step transitions appended to the node's replay buffer.

Episodes continue across rounds (``start_envs`` puts back the unfinished ones; ``finish`` gives
what to keep). With observation normalization on, the policy sees observations normalized by the
server's statistics merged with what the node has seen this round; the replay keeps raw
observations and the learner normalizes a batch when it samples it. Requires Gymnasium's
``AutoresetMode.SAME_STEP`` (``infos["final_obs"]`` holds an ended episode's last observation).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from fedrl.model.moments import Moments, normalize
from fedrl.rl.nstep import NStep
from fedrl.rl.replay import Replay
from fedrl.rl.rollout import Cursor
from fedrl.rl.train import env_arrays, start_envs
from fedrl.wire import LocalPlan, NodeState


class Collector:
    def __init__(self, envs: gym.vector.VectorEnv, plan: LocalPlan, state: NodeState, replay: Replay,
                 n_step: int, gamma: float, obs_dim: int, obs_on: bool, center_obs: bool = True) -> None:
        self.envs, self.replay = envs, replay
        self.center_obs = center_obs  # algo.norm-obs-center
        self.norm = (plan.obs_moments or Moments.empty(obs_dim)) if obs_on else None
        self.local = Moments.empty(obs_dim) if obs_on else None  # this round's observations only
        self.cursor = start_envs(envs, plan, state)
        self.raw = self.cursor.obs
        self.ep_ret, self.ep_len = self.cursor.ep_return.copy(), self.cursor.ep_length.copy()
        self.nstep = NStep(len(self.raw), n_step, gamma)
        self.returns: list[float] = []  # of the episodes that ended this round

    def normalized(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` as the learner's networks see them (float32)."""
        return normalize(obs, self.norm) if self.norm is not None else obs.astype(np.float32)

    def policy_obs(self) -> np.ndarray:
        return self.normalized(self.raw)

    def step(self, action: np.ndarray) -> None:
        """One vector step with ``action``; its closed n-step windows go into the replay."""
        nxt, reward, term, trunc, infos = self.envs.step(action)
        done = np.logical_or(term, trunc)
        final = nxt.copy()
        for e in np.flatnonzero(done):
            final[e] = infos["final_obs"][e]
            self.returns.append(float(self.ep_ret[e] + reward[e]))
        self.nstep.step(self.raw, action, np.asarray(reward, np.float64), term, trunc, final)
        self.ep_ret = np.where(done, 0.0, self.ep_ret + reward)
        self.ep_len = np.where(done, 0, self.ep_len + 1)
        if self.norm is not None and self.local is not None:
            batch = Moments.of(nxt, self.center_obs)
            self.norm, self.local = self.norm.merge(batch), self.local.merge(batch)
        self.raw = nxt
        self._drain()

    def _drain(self) -> None:
        added = self.nstep.take()
        if added is not None:
            self.replay.add(added)

    def finish(self) -> dict[str, np.ndarray]:
        """The round ends: open windows bootstrap from the current observations and enter the
        replay; returns the envs' ``NodeState`` arrays (unfinished episodes)."""
        self.nstep.flush(self.raw)
        self._drain()
        return env_arrays(self.envs, Cursor(self.raw, self.ep_ret, self.ep_len, self.cursor.ret_acc))

    def train_return(self) -> float:
        return float(np.mean(self.returns)) if self.returns else float("nan")
