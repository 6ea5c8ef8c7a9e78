"""Collecting on-policy rollouts for a cohort: K nodes, each with E envs, in one batched env.

The cohort's vector env holds ``K * E`` sub-envs, node k's being rows ``k*E .. (k+1)*E - 1``
(``fedrl.envs.batched``). Each step is one batched forward of the K policies
(:class:`fedrl.rl.stacked.StackedActorCritic`) and one env step; everything per node that
``fedrl.rl.rollout.collect`` keeps (observation statistics, reward scaling, episode returns,
bootstrapping of truncated episodes) is kept per node here, with the same formulas, as arrays
with a leading node axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch

from fedrl.model.moments import Moments
from fedrl.rl.networks import as_real
from fedrl.rl.rollout import Cursor, Rollout, scale_rewards, step_envs
from fedrl.rl.stacked import StackedActorCritic


@dataclass(frozen=True)
class MomentsStack:
    """K nodes' :class:`Moments`: ``count [K]``, ``mean [K, D]``, ``m2 [K, D]`` (same merge rule)."""

    count: np.ndarray
    mean: np.ndarray
    m2: np.ndarray

    @staticmethod
    def stack(ms: list[Moments]) -> MomentsStack:
        return MomentsStack(np.array([m.count for m in ms], np.float64), np.stack([m.mean for m in ms]),
                            np.stack([m.m2 for m in ms]))

    def row(self, k: int) -> Moments:
        return Moments(float(self.count[k]), self.mean[k].copy(), self.m2[k].copy())

    @staticmethod
    def of(batch: np.ndarray, center: bool = True) -> MomentsStack:
        """Moments of each node's ``[B, D]`` rows of a ``[K, B, D]`` batch (``Moments.of``)."""
        b = np.asarray(batch, np.float64)
        mean = b.mean(1) if center else np.zeros((b.shape[0], b.shape[2]))
        return MomentsStack(np.full(len(b), float(b.shape[1])), mean, ((b - mean[:, None]) ** 2).sum(1))

    @property
    def var(self) -> np.ndarray:
        safe = np.where(self.count > 0, self.count, 1.0)[:, None]
        return np.where(self.count[:, None] > 0, self.m2 / safe, 1.0)

    def merge(self, other: MomentsStack) -> MomentsStack:
        """``Moments.merge`` node by node (a node with an empty side keeps the other side)."""
        n = self.count + other.count
        safe = np.where(n > 0, n, 1.0)[:, None]
        delta = other.mean - self.mean
        mean = self.mean + delta * other.count[:, None] / safe
        m2 = self.m2 + other.m2 + delta**2 * self.count[:, None] * other.count[:, None] / safe
        mean = np.where((other.count == 0)[:, None], self.mean, np.where((self.count == 0)[:, None], other.mean, mean))
        m2 = np.where((other.count == 0)[:, None], self.m2, np.where((self.count == 0)[:, None], other.m2, m2))
        return MomentsStack(n, mean, m2)

    def normalize(self, obs: np.ndarray, clip: float = 10.0, eps: float = 1e-8) -> np.ndarray:
        """``fedrl.model.moments.normalize`` of node k's rows ``obs[k]`` with node k's statistics."""
        scaled = (obs - self.mean[:, None]) / np.sqrt(self.var[:, None] + eps)
        return np.clip(np.where((self.count > 0)[:, None, None], scaled, obs), -clip, clip).astype(np.float32)


@dataclass(frozen=True)
class CohortNormalizers:
    """Per-node statistics (None: off), as ``fedrl.rl.rollout.Normalizers``."""

    obs: MomentsStack | None
    ret: MomentsStack | None
    obs_local: MomentsStack | None
    center_obs: bool = True  # algo.norm-obs-center: fold observations in about their mean, or about zero


class CohortRollout(NamedTuple):
    rollout: Rollout  # every field [T, K*E, ...]: node k's envs are columns k*E .. (k+1)*E - 1
    cursor: Cursor  # [K*E] rows
    normalizers: CohortNormalizers
    episode_returns: list[list[float]]  # per node
    episode_lengths: list[list[int]]


