"""Checks that need more than one key or a real environment; all run before round 1.

``check(run_config)`` is what ``fedrl check``, ``fedrl run`` and the ServerApp call: it
parses (unknown keys, types, ranges) and then validates the combination, raising a
``ConfigError`` that names the key and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedrl.config import Config, from_run_config
from fedrl.envs.families import check_env_id, check_params, check_values
from fedrl.envs.make import make_env
from fedrl.envs.spec import parse_kwargs, parse_vary, sample_variant
from fedrl.errors import ConfigError


def validate(cfg: Config) -> None:
    a = cfg.algo
    if a.local_steps % a.batch_steps != 0:
        raise ConfigError(
            "algo.local-steps",
            f"got {a.local_steps}; must be a positive multiple of algo.num-envs x algo.num-steps "
            f"= {a.batch_steps} (one PPO rollout)",
        )
    if a.num_minibatches > a.batch_steps:
        raise ConfigError("algo.num-minibatches", f"got {a.num_minibatches}; at most one per sample ({a.batch_steps})")
    if cfg.resume == "true" and not cfg.run_name:
        raise ConfigError("resume", "resume=true needs run-name (or give the run folder path as resume)")
    check_env_id(cfg.env.id)
    specs = parse_vary(cfg.env.vary)
    check_params(cfg.env.id, specs.keys())
    kwargs = parse_kwargs(cfg.env.kwargs)
    variants = [sample_variant(specs, i, cfg.nodes.count, cfg.seed) for i in range(cfg.nodes.count)]
    for v in variants:
        check_values(cfg.env.id, v)
    # Build every variant once: catches bad kwargs and values the environment refuses.
    # Spaces may differ in bounds across nodes (Pendulum's max_torque) but not in shape:
    # one policy network serves every variant.
    shapes = set()
    for v in variants:
        env = make_env(cfg.env.id, v, dict(kwargs))
        shapes.add((env.observation_space.shape, type(env.action_space).__name__, env.action_space.shape))
        env.close()
    if len(shapes) > 1:
        raise ConfigError("env.vary", f"variants of {cfg.env.id} differ in space shapes {sorted(map(str, shapes))}; "
                                      "one policy cannot serve them")


def check(run_config: Mapping[str, Any]) -> Config:
    cfg = from_run_config(run_config)
    validate(cfg)
    return cfg
