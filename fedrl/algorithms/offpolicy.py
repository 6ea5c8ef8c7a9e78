"""What the off-policy learners (DQN, SAC) share at the seam: checks of their settings, the
refusal of DP-SGD, and their pooled (``fedrl central``) settings."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fedrl.config import Config, DQNConfig, SACConfig
from fedrl.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

    from fedrl.rl.dpsgd import SampleDP
    from fedrl.rl.networks import PolicySpec


def check_common(cfg: Config, batch_size: int, buffer_size: int, train_freq: int, section: str) -> None:
    """Refuse what neither learner can run, naming the key."""
    a = cfg.algo
    if a.local_steps % a.num_envs != 0:
        raise ConfigError("algo.local-steps", f"got {a.local_steps}; must be a multiple of algo.num-envs "
                                              f"({a.num_envs}): {section} steps all of a node's envs together")
    if a.norm_obs == "server":
        raise ConfigError("algo.norm-obs", f"server statistics come from rollouts of PPO's sampling policy; {section} "
                                           "replays raw transitions and normalizes nothing by default; set it to auto "
                                           "or off")
    if a.norm_reward == "on":
        raise ConfigError("algo.norm-reward", f"{section} learns from unscaled rewards (its targets bootstrap "
                                              "from replayed transitions); set it to auto or off")
    if batch_size > buffer_size:
        raise ConfigError(f"{section}.batch-size", f"got {batch_size}; at most {section}.buffer-size ({buffer_size})")
    if train_freq < a.num_envs:
        raise ConfigError(f"{section}.train-freq", f"got {train_freq}; at least algo.num-envs ({a.num_envs}), the "
                                                   "env steps of one vector step")


def for_actions(cfg: Config, kind: str, build: Callable[[PolicySpec], nn.Module],
                other: str) -> Callable[[PolicySpec], nn.Module]:
    """``build``, refusing (naming ``algo.name``) an env whose actions are not of ``kind``;
    ``other`` says which learners take the other kind."""
    def make(spec: PolicySpec) -> nn.Module:
        if spec.action_kind != kind:
            raise ConfigError("algo.name", f"{cfg.algo.name} needs {kind} actions; {cfg.env.id} has "
                                           f"{spec.action_kind} ones (use {other})")
        bounds = (*spec.action_low, *spec.action_high)
        if not all(math.isfinite(b) for b in bounds):
            raise ConfigError("env.id", f"{cfg.algo.name} squashes its actions into the env's bounds; {cfg.env.id} "
                                        f"has unbounded actions {spec.action_low}..{spec.action_high}")
        return build(spec)

    return make


def refuse_dpsgd(cfg: Config) -> SampleDP | None:
    """DP-SGD with replay is refused: its accountant assumes each step samples the node's data
    afresh with probability q, but a replayed transition is drawn again and again across steps
    and rounds (and prioritized replay draws by TD error, which depends on the data), so neither
    the sampling rate nor the privacy unit of a transition is what Opacus would account for."""
    if cfg.privacy.dpsgd:
        raise ConfigError("privacy.dpsgd", f"algo.name = {cfg.algo.name} replays transitions across gradient steps "
                                           "and rounds, which DP-SGD's accounting does not cover; use "
                                           "privacy.mode = central, local or distributed (node-level DP) instead; docs/privacy.md "
                                           "says what an off-policy DP-SGD would need")
    return None


S = TypeVar("S", DQNConfig, SACConfig)


def pooled_replay(section: S, nodes: int) -> S:
    """One learner over ``nodes`` nodes: their replay capacity, warm-up and gradient steps together
    (the same gradient steps per env step as each node's)."""
    return dataclasses.replace(section, buffer_size=section.buffer_size * nodes,
                               train_freq=section.train_freq * nodes, gradient_steps=section.gradient_steps * nodes,
                               learning_starts=section.learning_starts * nodes)