def collect_cohort(
    model: StackedActorCritic,
    envs: gym.vector.VectorEnv,  # type: ignore[type-arg]
    cursor: Cursor,
    steps: int,
    generators: list[torch.Generator],
    norms: CohortNormalizers,
    gamma: float,
) -> CohortRollout:
    """``fedrl.rl.rollout.collect`` for K nodes at once (see the module doc)."""
    k, n = model.k, len(cursor.obs)
    e = n // k
    node_of = np.arange(n) // e
    obs_m, ret_m, obs_local = norms.obs, norms.ret, norms.obs_local
    ep_ret, ep_len, ret_acc = cursor.ep_return.copy(), cursor.ep_length.copy(), cursor.ret_acc.copy()
    returns: list[list[float]] = [[] for _ in range(k)]
    lengths: list[list[int]] = [[] for _ in range(k)]
    bufs: dict[str, list[torch.Tensor]] = {name: [] for name in ("obs", "act", "logp", "rew", "val", "term", "done")}
    truncated_final: list[tuple[int, int, np.ndarray]] = []

    def norm_obs(raw: np.ndarray, stats: MomentsStack | None) -> np.ndarray:
        by_node = raw.reshape(k, -1, raw.shape[-1])
        return (stats.normalize(by_node) if stats is not None else by_node.astype(np.float32)).reshape(raw.shape)

    raw_obs = cursor.obs
    obs_t = as_real(norm_obs(raw_obs, obs_m))
    for t in range(steps):
        with torch.inference_mode():
            action, logp = model.sample(obs_t.reshape(k, e, -1), generators)
            value = model.value(obs_t.reshape(k, e, -1))
        flat_action = action.reshape(n, *action.shape[2:])
        next_raw, reward, terminated, truncated, done, infos = step_envs(envs, flat_action)
        ep_ret += reward
        ep_len += 1
        scaled = reward
        if ret_m is not None:  # per node: each node's statistics scale its envs' rewards
            scaled, ret_acc, ret_m = scale_rewards(reward, done, ret_acc, gamma, ret_m,
                                                   lambda acc: MomentsStack.of(acc.reshape(k, e, 1)),
                                                   lambda m: m.var[node_of, 0])
        if obs_m is not None:
            batch = MomentsStack.of(next_raw.reshape(k, e, -1), norms.center_obs)
            obs_m = obs_m.merge(batch)
            obs_local = obs_local.merge(batch) if obs_local is not None else None
        for i in np.flatnonzero(done):
            returns[node_of[i]].append(float(ep_ret[i]))
            lengths[node_of[i]].append(int(ep_len[i]))
            if truncated[i] and not terminated[i]:
                final = np.asarray(infos["final_obs"][i], np.float64)[None, None]  # [1, 1, D]
                if obs_m is not None:
                    final = MomentsStack.stack([obs_m.row(int(node_of[i]))]).normalize(final)
                truncated_final.append((t, int(i), final.reshape(-1).astype(np.float32)))
        ep_ret = np.where(done, 0.0, ep_ret)
        ep_len = np.where(done, 0, ep_len)
        bufs["obs"].append(obs_t)
        bufs["act"].append(flat_action)
        bufs["logp"].append(logp.reshape(n))
        bufs["val"].append(value.reshape(n))
        bufs["rew"].append(as_real(scaled))
        bufs["term"].append(as_real(terminated))
        bufs["done"].append(as_real(done))
        raw_obs = next_raw
        obs_t = as_real(norm_obs(raw_obs, obs_m))

    values = torch.stack(bufs["val"])
    with torch.inference_mode():
        last_value = model.value(obs_t.reshape(k, e, -1)).reshape(n)
        next_values = torch.cat([values[1:], last_value[None]], 0).clone()
        if truncated_final:  # V of the true last observations, all nodes' in one padded forward
            slot = np.zeros(len(truncated_final), np.int64)
            filled = np.zeros(k, np.int64)
            for j, (_, row, _) in enumerate(truncated_final):
                slot[j] = filled[row // e]
                filled[row // e] += 1
            x = torch.zeros((k, int(filled.max()), obs_t.shape[-1]))
            for j, (_, row, final_obs) in enumerate(truncated_final):
                x[row // e, slot[j]] = as_real(final_obs)
            v_final = model.value(x)
            for j, (step, row, _) in enumerate(truncated_final):
                next_values[step, row] = v_final[row // e, slot[j]]
    rollout = Rollout(torch.stack(bufs["obs"]), torch.stack(bufs["act"]), torch.stack(bufs["logp"]),
                      torch.stack(bufs["rew"]), values, next_values, torch.stack(bufs["term"]),
                      torch.stack(bufs["done"]))
    return CohortRollout(rollout, Cursor(raw_obs, ep_ret, ep_len, ret_acc),
                         CohortNormalizers(obs_m, ret_m, obs_local, norms.center_obs), returns, lengths)
