"""What every node of a run derives from the run config, once (the ClientApp caches it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fedrl.algorithms.base import Algorithm
from fedrl.compression.pipeline import Stage, stage
from fedrl.config import Config
from fedrl.envs.spec import parse_kwargs
from fedrl.experiment import policy_spec, variants_of
from fedrl.inject.attacks import attack_plan
from fedrl.privacy.plan import PrivacyPlan, plan_for, sample_plan
from fedrl.registry.algorithms import get as algorithm_named
from fedrl.rl.networks import PolicySpec, get_weights, weight_layout

if TYPE_CHECKING:
    from fedrl.rl.dpsgd import SampleDP


@dataclass(frozen=True)
class NodeSetup:
    """The run's settings every node shares, resolved from its config."""

    cfg: Config
    algorithm: Algorithm  # the local learner (algo.name)
    variants: list[dict[str, float]]  # node i's environment parameters (env.vary)
    spec: PolicySpec
    template: list[np.ndarray]  # the model's parameters: their shapes, in get_weights order
    up: Stage  # uplink compression (compression.up, error feedback)
    down: Stage  # downlink compression (compression.down)
    env_kwargs: dict[str, object]  # env.kwargs, for gym.make
    privacy: PrivacyPlan | None  # update-level DP (privacy.mode), None: off
    sample_dp: SampleDP | None  # DP-SGD in local training (privacy.dpsgd), None: off
    attacks: dict[int, str]  # hostile node -> its kind (attack.*)


def node_setup(cfg: Config) -> NodeSetup:
    """Resolve ``cfg`` for the node side.

    Raises:
        ConfigError: settings that cannot be combined (privacy, attacks).
    """
    algorithm = algorithm_named(cfg.algo.name)
    variants = variants_of(cfg)
    spec = policy_spec(cfg, variants[0])
    model = algorithm.model_for(cfg)(spec)
    template = get_weights(model)
    up = stage(cfg.compression, "up", [w.shape for w in template], compensated=cfg.topology.name == "gossip")
    return NodeSetup(cfg, algorithm, variants, spec, template, up, stage(cfg.compression, "down"),
                     dict(parse_kwargs(cfg.env.kwargs)),
                     plan_for(cfg, spec.action_kind == "continuous", sum(w.size for w in template), crowd=False,
                              layout=weight_layout(model)),
                     sample_plan(cfg, model), attack_plan(cfg))
