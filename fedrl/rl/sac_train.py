"""SAC's local training for one round (``fedrl.rl.sac``): collection into the node's replay
buffer, then critic, actor and temperature steps from it.

A round starts from the actor and critics the node received; the target critics are re-derived
from them (a copy) and follow by Polyak averaging. The node acts within its own env's action
bounds. Until it has taken ``sac.learning-starts`` env steps in the whole run it acts at random and
does not train (SAC's warm-up): uniformly, or with ``sac.noise-color`` > 0 as ``tanh`` of the
colored noise scaled to its bounds. With ``sac.noise-color`` > 0 the Gaussian noise of the
actor's samples while collecting is colored (``fedrl.rl.colored_noise``): one sequence per env
and action dimension over the round's steps, drawn afresh each round.

What stays on the node, in its ``NodeState``: the replay buffer, the three optimizers' moments,
the temperature, its step count and its unfinished episodes.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from fedrl.config import Config
from fedrl.rl.adam_state import adam_from_arrays, adam_to_arrays
from fedrl.rl.collector import Collector
from fedrl.rl.colored_noise import colored_noise
from fedrl.rl.dqn import soft_update
from fedrl.rl.losses import proximal_penalty
from fedrl.rl.networks import PolicySpec, get_weights, set_weights, spec_for
from fedrl.rl.replay import Replay
from fedrl.rl.sac import SACModel, actor_loss, alpha_loss, critic_loss, critic_target
from fedrl.rl.train import uses_norm
from fedrl.seeding import TRAIN, numpy_rng, torch_generator
from fedrl.wire import LocalPlan, LocalResult, NodeState


class _Learner:
    def __init__(self, model: SACModel, cfg: Config, state: NodeState, obs_dim: int, action_dim: int,
                 prox_mu: float = 0.0) -> None:
        s = cfg.sac
        self.s, self.model = s, model
        # FedProx: actor and critics each stay near what the node received this round
        self.mu = prox_mu
        self.actor_anchor = [p.detach().clone() for p in model.actor.parameters()] if prox_mu > 0 else None
        self.critic_anchor = [p.detach().clone() for p in model.critics()] if prox_mu > 0 else None
        self.target = copy.deepcopy(model).requires_grad_(False)
        self.actor_opt = torch.optim.Adam(model.actor.parameters(), lr=s.lr)
        self.critic_opt = torch.optim.Adam(model.critics(), lr=s.lr)
        a = state.arrays
        tuned = s.autotune and "sac.log_alpha" in a  # a fixed temperature is always sac.alpha
        self.log_alpha = torch.tensor(float(a["sac.log_alpha"][0]) if tuned else math.log(s.alpha),
                                      requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=s.lr)
        for opt, prefix in self._optimizers():
            adam_from_arrays(opt, a, prefix)
        self.replay = Replay.from_state(a, s.buffer_size, obs_dim, action_dim)
        self.target_entropy = -float(action_dim)
        self.steps = 0
        self.log: dict[str, list[float]] = {"critic_loss": [], "actor_loss": [], "alpha": []}

    def _optimizers(self) -> list[tuple[torch.optim.Adam, str]]:
        return [(self.actor_opt, "adam.actor"), (self.critic_opt, "adam.critic"), (self.alpha_opt, "adam.alpha")]

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def update(self, rng: np.random.Generator, gen: torch.Generator, view: Callable[[np.ndarray], np.ndarray]) -> None:
        """One critic, actor and temperature step on a replayed batch (``view``: observations as
        the networks see them, ``Collector.normalized``)."""
        _, t, _ = self.replay.sample(self.s.batch_size, 1.0, rng)
        obs, nxt = torch.as_tensor(view(t.obs)), torch.as_tensor(view(t.next_obs))
        act = torch.as_tensor(t.action)
        k = act.shape[-1]
        alpha = self.alpha
        with torch.no_grad():
            a2, lp2 = self.model.sample(nxt, torch.randn((len(t), k), generator=gen))
            y = critic_target(self.target.q(nxt, a2), lp2, torch.as_tensor(t.reward), torch.as_tensor(t.discount),
                              alpha)
        c_loss = critic_loss(self.model.q(obs, act), y)
        if self.critic_anchor is not None:
            c_loss = c_loss + proximal_penalty(self.model.critics(), self.critic_anchor, self.mu)
        self.critic_opt.zero_grad()
        c_loss.backward()
        self.critic_opt.step()
        a_new, lp = self.model.sample(obs, torch.randn((len(t), k), generator=gen))
        p_loss = actor_loss(self.model.q(obs, a_new), lp, alpha)
        if self.actor_anchor is not None:
            p_loss = p_loss + proximal_penalty(self.model.actor.parameters(), self.actor_anchor, self.mu)
        self.actor_opt.zero_grad()
        p_loss.backward()  # also leaves gradients on the critics: the next critic step zeroes them first
        self.actor_opt.step()
        if self.s.autotune:
            t_loss = alpha_loss(self.log_alpha, lp, self.target_entropy)
            self.alpha_opt.zero_grad()
            t_loss.backward()
            self.alpha_opt.step()
        for target_q, q in ((self.target.q1, self.model.q1), (self.target.q2, self.model.q2)):
            soft_update(target_q, q, self.s.tau)  # only the critics have targets
        self.steps += 1
        self.log["critic_loss"].append(float(c_loss.detach()))
        self.log["actor_loss"].append(float(p_loss.detach()))
        self.log["alpha"].append(self.alpha)

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {"sac.log_alpha": np.array([float(self.log_alpha.detach())])}
        for opt, prefix in self._optimizers():
            out.update(adam_to_arrays(opt, prefix))
        out.update(self.replay.to_state())
        return out


def train_sac(spec: PolicySpec, weights: list[np.ndarray], envs: gym.vector.VectorEnv, cfg: Config,
              plan: LocalPlan, state: NodeState, random_actions: bool = False) -> LocalResult:
    """Collect ``algo.local-steps`` env steps and train on replay (see the module doc).
    ``random_actions``: act uniformly at random (the random-action attacker)."""
    t0 = time.perf_counter()
    s, n_env = cfg.sac, cfg.algo.num_envs
    own = spec_for(envs.single_observation_space, envs.single_action_space, spec.hidden)  # this node's bounds
    model = SACModel(own)
    set_weights(model, weights)
    learner = _Learner(model, cfg, state, spec.obs_dim, spec.action_dim, plan.prox_mu)
    rng = numpy_rng(plan.seed, TRAIN, plan.node, plan.round)
    gen = torch_generator(plan.seed, TRAIN, plan.node, plan.round)
    envs_loop = Collector(envs, plan, state, learner.replay, 1, s.gamma, spec.obs_dim,
                          uses_norm(cfg.algo.norm_obs, spec), cfg.algo.norm_obs_center)
    taken = int(state.arrays["sac.env_steps"][0]) if "sac.env_steps" in state.arrays else 0
    low, high = np.asarray(own.action_low, np.float32), np.asarray(own.action_high, np.float32)
    since = int(state.arrays["sac.since"][0]) if "sac.since" in state.arrays else 0  # env steps toward the next phase
    n_iter = cfg.algo.local_steps // n_env
    # colored exploration noise has its own stream, so white-noise runs draw exactly as before
    eps = colored_noise(s.noise_color, n_iter, (n_env, len(low)),
                        numpy_rng(plan.seed, TRAIN, plan.node, plan.round, 1)) if s.noise_color > 0 else None
    for i in range(n_iter):
        if random_actions or (taken < s.learning_starts and eps is None):
            action = rng.uniform(low, high, (n_env, len(low))).astype(np.float32)
        elif taken < s.learning_starts and eps is not None:
            action = (low + (high - low) * (np.tanh(eps[i]) + 1) / 2).astype(np.float32)
        else:
            with torch.no_grad():
                x = torch.as_tensor(envs_loop.policy_obs())
                z = torch.randn((n_env, len(low)), generator=gen) if eps is None else torch.as_tensor(eps[i])
                action = model.sample(x, z)[0].numpy()
        envs_loop.step(action)
        taken += n_env
        since += n_env
        while since >= s.train_freq:  # every train-freq env steps, leftovers carried (train-freq need not divide them)
            since -= s.train_freq
            if taken >= s.learning_starts and len(learner.replay) >= s.batch_size:
                for _ in range(s.gradient_steps):
                    learner.update(rng, gen, envs_loop.normalized)
    env_state = envs_loop.finish()
    arrays = learner.arrays()
    arrays["sac.env_steps"] = np.array([taken], np.int64)
    arrays["sac.since"] = np.array([since], np.int64)
    arrays.update(env_state)
    metrics = {
        "train_return": envs_loop.train_return(),
        "train_episodes": float(len(envs_loop.returns)),
        "train_seconds": time.perf_counter() - t0,
        "lr": s.lr,
        "gradient_steps": float(learner.steps),
        **{k: float(np.mean(v)) if v else float("nan") for k, v in learner.log.items()},
        "optimizer_steps": float(arrays.get("adam.critic.0.step", np.zeros(1))[0]),
    }
    steps = n_iter * n_env
    return LocalResult(get_weights(model), steps, envs_loop.local, NodeState(arrays), metrics)
