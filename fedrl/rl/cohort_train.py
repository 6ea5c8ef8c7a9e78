"""Train a cohort locally for a budget: K nodes' ``train_locally`` in one vectorized pass.

``train_cohort`` takes each node's weights, ``LocalPlan``, ``NodeState`` and variant, and returns
what ``fedrl.rl.train.train_locally`` returns for each of them, within float rounding: the same
env seeds, episode carry-over, observation statistics, reward scaling, learning-rate schedule,
Adam moments, FedProx anchor and random streams, node by node. The K policies step one batched
env (``fedrl.envs.batched``) with one batched forward; their PPO updates run side by side
(``fedrl.rl.cohort_update``). Sample-level DP and the random-action attacker are not vectorized:
those nodes train alone (``fedrl.algorithms.ppo``).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from fedrl.config import Config
from fedrl.envs.batched import BatchedEnv, make_batched_env
from fedrl.model.moments import Moments
from fedrl.rl.cohort_rollout import CohortNormalizers, MomentsStack, collect_cohort
from fedrl.rl.cohort_update import StackedAdam, cohort_ppo_update
from fedrl.rl.networks import PolicySpec, as_real
from fedrl.rl.rollout import Cursor
from fedrl.rl.stacked import StackedActorCritic
from fedrl.rl.train import batch_steps, hyper, iterations_per_round, uses_norm
from fedrl.seeding import ENV_RESET, TRAIN, derive, torch_generator
from fedrl.wire import LocalPlan, LocalResult, NodeState


def _load_adam(opt: StackedAdam, model: StackedActorCritic, states: list[NodeState]) -> None:
    """Each node's Adam moments and step count from its state (``fedrl.rl.train``'s arrays, one
    pair per parameter); a node without them, or with moments of other shapes, starts fresh."""
    for k, st in enumerate(states):
        a = st.arrays
        found = [(a.get(f"adam.{i}.m"), a.get(f"adam.{i}.v")) for i in range(len(model.names))]
        if all(m is not None and v is not None and m.shape == model.shapes[name]
               for (m, v), name in zip(found, model.names, strict=True)):
            with torch.no_grad():
                for (m, v), name in zip(found, model.names, strict=True):
                    cols = model.slices[name]
                    opt.m[k, cols] = torch.as_tensor(m).reshape(-1)
                    opt.v[k, cols] = torch.as_tensor(v).reshape(-1)
            opt.steps[k] = float(a["adam.0.step"][0])


def _adam_arrays(opt: StackedAdam, model: StackedActorCritic, k: int) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    m, v = opt.m[k].detach().numpy(), opt.v[k].detach().numpy()
    for i, name in enumerate(model.names):
        cols, shape = model.slices[name], model.shapes[name]
        out[f"adam.{i}.m"] = m[cols].reshape(shape).copy()
        out[f"adam.{i}.v"] = v[cols].reshape(shape).copy()
        out[f"adam.{i}.step"] = np.asarray([float(opt.steps[k])])
    return out


def _start(envs: BatchedEnv, plans: list[LocalPlan], states: list[NodeState], e: int) -> Cursor:
    """Reset each node's envs with its own seeds, then continue its saved episodes (``train._start``)."""
    seeds: list[int | None] = []
    for plan in plans:
        base = derive(plan.seed, ENV_RESET, plan.node, plan.round)
        seeds += [base + i for i in range(e)]
    obs, _ = envs.reset(seed=seeds)
    n = len(seeds)
    ep_ret, ep_len, ret_acc = np.zeros(n), np.zeros(n, np.int64), np.zeros(n)
    for k, state in enumerate(states):
        a, rows = state.arrays, slice(k * e, (k + 1) * e)
        if "env.states" in a:
            restored = envs.restore(a["env.states"], a["env.elapsed"], rows)
            if restored is not None:
                obs[rows] = restored
                ep_ret[rows], ep_len[rows], ret_acc[rows] = a["ep.return"], a["ep.length"], a["ret.acc"]
    return Cursor(obs, ep_ret, ep_len, ret_acc)


