"""Collecting on-policy rollouts from a Gymnasium vector environment.

The vector env must use ``AutoresetMode.SAME_STEP`` (see ``fedrl.envs.make_vector_env``):
on the step where an episode ends, ``infos["final_obs"][e]`` is its true last observation
and the returned observation is already the first of the next episode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol, TypeVar

import gymnasium as gym
import numpy as np
import torch
from typing_extensions import Self

from fedrl.model.moments import Moments, normalize
from fedrl.rl.networks import ActorCritic, as_real


class Rollout(NamedTuple):
    """One rollout of T steps in E environments; every field is ``[T, E, ...]``."""

    obs: torch.Tensor  # normalized as the policy saw it
    actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor  # scaled as the learner uses them
    values: torch.Tensor
    next_values: torch.Tensor  # V of the true next state (see fedrl.rl.advantages.gae)
    terminated: torch.Tensor  # float 0/1
    done: torch.Tensor  # float 0/1, terminated or truncated


@dataclass(frozen=True)
class Cursor:
    """Where the environments stand between rollouts (and between rounds).

    ``obs`` is raw (unnormalized) ``[E, D]``; ``ep_return``/``ep_length`` are the running
    undiscounted return and length of each env's current episode; ``ret_acc`` is the
    discounted-return accumulator of reward scaling.
    """

    obs: np.ndarray
    ep_return: np.ndarray
    ep_length: np.ndarray
    ret_acc: np.ndarray

    @staticmethod
    def fresh(obs: np.ndarray) -> Cursor:
        e = len(obs)
        return Cursor(obs, np.zeros(e), np.zeros(e, np.int64), np.zeros(e))


@dataclass(frozen=True)
class Normalizers:
    """Observation statistics (None: off) and reward-scaling statistics (None: off)."""

    obs: Moments | None
    ret: Moments | None
    obs_local: Moments | None = None  # what this node observed since the last round
    center_obs: bool = True  # algo.norm-obs-center: fold observations in about their mean, or about zero


class RolloutResult(NamedTuple):
    rollout: Rollout
    cursor: Cursor
    normalizers: Normalizers
    episode_returns: list[float]
    episode_lengths: list[int]


def to_env_actions(actions: np.ndarray, space: gym.Space) -> np.ndarray:  # type: ignore[type-arg]
    """Discrete: int64. Box: clipped to the env's own bounds (nodes may differ, e.g. Pendulum's
    ``max_torque``); the Gaussian is unbounded and its log-probability is of the unclipped
    sample, as CleanRL does with ClipAction."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(actions, space.low, space.high)
    return actions.astype(np.int64)


class EnvStep(NamedTuple):
    """One vector step: raw next observations, float64 rewards, the episode-end flags, ``infos``."""

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    done: np.ndarray
    infos: dict[str, Any]


def step_envs(envs: gym.vector.VectorEnv, actions: torch.Tensor) -> EnvStep:  # type: ignore[type-arg]
    """Step ``envs`` with the policy's actions ``[E, ...]`` in the env's form (``to_env_actions``)."""
    obs, reward, terminated, truncated, infos = envs.step(to_env_actions(actions.numpy(), envs.single_action_space))
    return EnvStep(obs, np.asarray(reward, np.float64), terminated, truncated, np.logical_or(terminated, truncated),
                   infos)


M = TypeVar("M", bound="Mergeable")


class Mergeable(Protocol):
    def merge(self, other: Self) -> Self: ...


def scale_rewards(reward: np.ndarray, done: np.ndarray, ret_acc: np.ndarray, gamma: float, ret_m: M,
                  moments_of: Callable[[np.ndarray], M], var_of: Callable[[M], np.ndarray | float],
                  ) -> tuple[np.ndarray, np.ndarray, M]:
    """Reward scaling as gymnasium's NormalizeReward: divide by the std of the discounted return
    (Engstrom et al., ICLR 2020, "code-level optimizations"). ``ret_acc`` is each env's running
    discounted return, ``ret_m`` its statistics (``moments_of`` a batch of ``ret_acc``; ``var_of``
    the variance each env divides by). Returns the scaled rewards, the next ``ret_acc`` (reset
    where an episode ended) and the merged statistics."""
    ret_acc = ret_acc * gamma + reward
    ret_m = ret_m.merge(moments_of(ret_acc))
    return reward / np.sqrt(var_of(ret_m) + 1e-8), np.where(done, 0.0, ret_acc), ret_m


