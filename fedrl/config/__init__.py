"""fedrl's one typed run configuration, parsed once at the edge.

Every run-config key (Flower's ``--run-config``, kebab-case, dotted for groups) is a field of
one of the frozen section dataclasses (``fedrl.config.sections``, ``fedrl.config.features``);
its metadata holds the key, a one-line help and a validity check. ``from_run_config`` rejects unknown keys (naming the nearest known one),
wrong types and out-of-range values with a ``ConfigError`` that names the key. ``DEFAULTS``
is derived from the dataclass defaults; ``pyproject.toml`` must declare exactly these (a test
checks it), because Flower's SuperLink refuses undeclared keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_type_hints

from fedrl.config import checks as ck
from fedrl.config.checks import Check
from fedrl.config.features import (
    SERVER_LR_END,
    CompressionConfig,
    PrivacyConfig,
    SecAggConfig,
    StrategyConfig,
    TopologyConfig,
)
from fedrl.config.offpolicy import DQNConfig, SACConfig
from fedrl.config.sections import (
    AlgoConfig,
    AttackConfig,
    EnvConfig,
    EvalConfig,
    LogConfig,
    NodesConfig,
    PPOConfig,
    RoundConfig,
    SelectionConfig,
    node_statistics_travel,
    norm_on,
    opt,
)
from fedrl.errors import ConfigError

__all__ = ["SERVER_LR_END", "AlgoConfig", "AttackConfig", "CompressionConfig", "Config", "DQNConfig",
           "EnvConfig", "EvalConfig", "LogConfig", "NodesConfig", "PPOConfig", "PrivacyConfig", "RoundConfig", "SACConfig", "SecAggConfig",
           "SelectionConfig", "StrategyConfig", "TopologyConfig", "from_run_config", "node_statistics_travel",
           "norm_on", "to_flat"]


@dataclass(frozen=True)
class Config:
    num_server_rounds: int = opt("num-server-rounds", 30, "federated rounds", ck.positive)
    seed: int = opt("seed", 0, "seed of variants, sampling, training and evaluation", ck.non_negative)
    output_dir: str = opt("output-dir", "runs", "where run folders go")
    run_name: str = opt("run-name", "", "run folder name (empty: generated)", ck.folder_name)
    resume: str = opt("resume", "", "resume a killed run: 'true' (the run-name folder) or a run folder path")
    fraction_train: float = opt("fraction-train", 1.0, "fraction of nodes trained each round", ck.unit_open_closed)
    min_train_nodes: int = opt("min-train-nodes", 2, "at least this many nodes per round", ck.positive)
    env: EnvConfig = field(default_factory=EnvConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    dqn: DQNConfig = field(default_factory=DQNConfig)
    sac: SACConfig = field(default_factory=SACConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    nodes: NodesConfig = field(default_factory=NodesConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    secagg: SecAggConfig = field(default_factory=SecAggConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    round: RoundConfig = field(default_factory=RoundConfig)
    log: LogConfig = field(default_factory=LogConfig)

    @property
    def nodes_per_round(self) -> int:
        """Nodes selected each round: ``fraction-train`` of them, at least ``min-train-nodes``, at most all."""
        n = self.nodes.count
        return min(n, max(self.min_train_nodes, math.ceil(self.fraction_train * n)))


_SECTIONS = ("env", "algo", "ppo", "dqn", "sac", "strategy", "eval", "nodes", "compression", "secagg", "privacy", "attack", "topology",
             "selection", "round", "log")


def _leaf_fields(cls: type) -> list[tuple[dataclasses.Field[Any], Any]]:
    hints = get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if "key" in f.metadata]


def _all_leaves() -> list[tuple[str | None, dataclasses.Field[Any], Any]]:
    out: list[tuple[str | None, dataclasses.Field[Any], Any]] = [(None, f, t) for f, t in _leaf_fields(Config)]
    hints = get_type_hints(Config)
    for sec in _SECTIONS:
        out += [(sec, f, t) for f, t in _leaf_fields(hints[sec])]
    return out


DEFAULTS: dict[str, Any] = {f.metadata["key"]: f.default for _, f, _ in _all_leaves()}
HELP: dict[str, str] = {f.metadata["key"]: f.metadata["help"] for _, f, _ in _all_leaves()}


def _coerce(key: str, value: Any, typ: Any) -> Any:
    """Accept the types Flower's config parser produces; refuse anything else by name."""
    choices = get_args(typ) if getattr(typ, "__origin__", None) is Literal else None
    if choices:
        if value not in choices:
            raise ConfigError(key, f"got {value!r}; allowed: {', '.join(map(str, choices))}")
        return value
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(key, f"got {value!r}; allowed: true or false")
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(key, f"got {value!r}; allowed: an integer")
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"got {value!r}; allowed: a number")
        if not math.isfinite(value):
            raise ConfigError(key, f"got {value!r}; allowed: a finite number")
        return float(value)
    if typ is str:
        if isinstance(value, bool):  # e.g. resume=true
            return "true" if value else ""
        return str(value)
    raise TypeError(f"unsupported config type {typ} for {key}")


