"""Train locally for a budget: the one function a node (or a multi-GPU site) implements.

``train_locally`` takes global weights, a ``LocalPlan`` and the node's ``NodeState`` from the
previous round, runs ``plan.iterations`` PPO iterations and returns new weights, the env
steps taken, this round's observation statistics and the next ``NodeState``. It has no hidden
state: randomness is derived from (seed, node, round); everything that must survive to the
next round is in the returned ``NodeState``, which serializes to a dict of numpy arrays.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch

from fedrl.config import Config, PPOConfig, norm_on
from fedrl.envs.snapshot import restore, snapshot
from fedrl.model.moments import Moments
from fedrl.rl.adam_state import adam_from_arrays, adam_to_arrays
from fedrl.rl.networks import ActorCritic, PolicySpec, get_weights, set_weights
from fedrl.rl.ppo import PPOHyper, Proximal, ppo_update
from fedrl.rl.rollout import Cursor, Normalizers, collect
from fedrl.seeding import ENV_RESET, TRAIN, derive, torch_generator
from fedrl.wire import LocalPlan, LocalResult, NodeState

__all__ = ["LocalPlan", "LocalResult", "NodeState", "batch_steps", "env_arrays", "hyper", "iterations_per_round",
           "round_lr", "start_envs", "train_locally", "uses_norm"]

if TYPE_CHECKING:
    from fedrl.rl.dpsgd import SampleDP


def hyper(ppo: PPOConfig, spec: PolicySpec) -> PPOHyper:
    """The update's knobs; ``ppo.ent-floor``'s fraction becomes nats for ``spec``'s actions."""
    floor = ppo.ent_floor * math.log(spec.action_dim) if spec.action_kind == "discrete" else 0.0
    return PPOHyper(
        gamma=ppo.gamma, gae_lambda=ppo.gae_lambda, num_minibatches=ppo.num_minibatches,
        update_epochs=ppo.update_epochs, norm_adv=ppo.norm_adv, clip_coef=ppo.clip_coef,
        clip_vloss=ppo.clip_vloss, ent_coef=ppo.ent_coef, vf_coef=ppo.vf_coef,
        max_grad_norm=ppo.max_grad_norm, target_kl=ppo.target_kl, ent_floor=floor,
    )


def batch_steps(cfg: Config) -> int:
    """Env steps in one PPO rollout (all of a node's envs)."""
    return cfg.algo.num_envs * cfg.ppo.num_steps


def iterations_per_round(cfg: Config) -> int:
    """PPO iterations (rollout + update) in one round's ``algo.local-steps``."""
    return cfg.algo.local_steps // batch_steps(cfg)


def round_lr(cfg: Config, rnd: int) -> float:
    """Mean learning rate of round ``rnd``'s PPO iterations (the schedule ``train_locally`` follows)."""
    ppo = cfg.ppo
    if not ppo.anneal_lr:
        return ppo.lr
    iters = iterations_per_round(cfg)
    total = max(1, cfg.num_server_rounds * iters)
    return ppo.lr * float(np.mean([max(0.0, 1.0 - ((rnd - 1) * iters + i) / total) for i in range(iters)]))


def uses_norm(setting: str, spec: PolicySpec) -> bool:
    return norm_on(setting, spec.action_kind == "continuous")


def start_envs(envs: gym.vector.VectorEnv, plan: LocalPlan, state: NodeState) -> Cursor:
    """Reset the node's envs for this round, then put back the episodes it left unfinished."""
    obs, _ = envs.reset(seed=derive(plan.seed, ENV_RESET, plan.node, plan.round))
    a = state.arrays
    if "env.states" in a:
        restored = restore(envs, a["env.states"], a["env.elapsed"])
        if restored is not None:
            return Cursor(restored, a["ep.return"].copy(), a["ep.length"].astype(np.int64), a["ret.acc"].copy())
    return Cursor.fresh(obs)


def env_arrays(envs: gym.vector.VectorEnv, cursor: Cursor) -> dict[str, np.ndarray]:
    """Where the node's envs stand, as ``NodeState`` arrays (``start_envs`` continues from them):
    unfinished episodes go on next round. Empty for an env that cannot be snapshotted."""
    snap = snapshot(envs)
    if snap is None:
        return {}
    return {"env.states": snap[0], "env.elapsed": snap[1], "ep.return": cursor.ep_return,
            "ep.length": cursor.ep_length, "ret.acc": cursor.ret_acc}


