"""DQN's local training for one round: ε-greedy collection into the node's replay buffer and
Double DQN updates from it (``fedrl.rl.dqn``; the buffer is ``fedrl.rl.replay``).

A round starts from the Q network the node received; its target network is re-derived from
that network (a copy), then follows the online one (a copy every ``dqn.target-update``
gradient steps, or Polyak averaging with ``dqn.tau < 1``). The replay buffer, Adam's moments and
the unfinished episodes come from the node's ``NodeState`` and go back into it: they never leave
the node. ε, the importance-weight exponent and, with ``dqn.lr-end``, the learning rate follow the
run's progress, ``(round - 1 + fraction of this round) / rounds``, so every node explores and
steps alike whatever rounds it was chosen in.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from fedrl.config import Config
from fedrl.rl.adam_state import adam_from_arrays, adam_to_arrays
from fedrl.rl.collector import Collector
from fedrl.rl.dqn import (
    QNetwork,
    beta_at,
    double_dqn_target,
    dqn_loss,
    epsilon_at,
    greedy_or_random,
    lr_at,
    soft_update,
)
from fedrl.rl.losses import proximal_penalty
from fedrl.rl.networks import PolicySpec, get_weights, set_weights
from fedrl.rl.replay import Replay
from fedrl.rl.train import uses_norm
from fedrl.seeding import TRAIN, numpy_rng
from fedrl.wire import LocalPlan, LocalResult, NodeState


class _Learner:
    """The online and target networks, their optimizer and the replay buffer of one round."""

    def __init__(self, model: QNetwork, cfg: Config, plan: LocalPlan, state: NodeState, spec: PolicySpec) -> None:
        d = cfg.dqn
        self.d, self.model = d, model
        self.target = copy.deepcopy(model).requires_grad_(False)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=d.lr)
        adam_from_arrays(self.optimizer, state.arrays)
        self.replay = Replay.from_state(state.arrays, d.buffer_size, spec.obs_dim, 1, d.per_alpha)
        self.anchor = [p.detach().clone() for p in model.parameters()] if plan.prox_mu > 0 else None
        self.mu = plan.prox_mu
        self.steps = 0
        self.losses: list[float] = []

    def update(self, batch: int, beta: float, rng: np.random.Generator,
               view: Callable[[np.ndarray], np.ndarray]) -> None:
        """One gradient step on a replayed batch; new priorities for the batch."""
        idx, t, w = self.replay.sample(batch, beta, rng)
        obs_t, next_t = torch.as_tensor(view(t.obs)), torch.as_tensor(view(t.next_obs))
        with torch.no_grad():
            y = double_dqn_target(self.model(next_t), self.target(next_t), torch.as_tensor(t.reward),
                                  torch.as_tensor(t.discount))
        loss, td = dqn_loss(self.model(obs_t), torch.as_tensor(t.action[:, 0]), y, torch.as_tensor(w))
        if self.anchor is not None:  # FedProx
            loss = loss + proximal_penalty(self.model.parameters(), self.anchor, self.mu)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.d.max_grad_norm)
        self.optimizer.step()
        self.replay.update_priorities(idx, td.numpy())
        self.steps += 1
        self.losses.append(float(loss.detach()))
        if self.d.tau < 1.0:
            soft_update(self.target, self.model, self.d.tau)
        elif self.steps % self.d.target_update == 0:
            self.target.load_state_dict(self.model.state_dict())


def train_dqn(spec: PolicySpec, weights: list[np.ndarray], envs: gym.vector.VectorEnv, cfg: Config,
              plan: LocalPlan, state: NodeState, random_actions: bool = False) -> LocalResult:
    """Collect ``algo.local-steps`` env steps with ε-greedy actions and train on replay (see the
    module doc). ``random_actions``: act uniformly at random (the random-action attacker)."""
    t0 = time.perf_counter()
    d, n_env = cfg.dqn, cfg.algo.num_envs
    model = QNetwork(spec, d.dueling)
    set_weights(model, weights)
    learner = _Learner(model, cfg, plan, state, spec)
    rng = numpy_rng(plan.seed, TRAIN, plan.node, plan.round)
    envs_loop = Collector(envs, plan, state, learner.replay, d.n_step, d.gamma, spec.obs_dim,
                          uses_norm(cfg.algo.norm_obs, spec), cfg.algo.norm_obs_center)
    iters = cfg.algo.local_steps // n_env
    since = int(state.arrays["dqn.since"][0]) if "dqn.since" in state.arrays else 0  # env steps toward the next phase
    eps, lr = d.eps_start, d.lr
    for i in range(iters):
        progress = ((plan.round - 1) + i / iters) / max(1, plan.total_rounds)
        eps = 1.0 if random_actions else epsilon_at(progress, d.eps_start, d.eps_end, d.eps_fraction)
        with torch.no_grad():
            q = model(torch.as_tensor(envs_loop.policy_obs()))
        envs_loop.step(greedy_or_random(q, eps, rng))
        since += n_env
        while since >= d.train_freq:  # every train-freq env steps, leftovers carried (train-freq need not divide them)
            since -= d.train_freq
            if len(learner.replay) >= max(d.learning_starts, 1):
                beta = beta_at(progress, d.per_beta)
                lr = lr_at(progress, d.lr, d.lr_end)
                for group in learner.optimizer.param_groups:
                    group["lr"] = lr
                for _ in range(d.gradient_steps):
                    learner.update(d.batch_size, beta, rng, envs_loop.normalized)
    arrays = adam_to_arrays(learner.optimizer)
    arrays.update(envs_loop.finish())
    arrays.update(learner.replay.to_state())
    arrays["dqn.since"] = np.array([since], np.int64)
    metrics = {
        "train_return": envs_loop.train_return(),
        "train_episodes": float(len(envs_loop.returns)),
        "train_seconds": time.perf_counter() - t0,
        "lr": lr,
        "epsilon": float(eps),
        "gradient_steps": float(learner.steps),
        "loss": float(np.mean(learner.losses)) if learner.losses else float("nan"),
        "replay_size": float(len(learner.replay)),
        "optimizer_steps": float(arrays.get("adam.0.step", np.zeros(1))[0]),
    }
    return LocalResult(get_weights(model), iters * n_env, envs_loop.local, NodeState(arrays), metrics)
