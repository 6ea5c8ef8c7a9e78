"""PPO (Schulman et al. 2017, CleanRL's ``ppo.py`` details) as a fedrl algorithm.

The maths is in ``fedrl.rl`` (``rollout``, ``advantages``, ``losses``, ``ppo``, ``train``); this
class is the seam: it makes the actor-critic, checks ``ppo.*`` against the common settings,
trains through ``fedrl.rl.train.train_locally`` and offers DP-SGD (``privacy.dpsgd``) through
the same update loop with Opacus' per-sample gradients.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from fedrl.algorithms.base import Algorithm, CohortMember, TrainJob
from fedrl.config import Config, norm_on
from fedrl.errors import ConfigError
from fedrl.wire import LocalResult

if TYPE_CHECKING:
    from torch import nn

    from fedrl.rl.dpsgd import SampleDP
    from fedrl.rl.networks import PolicySpec


class PPO(Algorithm):
    def make_model(self, spec: PolicySpec) -> nn.Module:
        from fedrl.rl.networks import ActorCritic

        return ActorCritic(spec)

    def train(self, cfg: Config, job: TrainJob) -> LocalResult:
        from fedrl.rl.train import train_locally

        return train_locally(job.spec, job.weights, job.envs, cfg, job.plan, job.state, job.sample_dp,
                             job.random_actions)

    def train_cohort(self, cfg: Config, spec: PolicySpec, members: list[CohortMember],
                     env_kwargs: dict[str, object]) -> list[LocalResult]:
        """The members that train plainly go through one vectorized pass (``fedrl.rl.cohort_train``)
        where the env has batched physics; DP-SGD and random-action members train alone."""
        from fedrl.envs.batched import batched_supported
        from fedrl.rl.cohort_train import train_cohort

        plain = [i for i, m in enumerate(members) if m.sample_dp is None and not m.random_actions]
        if len(plain) < 2 or not batched_supported(cfg.env.id, env_kwargs):
            return super().train_cohort(cfg, spec, members, env_kwargs)
        together = train_cohort(spec, cfg, [members[i].weights for i in plain], [members[i].plan for i in plain],
                                [members[i].state for i in plain], [members[i].variant for i in plain], env_kwargs)
        together_set = set(plain)
        alone = iter(super().train_cohort(cfg, spec, [m for i, m in enumerate(members) if i not in together_set],
                                          env_kwargs))
        by_index = dict(zip(plain, together, strict=True))
        return [by_index[i] if i in by_index else next(alone) for i in range(len(members))]

    def check(self, cfg: Config) -> None:
        a, p = cfg.algo, cfg.ppo
        batch = a.num_envs * p.num_steps
        if a.local_steps % batch != 0:
            raise ConfigError(
                "algo.local-steps",
                f"got {a.local_steps}; must be a positive multiple of algo.num-envs x ppo.num-steps "
                f"= {batch} (one PPO rollout)",
            )
        if p.num_minibatches > batch:
            raise ConfigError("ppo.num-minibatches", f"got {p.num_minibatches}; at most one per sample ({batch})")

    def round_lr(self, cfg: Config, rnd: int) -> float:
        from fedrl.rl.train import round_lr

        return round_lr(cfg, rnd)

    def sample_dp(self, cfg: Config, model: nn.Module) -> SampleDP | None:
        """DP-SGD over rollout segments (``fedrl.rl.dpsgd``), checked before round 1: refuses
        settings that would leak raw data past the clipped gradients, or a policy Opacus cannot
        give per-sample gradients of."""
        p, a, ppo = cfg.privacy, cfg.algo, cfg.ppo
        if not p.dpsgd:
            return None
        from fedrl.rl.dpsgd import SampleDP, module_errors  # Opacus' GradSampleModule only when asked for

        kind = model.spec.action_kind  # type: ignore[union-attr]
        if ppo.target_kl > 0:
            raise ConfigError("ppo.target-kl", "with privacy.dpsgd the KL early stop would make the number of DP-SGD "
                                               "steps depend on the data; set ppo.target-kl = 0")
        for key, setting in (("algo.norm-obs", a.norm_obs), ("algo.norm-reward", a.norm_reward)):
            if norm_on(setting, kind == "continuous"):
                raise ConfigError(key, f"with privacy.dpsgd: its running statistics feed raw data into training "
                                       f"outside the clipped gradients (auto is on for continuous actions); set "
                                       f"{key} = off")
        if a.num_envs < ppo.num_minibatches:
            raise ConfigError("algo.num-envs", f"with privacy.dpsgd a minibatch is a Poisson sample of segments (one "
                                               f"per env copy) at rate 1/ppo.num-minibatches; {a.num_envs} envs and "
                                               f"{ppo.num_minibatches} minibatches expect less than one segment per "
                                               "step")
        errors = module_errors(model)  # type: ignore[arg-type]
        if errors:
            raise ConfigError("privacy.dpsgd", f"Opacus cannot compute per-sample gradients of this policy "
                                               f"({kind} actions): {'; '.join(errors)}")
        return SampleDP(p.dpsgd_noise_multiplier, p.dpsgd_clip_norm, p.delta)

    def pooled(self, cfg: Config, nodes: int) -> Config:
        """Also ``nodes`` times the minibatches per epoch, so the pooled learner's minibatches have
        the nodes' size (``fedrl.server.centralized``)."""
        out = super().pooled(cfg, nodes)
        return dataclasses.replace(out, ppo=dataclasses.replace(cfg.ppo, num_minibatches=cfg.ppo.num_minibatches * nodes))
