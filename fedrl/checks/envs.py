"""Every node's environment built, reset and stepped once, and the policy sized, before round 1.

``gym.make`` accepts arguments that fail only later: ``render_mode='human'`` without pygame
fails at ``reset``, ``max_episode_steps=0`` at ``gym.make`` with a ``ValueError``, a physics
parameter may give non-finite observations. A run that found out in round 1 would lose every
node's work, so ``fedrl check`` (and the ServerApp, through ``fedrl.checks.validate``) does what a
rollout does, once per distinct variant, and names the key to change.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from fedrl.config import Config
from fedrl.envs.make import make_env
from fedrl.errors import ConfigError
from fedrl.registry.algorithms import get as algorithm
from fedrl.rl.networks import PolicySpec, check_policy_size, spec_for
from fedrl.seeding import ENV_RESET, derive

# The server keeps several copies of the policy (the model, its broadcast, optimizer moments) and
# sends it whole in every plan; 2^26 float32 parameters are 256 MiB, far beyond any RL policy here.


def culprit(cfg: Config) -> str:
    """The key to blame for an environment that fails: ``env.kwargs`` if any are given (they reach
    ``gym.make`` untouched), else ``env.vary`` if any parameter varies, else ``env.id``."""
    return "env.kwargs" if cfg.env.kwargs.strip() else ("env.vary" if cfg.env.vary.strip() else "env.id")


def check_environments(cfg: Config, variants: list[dict[str, float]], kwargs: dict[str, Any]) -> PolicySpec:
    """Build, reset and step each distinct variant once; return the policy spec they share.

    ``variants`` are the nodes' (``nodes.count``), then any held-out ones (``eval.held-out``).

    Raises:
        ConfigError: naming ``culprit(cfg)`` when building, resetting or stepping fails or gives a
            non-finite observation; ``env.id`` for observations that are not a flat Box or actions
            that are neither Discrete nor Box; ``env.vary`` when variants differ in space shapes;
            ``algo.hidden`` when the policy would exceed ``MAX_POLICY_PARAMS``.
    """
    shapes: dict[tuple[str, ...], int] = {}
    spaces: tuple[Any, Any] | None = None
    seen: set[tuple[tuple[str, float], ...]] = set()
    for node, variant in enumerate(variants):
        if (key := tuple(sorted(variant.items()))) in seen:
            continue
        seen.add(key)
        obs_space, act_space = _try(cfg, node, variant, kwargs)
        shape = (str(obs_space.shape), type(act_space).__name__, str(act_space.shape))
        shapes.setdefault(shape, node)
        spaces = spaces or (obs_space, act_space)
    if len(shapes) > 1:
        raise ConfigError("env.vary", f"variants of {cfg.env.id} differ in space shapes {sorted(shapes)} (first seen "
                                      f"at nodes {sorted(shapes.values())}); one policy cannot serve them")
    assert spaces is not None  # nodes.count >= 1
    try:
        spec = spec_for(spaces[0], spaces[1], cfg.algo.hidden_sizes)
    except ValueError as err:
        raise ConfigError("env.id", f"{cfg.env.id}: {err}; fedrl's policy needs flat Box observations and "
                                    "Discrete or Box actions") from None
    check_policy_size(spec, algorithm(cfg.algo.name).model_for(cfg))
    return spec


def _try(cfg: Config, node: int, variant: dict[str, float], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """(observation space, action space) of node ``node``'s env after one reset and one step."""
    who = f"node {node}'s" if node < cfg.nodes.count else f"held-out variant {node - cfg.nodes.count}'s"
    where = f"{who} {cfg.env.id}" + (f" {variant}" if variant else "") + (f" with {kwargs}" if kwargs else "")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gym's checker warns on stderr; the verdict is the exception
        try:
            env = make_env(cfg.env.id, variant, dict(kwargs))
        except ConfigError:
            raise
        except Exception as err:  # noqa: BLE001 - any env constructor failure is a config the run cannot use
            raise ConfigError(culprit(cfg), f"gym.make failed for {where}: {_one_line(err)}") from None
        try:
            obs, _ = env.reset(seed=derive(cfg.seed, ENV_RESET, node, 0))
            _finite(cfg, where, "reset", obs)
            env.action_space.seed(derive(cfg.seed, ENV_RESET, node, 1))
            obs, *_ = env.step(env.action_space.sample())
            _finite(cfg, where, "step", obs)
            return env.observation_space, env.action_space
        except ConfigError:
            raise
        except Exception as err:  # noqa: BLE001 - whatever reset or step raises would end round 1
            raise ConfigError(culprit(cfg), f"{where} fails at reset or step: {_one_line(err)}") from None
        finally:
            env.close()


def _finite(cfg: Config, where: str, stage: str, obs: Any) -> None:
    try:
        arr = np.asarray(obs, dtype=np.float64)
    except (TypeError, ValueError):
        return  # not numeric (Dict, Text spaces): spec_for refuses such spaces with a reason
    if not np.all(np.isfinite(arr)):
        raise ConfigError(culprit(cfg), f"{where} gives non-finite observations at {stage}: {arr.tolist()}")


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"