# Keys that moved: an old name is refused with its new one (issue 14: PPO's knobs left algo.*).
RENAMED = {"nodes.reply-timeout-s": "round.timeout-s",
           **{f"algo.{k}": f"ppo.{k}" for k in ("num-steps", "lr", "anneal-lr", "gamma", "gae-lambda",
                                                "num-minibatches", "update-epochs", "norm-adv", "clip-coef",
                                                "clip-vloss", "ent-coef", "vf-coef", "max-grad-norm", "target-kl")}}
# Where a run lives and what else it logs: these may change on resume (the experiment may not)
LOCATION_KEYS = frozenset({"resume", "output-dir", "run-name", "log.tensorboard"})


def unknown_key_error(key: str) -> ConfigError:
    if key in RENAMED:
        return ConfigError(key, f"renamed to '{RENAMED[key]}'")
    close = difflib.get_close_matches(key, list(DEFAULTS), n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else "; run `fedrl check --list` for all keys"
    return ConfigError(key, f"unknown run-config key{hint}")


def from_run_config(run_config: Mapping[str, Any]) -> Config:
    """Parse Flower's flat run config (missing keys take defaults) into a ``Config``.

    Checks each value on its own here; cross-key and environment checks (env ids, variant
    parameters, impossible combinations) are in ``fedrl.checks.validate.check``.
    """
    for key, raw in run_config.items():
        if key not in DEFAULTS:
            raise unknown_key_error(key)
        if (why := ck.travels(raw)) is not None:  # the raw value travels too (Flower's copy of the run config)
            raise ConfigError(key, f"got {raw!r}; {why}")
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
    for sec, f, typ in _all_leaves():
        key = f.metadata["key"]
        raw = run_config.get(key, f.default)
        if f.metadata["auto"] and isinstance(raw, str) and raw.strip().lower() == "auto":
            (top if sec is None else sections[sec])[f.name] = AUTO
            continue
        value = _coerce(key, raw, typ)
        check: Check | None = f.metadata["check"]
        if (why := ck.travels(value) or (check(value) if check is not None else None)) is not None:
            raise ConfigError(key, f"got {value!r}; {why}")
        (top if sec is None else sections[sec])[f.name] = value
    hints = get_type_hints(Config)
    for sec in _SECTIONS:
        top[sec] = hints[sec](**sections[sec])
    cfg = Config(**top)
    for resolve in (_resolve_norm_obs, _resolve_norm_reward, _resolve_server_step, _resolve_local_steps):
        cfg = resolve(cfg)  # each replaces the "auto" of its own keys
    return cfg


AUTO = "auto"  # a numeric field's value until _resolve_* replaces it (opt(..., auto=True))


def _resolve_server_step(cfg: Config) -> Config:
    """``strategy.server-lr = auto`` and ``strategy.server-lr-end = auto``: PPO's 2 annealed to 0.5
    (issue 13: the annealed overshoot kept heterogeneous CartPole solved, docs/stability.md); the
    plain average, constant, for the replay learners (docs/algorithms.md, "Server step": SAC on
    heterogeneous Pendulum, 4 nodes, 20k env steps per node, with the overshoot ended at a mean of
    -357 and a worst variant of -448 in issue 43's report; plainly averaged, -199/-212/-169 on 3 seeds
    of the off-policy benchmark). An explicit number is kept as given."""
    s = cfg.strategy
    replay = cfg.algo.name in REPLAY_LEARNERS
    lr = (1.0 if replay else 2.0) if s.server_lr == AUTO else s.server_lr
    end = (-1.0 if replay else SERVER_LR_END) if s.server_lr_end == AUTO else s.server_lr_end
    return dataclasses.replace(cfg, strategy=dataclasses.replace(s, server_lr=lr, server_lr_end=end))


# algo.local-steps = auto: env steps per node per round (docs/algorithms.md, "Round length")
LOCAL_STEPS = 1024
SAC_LOCAL_STEPS = 256


def _resolve_local_steps(cfg: Config) -> Config:
    """``algo.local-steps = auto``: 256 for SAC, 1024 otherwise. SAC takes a gradient step per env
    step, so a round of 1,024 is 1,024 Adam steps away from the model it received; on heterogeneous
    Pendulum (8 nodes, g 7-13, m 0.8-1.3, 20k env steps per node) the averaged actor then lost the
    hardest variant (seed 17799: worst -771 final, where each node alone solved its own at -163),
    and 256-step rounds kept it (-209). An explicit number is kept as given."""
    if cfg.algo.local_steps != AUTO:
        return cfg
    steps = SAC_LOCAL_STEPS if cfg.algo.name == "sac" else LOCAL_STEPS
    return dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, local_steps=steps))