def train_cohort(spec: PolicySpec, cfg: Config, weights: list[list[np.ndarray]], plans: list[LocalPlan],
                 states: list[NodeState], variants: list[dict[str, float]],
                 env_kwargs: dict[str, object]) -> list[LocalResult]:
    """Run ``iterations_per_round(cfg)`` PPO iterations for each node ``k`` from ``weights[k]``,
    ``plans[k]``, ``states[k]`` on ``algo.num-envs`` copies of ``variants[k]`` (module doc)."""
    t0 = time.perf_counter()
    k, e = len(plans), cfg.algo.num_envs
    algo, ppo = cfg.algo, cfg.ppo
    envs = make_batched_env(cfg.env.id, [v for v in variants for _ in range(e)], env_kwargs)
    if not isinstance(envs, BatchedEnv):
        envs.close()
        raise TypeError(f"{cfg.env.id} with env.kwargs {env_kwargs} has no batched physics")
    model = StackedActorCritic(spec, weights)
    optimizer = StackedAdam.fresh(model.flat, model.grad, eps=1e-5)
    _load_adam(optimizer, model, states)
    gens = [torch_generator(p.seed, TRAIN, p.node, p.round) for p in plans]
    hp = hyper(ppo, spec)
    mus = as_real([p.prox_mu for p in plans])
    prox = (mus, model.flat.detach().clone()) if bool((mus > 0).any()) else None

    obs_on, ret_on = uses_norm(algo.norm_obs, spec), uses_norm(algo.norm_reward, spec)
    ret_m = [Moments.from_array(st.arrays["ret.moments"]) if "ret.moments" in st.arrays else Moments.empty(1)
             for st in states]
    norms = CohortNormalizers(
        obs=MomentsStack.stack([p.obs_moments or Moments.empty(spec.obs_dim) for p in plans]) if obs_on
        else None,
        ret=MomentsStack.stack(ret_m) if ret_on else None,
        obs_local=MomentsStack.stack([Moments.empty(spec.obs_dim)] * k) if obs_on else None,
        center_obs=algo.norm_obs_center,
    )
    iters = iterations_per_round(cfg)
    returns: list[list[float]] = [[] for _ in range(k)]
    stats: list[dict[str, float]] = [{} for _ in range(k)]
    lr = np.full(k, ppo.lr)
    try:
        cursor = _start(envs, plans, states, e)
        for i in range(iters):
            if ppo.anneal_lr:
                progress = np.array([((p.round - 1) * iters + i) / max(1, p.total_rounds * iters) for p in plans])
                lr = ppo.lr * np.maximum(0.0, 1.0 - progress)
            res = collect_cohort(model, envs, cursor, ppo.num_steps, gens, norms, ppo.gamma)
            cursor, norms = res.cursor, res.normalizers
            for j in range(k):
                returns[j] += res.episode_returns[j]
            stats = cohort_ppo_update(model, optimizer, lr, res.rollout, hp, gens, prox)
        snap = envs.snapshot()
    finally:
        envs.close()

    seconds = (time.perf_counter() - t0) / k  # the cohort's time, shared equally
    out = []
    for j in range(k):
        rows = slice(j * e, (j + 1) * e)
        arrays = _adam_arrays(optimizer, model, j)
        if norms.ret is not None:
            arrays["ret.moments"] = norms.ret.row(j).to_array()
        arrays.update({"env.states": snap[0][rows], "env.elapsed": snap[1][rows], "ep.return": cursor.ep_return[rows],
                       "ep.length": cursor.ep_length[rows], "ret.acc": cursor.ret_acc[rows]})
        metrics = {
            "train_return": float(np.mean(returns[j])) if returns[j] else float("nan"),
            "train_episodes": float(len(returns[j])),
            "train_seconds": seconds,
            "lr": float(lr[j]),
            "optimizer_steps": float(optimizer.steps[j]),
            **stats[j],
        }
        obs_local = norms.obs_local.row(j) if norms.obs_local is not None else None
        out.append(LocalResult(model.weights(j), iters * batch_steps(cfg), obs_local, NodeState(arrays), metrics))
    return out
