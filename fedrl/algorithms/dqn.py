"""DQN (``algo.name = dqn``) as a fedrl algorithm: Double DQN with n-step returns, prioritized
replay, an optional dueling head, ε-greedy exploration over the run (``fedrl.rl.dqn``,
``fedrl.rl.dqn_train``).

What is federated: the online Q network, the whole of it. Each node re-derives its target
network from the network it receives; its replay buffer, Adam's moments and unfinished episodes
stay in its ``NodeState`` (never on the wire). Jin et al. (AISTATS 2022) average Q networks the
same way (QAvg). A cohort trains its members one at a time (no vectorized form yet).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fedrl.algorithms.base import Algorithm, TrainJob
from fedrl.config import Config
from fedrl.errors import ConfigError
from fedrl.wire import LocalResult

if TYPE_CHECKING:
    from torch import nn

    from fedrl.rl.networks import PolicySpec


class DQN(Algorithm):
    def make_model(self, spec: PolicySpec) -> nn.Module:
        from fedrl.rl.dqn import QNetwork

        return QNetwork(spec)

    def model_for(self, cfg: Config) -> Callable[[PolicySpec], nn.Module]:
        from fedrl.rl.dqn import QNetwork

        dueling = cfg.dqn.dueling

        def make(spec: PolicySpec) -> nn.Module:
            if spec.action_kind != "discrete":
                raise ConfigError("algo.name", f"dqn needs discrete actions; {cfg.env.id} has continuous ones "
                                               "(use ppo)")
            return QNetwork(spec, dueling)

        return make

    def train(self, cfg: Config, job: TrainJob) -> LocalResult:
        from fedrl.rl.dqn_train import train_dqn

        return train_dqn(job.spec, job.weights, job.envs, cfg, job.plan, job.state, job.random_actions)

    def check(self, cfg: Config) -> None:
        a, d = cfg.algo, cfg.dqn
        if a.local_steps % a.num_envs != 0:
            raise ConfigError("algo.local-steps", f"got {a.local_steps}; must be a multiple of algo.num-envs "
                                                  f"({a.num_envs}): DQN steps all of a node's envs together")
        if a.norm_reward == "on":
            raise ConfigError("algo.norm-reward", "DQN learns from unscaled rewards (Huber loss, n-step targets); "
                                                  "set it to auto or off")
        if d.batch_size > d.buffer_size:
            raise ConfigError("dqn.batch-size", f"got {d.batch_size}; at most dqn.buffer-size ({d.buffer_size})")
        if d.eps_end > d.eps_start:
            raise ConfigError("dqn.eps-end", f"got {d.eps_end}; at most dqn.eps-start ({d.eps_start})")
        if d.train_freq < a.num_envs:
            raise ConfigError("dqn.train-freq", f"got {d.train_freq}; at least algo.num-envs ({a.num_envs}), "
                                                "the env steps of one vector step")

    def pooled(self, cfg: Config, nodes: int) -> Config:
        """One learner over ``nodes`` nodes' envs: their envs and steps, their replay capacity, and
        their gradient steps together (the same gradient steps per env step as each node's)."""
        import dataclasses

        base = super().pooled(cfg, nodes)
        d = cfg.dqn
        return dataclasses.replace(base, dqn=dataclasses.replace(
            d, buffer_size=d.buffer_size * nodes, train_freq=d.train_freq * nodes,
            gradient_steps=d.gradient_steps * nodes, learning_starts=d.learning_starts * nodes))
