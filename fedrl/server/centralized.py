"""The centralized baseline: one agent trained on the pooled data of every node.

Its vector env has ``nodes.count x algo.num-envs`` sub-envs, sub-env j running variant
``j mod nodes.count``, and each round it takes ``nodes.count x algo.local-steps`` env steps:
the same data per round as a full-participation federation, in one learner. It also takes
``nodes.count x ppo.num-minibatches`` minibatches per epoch (``Algorithm.pooled``), so its minibatches have the
nodes' size and it does the same gradient work per env step as the federation: comparing the
two measures what federating costs, not a different amount of computation.
It writes the same run folder (config.json, metrics.jsonl, summary.json, model, plots).
"""

from __future__ import annotations

import time

import torch

from fedrl.algorithms.base import TrainJob
from fedrl.config import Config
from fedrl.envs.batched import make_batched_env
from fedrl.registry.algorithms import get as algorithm
from fedrl.server.federation import Federation
from fedrl.server.rundir import end_round, finish, resolve_run_folder
from fedrl.wire import LocalPlan, NodeState


def run_centralized(cfg: Config) -> Federation:
    torch.set_num_threads(1)
    fed = Federation(cfg)
    folder = resolve_run_folder(fed)
    learner = algorithm(cfg.algo.name)
    pooled = learner.pooled(cfg, cfg.nodes.count)
    envs = make_batched_env(cfg.env.id, [fed.variants[j % len(fed.variants)] for j in range(pooled.algo.num_envs)],
                           fed.kwargs)
    state = NodeState.empty()
    started = time.time()
    try:
        for rnd in range(fed.round + 1, cfg.num_server_rounds + 1):
            t0 = time.time()
            plan = LocalPlan(0, rnd, cfg.num_server_rounds, cfg.seed, 0.0, fed.moments[0])
            res = learner.train(pooled, TrainJob(fed.spec, fed.models[0], envs, plan, state))
            state = res.state
            fed.rule.adopt(res.weights, res.obs_moments)
            fed.counters.trained(res.env_steps)
            fed.completed(rnd)
            # The learner's own state (Adam moments, episodes) is not checkpointed: a resumed
            # centralized run restarts its optimizer moments and episodes.
            if end_round(fed, folder, started, t0, {"train_returns": {"central": res.metrics.get("train_return")}}):
                break
    finally:
        envs.close()
    fed.counters.ran(time.time() - started)
    finish(fed, folder)
    return fed
