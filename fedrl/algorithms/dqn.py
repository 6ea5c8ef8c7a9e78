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
from fedrl.algorithms.offpolicy import check_common, for_actions, pooled_replay, refuse_dpsgd
from fedrl.config import Config
from fedrl.errors import ConfigError
from fedrl.wire import LocalResult

if TYPE_CHECKING:
    from torch import nn

    from fedrl.rl.dpsgd import SampleDP
    from fedrl.rl.networks import PolicySpec


class DQN(Algorithm):
    def make_model(self, spec: PolicySpec) -> nn.Module:
        from fedrl.rl.dqn import QNetwork

        return QNetwork(spec)

    def model_for(self, cfg: Config) -> Callable[[PolicySpec], nn.Module]:
        from fedrl.rl.dqn import QNetwork

        dueling = cfg.dqn.dueling
        return for_actions(cfg, "discrete", lambda spec: QNetwork(spec, dueling), "ppo or sac")

    def train(self, cfg: Config, job: TrainJob) -> LocalResult:
        from fedrl.rl.dqn_train import train_dqn

        return train_dqn(job.spec, job.weights, job.envs, cfg, job.plan, job.state, job.random_actions)

    def check(self, cfg: Config) -> None:
        d = cfg.dqn
        check_common(cfg, d.batch_size, d.buffer_size, d.train_freq, "dqn")
        if d.learning_starts > d.buffer_size:
            raise ConfigError("dqn.learning-starts", f"got {d.learning_starts}; at most dqn.buffer-size "
                                                     f"({d.buffer_size}): the buffer never holds more, so training "
                                                     "would never start")
        if d.eps_end > d.eps_start:
            raise ConfigError("dqn.eps-end", f"got {d.eps_end}; at most dqn.eps-start ({d.eps_start})")

    def round_lr(self, cfg: Config, rnd: int) -> float:
        """With ``dqn.lr-end`` the rate at the middle of round ``rnd`` (the mean of its linear
        schedule), so error feedback rescales owed updates as for PPO; 1 without a schedule."""
        from fedrl.rl.dqn import lr_at

        d = cfg.dqn
        return 1.0 if d.lr_end < 0 else lr_at((rnd - 0.5) / max(1, cfg.num_server_rounds), d.lr, d.lr_end)

    def sample_dp(self, cfg: Config, model: nn.Module) -> SampleDP | None:
        return refuse_dpsgd(cfg)

    def pooled(self, cfg: Config, nodes: int) -> Config:
        import dataclasses

        return dataclasses.replace(super().pooled(cfg, nodes), dqn=pooled_replay(cfg.dqn, nodes))
