"""SAC (``algo.name = sac``) as a fedrl algorithm: twin critics with target copies, a squashed
Gaussian actor within each node's own action bounds, automatic entropy tuning
(``fedrl.rl.sac``, ``fedrl.rl.sac_train``).

What is federated: the actor and both critics (the model's whole ``state_dict``). The target
critics are re-derived on each node from the critics it receives; the temperature, the
optimizers' moments and the replay buffer stay in the node's ``NodeState``. A cohort trains its
members one at a time (no vectorized form yet).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fedrl.algorithms.base import Algorithm, TrainJob
from fedrl.algorithms.offpolicy import check_common, for_actions, pooled_replay, refuse_dpsgd
from fedrl.config import Config
from fedrl.wire import LocalResult

if TYPE_CHECKING:
    from torch import nn

    from fedrl.rl.dpsgd import SampleDP
    from fedrl.rl.networks import PolicySpec


class SAC(Algorithm):
    def make_model(self, spec: PolicySpec) -> nn.Module:
        from fedrl.rl.sac import SACModel

        return SACModel(spec)

    def model_for(self, cfg: Config) -> Callable[[PolicySpec], nn.Module]:
        from fedrl.rl.sac import SACModel

        return for_actions(cfg, "continuous", SACModel, "dqn or ppo")

    def train(self, cfg: Config, job: TrainJob) -> LocalResult:
        from fedrl.rl.sac_train import train_sac

        return train_sac(job.spec, job.weights, job.envs, cfg, job.plan, job.state, job.random_actions)

    def check(self, cfg: Config) -> None:
        s = cfg.sac
        check_common(cfg, s.batch_size, s.buffer_size, s.train_freq, "sac")

    def sample_dp(self, cfg: Config, model: nn.Module) -> SampleDP | None:
        return refuse_dpsgd(cfg)

    def pooled(self, cfg: Config, nodes: int) -> Config:
        import dataclasses

        return dataclasses.replace(super().pooled(cfg, nodes), sac=pooled_replay(cfg.sac, nodes))