def collect(
    model: ActorCritic,
    envs: gym.vector.VectorEnv,
    cursor: Cursor,
    steps: int,
    generator: torch.Generator,
    norms: Normalizers,
    gamma: float,
    random_actions: bool = False,
) -> RolloutResult:
    """Run ``steps`` vector steps with the current policy; return tensors and new cursor.

    ``random_actions``: act with ``ActorCritic.random_action`` instead, recording the policy's
    log-probability of those actions (the random-action attacker; PPO then treats them as its own)."""
    n_env = len(cursor.obs)
    obs_buf, act_buf, logp_buf, rew_buf, val_buf = [], [], [], [], []
    term_buf, done_buf = [], []
    truncated_final: list[tuple[int, int, np.ndarray]] = []
    raw_obs = cursor.obs
    ep_ret, ep_len, ret_acc = cursor.ep_return.copy(), cursor.ep_length.copy(), cursor.ret_acc.copy()
    obs_m, ret_m, obs_local = norms.obs, norms.ret, norms.obs_local
    finished_returns: list[float] = []
    finished_lengths: list[int] = []

    def norm_obs(x: np.ndarray) -> np.ndarray:
        return normalize(x, obs_m) if obs_m is not None else x.astype(np.float32)

    obs_t = as_real(norm_obs(raw_obs))
    for t in range(steps):
        with torch.inference_mode():
            if random_actions:
                action = model.random_action(obs_t, generator)
                logp = model.log_prob_entropy(obs_t, action)[0]
            else:
                action, logp = model.sample(obs_t, generator)
            value = model.value(obs_t)
        next_raw, reward, terminated, truncated, done, infos = step_envs(envs, action)
        ep_ret += reward
        ep_len += 1
        scaled = reward
        if ret_m is not None:
            scaled, ret_acc, ret_m = scale_rewards(reward, done, ret_acc, gamma, ret_m,
                                                   lambda acc: Moments.of(acc[:, None]), lambda m: m.var[0])
        if obs_m is not None:
            obs_m, obs_local = _update_obs(obs_m, obs_local, Moments.of(next_raw, norms.center_obs))
        for e in np.flatnonzero(done):
            finished_returns.append(float(ep_ret[e]))
            finished_lengths.append(int(ep_len[e]))
            if truncated[e] and not terminated[e]:
                truncated_final.append((t, int(e), norm_obs(infos["final_obs"][e][None])[0]))
        ep_ret = np.where(done, 0.0, ep_ret)
        ep_len = np.where(done, 0, ep_len)
        obs_buf.append(obs_t)
        act_buf.append(action)
        logp_buf.append(logp)
        val_buf.append(value)
        rew_buf.append(as_real(scaled))
        term_buf.append(as_real(terminated))
        done_buf.append(as_real(done))
        raw_obs = next_raw
        obs_t = as_real(norm_obs(raw_obs))

    values = torch.stack(val_buf)
    with torch.inference_mode():
        last_value = model.value(obs_t)
        next_values = torch.cat([values[1:], last_value[None]], 0).clone()
        if truncated_final:
            finals = as_real(np.stack([f for _, _, f in truncated_final]))
            v_final = model.value(finals)
            for k, (step, env_i, _) in enumerate(truncated_final):
                next_values[step, env_i] = v_final[k]
    rollout = Rollout(
        torch.stack(obs_buf),
        torch.stack(act_buf),
        torch.stack(logp_buf),
        torch.stack(rew_buf),
        values,
        next_values,
        torch.stack(term_buf),
        torch.stack(done_buf),
    )
    assert rollout.obs.shape[:2] == (steps, n_env)
    new_cursor = Cursor(raw_obs, ep_ret, ep_len, ret_acc)
    new_norms = replace(norms, obs=obs_m, ret=ret_m, obs_local=obs_local)
    return RolloutResult(rollout, new_cursor, new_norms, finished_returns, finished_lengths)


def _update_obs(
    obs_m: Moments, obs_local: Moments | None, m: Moments
) -> tuple[Moments, Moments | None]:
    return obs_m.merge(m), (obs_local.merge(m) if obs_local is not None else None)