def train_locally(
    spec: PolicySpec,
    weights: list[np.ndarray],
    envs: gym.vector.VectorEnv,
    cfg: Config,
    plan: LocalPlan,
    state: NodeState,
    dp: SampleDP | None = None,
    random_actions: bool = False,
) -> LocalResult:
    """Run ``iterations_per_round(cfg)`` PPO iterations from ``weights`` (see module doc).

    ``random_actions``: collect with random actions (the random-action Byzantine node, ``attack.*``).

    With ``dp`` every PPO update is DP-SGD over rollout segments (``fedrl.rl.dpsgd``); the
    node's accountant continues from ``state`` and ``metrics["dpsgd_epsilon"]`` is its ε so far.
    """
    t0 = time.perf_counter()
    model = ActorCritic(spec)
    set_weights(model, weights)
    algo, ppo = cfg.algo, cfg.ppo
    optimizer = torch.optim.Adam(model.parameters(), lr=ppo.lr, eps=1e-5)
    adam_from_arrays(optimizer, state.arrays)
    gen = torch_generator(plan.seed, TRAIN, plan.node, plan.round)
    hp = hyper(ppo, spec)
    prox = None
    if plan.prox_mu > 0:
        prox = Proximal(plan.prox_mu, [p.detach().clone() for p in model.parameters()])

    obs_on = uses_norm(algo.norm_obs, spec)
    ret_on = uses_norm(algo.norm_reward, spec)
    ret_m = Moments.from_array(state.arrays["ret.moments"]) if "ret.moments" in state.arrays else Moments.empty(1)
    norms = Normalizers(
        obs=(plan.obs_moments or Moments.empty(spec.obs_dim)) if obs_on else None,
        ret=ret_m if ret_on else None,
        obs_local=Moments.empty(spec.obs_dim) if obs_on else None,
        center_obs=algo.norm_obs_center,
    )
    cursor = start_envs(envs, plan, state)
    accountant = None
    if dp is not None:
        from fedrl.rl.dpsgd import dp_ppo_update, load_accountant

        accountant = load_accountant(state.arrays)  # the node's whole history: never a fresh one per round
    iters = iterations_per_round(cfg)
    returns: list[float] = []
    lengths: list[int] = []
    stats: dict[str, float] = {}
    for i in range(iters):
        if ppo.anneal_lr:
            progress = ((plan.round - 1) * iters + i) / max(1, plan.total_rounds * iters)
            optimizer.param_groups[0]["lr"] = ppo.lr * max(0.0, 1.0 - progress)
        res = collect(model, envs, cursor, ppo.num_steps, gen, norms, ppo.gamma, random_actions)
        cursor, norms = res.cursor, res.normalizers
        returns += res.episode_returns
        lengths += res.episode_lengths
        if accountant is not None and dp is not None:
            stats = dp_ppo_update(model, optimizer, res.rollout, hp, dp, accountant)
        else:
            stats = ppo_update(model, optimizer, res.rollout, hp, gen, prox)

    arrays = adam_to_arrays(optimizer)
    dp_metrics: dict[str, float] = {}
    if accountant is not None and dp is not None:
        from fedrl.rl.dpsgd import save_accountant

        arrays.update(save_accountant(accountant))
        dp_metrics["dpsgd_epsilon"] = float(accountant.get_epsilon(delta=dp.delta))
    if norms.ret is not None:
        arrays["ret.moments"] = norms.ret.to_array()
    arrays.update(env_arrays(envs, cursor))
    steps = iters * batch_steps(cfg)
    metrics = {
        "train_return": float(np.mean(returns)) if returns else float("nan"),
        "train_episodes": float(len(returns)),
        "train_seconds": time.perf_counter() - t0,
        "lr": float(optimizer.param_groups[0]["lr"]),
        # Adam's step count: it continues across rounds (and SuperNode restarts, with state-dir)
        "optimizer_steps": float(arrays.get("adam.0.step", np.zeros(1))[0]),
        **stats,
        **dp_metrics,
    }
    return LocalResult(get_weights(model), steps, norms.obs_local, NodeState(arrays), metrics)
