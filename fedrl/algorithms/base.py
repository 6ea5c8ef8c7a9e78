"""The algorithm interface: what fedrl asks of a local RL learner (one per ``algo.name``).

A node trains the federated model locally for a budget of env steps; the server evaluates and
exports it. Neither side knows which learner it runs: both go through this interface, as
TorchRL's trainers go through ``LossModule``. An algorithm is stateless between calls:
everything that must survive a round (optimizer moments, normalizer statistics, unfinished
episodes, a DP accountant's history) comes in and goes out as the node's ``NodeState`` arrays.

Contract of the model an algorithm makes: an ``nn.Module`` whose ``state_dict`` order is the
wire order of the weights (every tensor in it is federated), with ``greedy(obs) -> actions``
(batched observations to batched env actions: indices for discrete, values for continuous).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from fedrl.errors import ConfigError
from fedrl.wire import LocalPlan, LocalResult, NodeState

if TYPE_CHECKING:
    from torch import nn

    from fedrl.config import Config
    from fedrl.rl.dpsgd import SampleDP
    from fedrl.rl.networks import PolicySpec


@dataclass(frozen=True)
class TrainJob:
    """One node's local training for one round.

    ``envs`` hold ``algo.num-envs`` copies of the node's variant (the caller closes them);
    ``weights`` are what the node trains from (the model's ``state_dict`` order); ``state`` is
    the node's state after its previous round (empty in its first); ``sample_dp`` asks for
    sample-level DP (``privacy.dpsgd``); ``random_actions`` makes the node collect with random
    actions (the random-action Byzantine node of ``attack.*``)."""

    spec: PolicySpec
    weights: list[np.ndarray]
    envs: gym.vector.VectorEnv
    plan: LocalPlan
    state: NodeState
    sample_dp: SampleDP | None = None
    random_actions: bool = False


@dataclass(frozen=True)
class CohortMember:
    """One node of a cohort (several logical nodes trained in one call, ``Algorithm.train_cohort``):
    a ``TrainJob`` without envs, and the node's variant (the algorithm builds the envs)."""

    weights: list[np.ndarray]
    plan: LocalPlan
    state: NodeState
    variant: dict[str, float]
    sample_dp: SampleDP | None = None
    random_actions: bool = False


class Algorithm(ABC):
    """A local learner. Subclass, implement ``make_model`` and ``train``, and ``register`` it
    (``fedrl.registry.algorithms``); override the rest where the defaults do not fit."""

    @abstractmethod
    def make_model(self, spec: PolicySpec) -> nn.Module:
        """A fresh model for the spaces ``spec`` describes (see the module doc for its contract).
        Called under a seeded torch RNG for the federation's initial weights."""

    @abstractmethod
    def train(self, cfg: Config, job: TrainJob) -> LocalResult:
        """Train from ``job.weights`` for ``algo.local-steps`` env steps (``LocalResult.env_steps``
        reports the steps taken, at most that). Randomness derives from ``(plan.seed, plan.node,
        plan.round)``; the result's ``state`` is the node's whole state for its next round."""

    def train_cohort(self, cfg: Config, spec: PolicySpec, members: list[CohortMember],
                     env_kwargs: dict[str, object]) -> list[LocalResult]:
        """Train every member as ``train`` would train it alone and return its result, in order.
        An algorithm with a vectorized form overrides this (PPO: ``fedrl.rl.cohort_train``); the
        default trains one member at a time on ``algo.num-envs`` copies of its variant."""
        from fedrl.envs.batched import make_batched_env

        out = []
        for m in members:
            envs = make_batched_env(cfg.env.id, [m.variant] * cfg.algo.num_envs, env_kwargs)
            try:
                out.append(self.train(cfg, TrainJob(spec, m.weights, envs, m.plan, m.state, m.sample_dp,
                                                    m.random_actions)))
            finally:
                envs.close()
        return out

    def model_for(self, cfg: Config) -> Callable[[PolicySpec], nn.Module]:
        """The model factory of a run with settings ``cfg``: ``make_model``, unless the network
        depends on the algorithm's settings (DQN's dueling head)."""
        return self.make_model

    def check(self, cfg: Config) -> None:
        """Refuse, with a ``ConfigError`` naming the key, settings this algorithm cannot run
        (called before round 1 by ``fedrl.checks.validate``). The default accepts everything."""

    def round_lr(self, cfg: Config, rnd: int) -> float:
        """The mean step size of round ``rnd``'s local optimizer (error feedback rescales owed
        updates by it: ``fedrl.wire.uplink_scale``). 1 for a learner without a schedule."""
        return 1.0

    def sample_dp(self, cfg: Config, model: nn.Module) -> SampleDP | None:
        """Sample-level DP settings for ``privacy.dpsgd`` (a learner that has a DP-SGD update
        overrides this and checks its own settings); the default refuses it."""
        if not cfg.privacy.dpsgd:
            return None
        raise ConfigError("privacy.dpsgd", f"algo.name = {cfg.algo.name} has no sample-level DP update")

    def pooled(self, cfg: Config, nodes: int) -> Config:
        """The settings of one centralized learner over ``nodes`` nodes' envs (``fedrl central``)
        taking all their steps each round. The default scales ``algo.num-envs`` and
        ``algo.local-steps``."""
        import dataclasses

        a = cfg.algo
        return dataclasses.replace(cfg, algo=dataclasses.replace(a, num_envs=a.num_envs * nodes,
                                                                 local_steps=a.local_steps * nodes))