def _resolve_norm_reward(cfg: Config) -> Config:
    """``algo.norm-reward = auto`` becomes ``off`` for the replay learners (DQN and SAC do not
    scale rewards; ``on`` is refused by their checks), so no check asks to turn off what they
    never use; and ``on`` for PPO, discrete actions included, except under ``privacy.dpsgd``, where
    it stays ``auto`` (off for discrete actions; for continuous ones the DP-SGD check asks for
    ``off``: running statistics feed raw data into training outside the clipped gradients).

    Why on for discrete PPO too (issue 43): Acrobot pays -1 a step, so unscaled value targets run
    to -100 while the clipped value loss moves a value by at most ``ppo.clip-coef`` a step; on the
    robustness benchmark's case 03 every node's policy then stopped reaching the goal after round
    5 (worst variant -500 to the end, each node alone too), and with returns scaled it solved
    (-89). docs/stability.md, "Reward scaling for discrete PPO"."""
    if cfg.algo.norm_reward != "auto":
        return cfg
    if cfg.algo.name in REPLAY_LEARNERS:
        return dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, norm_reward="off"))
    if cfg.privacy.dpsgd:
        return cfg
    return dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, norm_reward="on"))


# Learners that replay stored transitions (their targets bootstrap from replayed, unscaled rewards).
REPLAY_LEARNERS = frozenset({"dqn", "sac"})


def _resolve_norm_obs(cfg: Config) -> Config:
    """``algo.norm-obs = auto`` becomes ``on`` where observation statistics can travel (issue 13:
    normalization with federated statistics, with the annealed server step, kept heterogeneous
    CartPole solved; docs/stability.md). Where nodes cannot send them (secure aggregation,
    client-level DP) or a hierarchy cannot merge them yet, it becomes ``server`` (statistics of the
    server's own rollouts, ``fedrl.rl.obs_stats``) wherever there is one model the run stands for:
    PPO on the star or the hierarchy, without DP-SGD or ``strategy.name = local``. Without
    normalization those runs lost what issue 13 gained: heterogeneous CartPole under a hierarchy
    with secure aggregation solved seed 1 by round 15 and fell to a worst variant of 281 by round 30,
    and stayed solved with server statistics (docs/secure_aggregation.md). Elsewhere (gossip,
    DP-SGD) ``auto`` keeps its older meaning (on for continuous actions, which those features then
    refuse with a message to set it off). The resolved value is what ``config.json`` records, so an
    exported model reads it back exactly."""
    p, t = cfg.privacy, cfg.topology.name
    if cfg.algo.norm_obs == "auto" and cfg.algo.name in REPLAY_LEARNERS:
        # Replay learners: statistics that move while old transitions are replayed destabilized SAC
        # on Pendulum (critic loss 3 -> 2,400 in 10k steps; returns -1,360 against -80 without).
        return dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, norm_obs="off"))
    if cfg.algo.norm_obs != "auto":
        return cfg
    if not (cfg.secagg.enabled or p.mode != "off" or p.dpsgd or t != "star"):
        return dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, norm_obs="on"))
    if t in ("star", "hierarchical") and cfg.algo.name == "ppo" and not p.dpsgd and cfg.strategy.name != "local":
        return dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, norm_obs="server"))
    return cfg


def to_flat(cfg: Config) -> dict[str, Any]:
    """The inverse of ``from_run_config``: key -> value for every key."""
    out: dict[str, Any] = {}
    for sec, f, _ in _all_leaves():
        holder = cfg if sec is None else getattr(cfg, sec)
        out[f.metadata["key"]] = getattr(holder, f.name)
    return out
