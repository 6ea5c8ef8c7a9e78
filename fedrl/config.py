"""fedrl's one typed run configuration, parsed once at the edge.

Every run-config key (Flower's ``--run-config``, kebab-case, dotted for groups) is a field of
one of the frozen dataclasses below; its metadata holds the key, a one-line help and a
validity check. ``from_run_config`` rejects unknown keys (naming the nearest known one),
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

from fedrl import config_checks as ck
from fedrl.attacks import check_names
from fedrl.config_checks import Check
from fedrl.errors import ConfigError


def opt(key: str, default: Any, help: str, check: Check | None = None) -> Any:
    return field(default=default, metadata={"key": key, "help": help, "check": check})


@dataclass(frozen=True)
class EnvConfig:
    id: str = opt("env.id", "CartPole-v1", "any registered Gymnasium id")
    vary: str = opt(
        "env.vary", "length=linspace(0.4, 1.2)",
        "how parameters differ across nodes: 'param=spec; ...' (number, uniform, loguniform, linspace, choice)",
    )
    kwargs: str = opt("env.kwargs", "", "'name=value; ...' passed to gym.make")


@dataclass(frozen=True)
class AlgoConfig:
    name: Literal["ppo"] = opt("algo.name", "ppo", "local RL algorithm")
    local_steps: int = opt("algo.local-steps", 1024, "env steps per node per round", ck.positive)
    num_envs: int = opt("algo.num-envs", 8, "parallel envs per node (gymnasium.vector)", ck.positive)
    num_steps: int = opt("algo.num-steps", 32, "steps per env per PPO rollout", ck.positive)
    lr: float = opt("algo.lr", 2.5e-3, "Adam learning rate", ck.positive)
    anneal_lr: bool = opt("algo.anneal-lr", True, "anneal lr linearly to 0 over the whole run")
    gamma: float = opt("algo.gamma", 0.99, "discount", ck.unit_closed)
    gae_lambda: float = opt("algo.gae-lambda", 0.95, "GAE lambda", ck.unit_closed)
    num_minibatches: int = opt("algo.num-minibatches", 4, "minibatches per epoch", ck.positive)
    update_epochs: int = opt("algo.update-epochs", 4, "epochs per PPO update", ck.positive)
    norm_adv: bool = opt("algo.norm-adv", True, "normalize advantages per minibatch")
    clip_coef: float = opt("algo.clip-coef", 0.2, "surrogate clipping epsilon", ck.positive)
    clip_vloss: bool = opt("algo.clip-vloss", True, "clip the value loss")
    ent_coef: float = opt("algo.ent-coef", 0.0, "entropy bonus coefficient", ck.non_negative)
    vf_coef: float = opt("algo.vf-coef", 0.5, "value loss coefficient", ck.non_negative)
    max_grad_norm: float = opt("algo.max-grad-norm", 0.5, "gradient-norm clip", ck.positive)
    target_kl: float = opt("algo.target-kl", 0.0, "stop epochs past this KL (0: off)", ck.non_negative)
    hidden: str = opt("algo.hidden", "64,64", "hidden layer sizes", ck.hidden)
    norm_obs: Literal["auto", "on", "off"] = opt(
        "algo.norm-obs", "auto",
        "running observation normalization with federated statistics (auto: on, except with secagg, privacy, "
        "hierarchical or gossip, which cannot carry the statistics yet: there on for continuous actions only)")
    norm_reward: Literal["auto", "on", "off"] = opt(
        "algo.norm-reward", "auto", "reward scaling by return std (auto: on for continuous actions)")

    @property
    def hidden_sizes(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.hidden.split(",") if s.strip())

    @property
    def batch_steps(self) -> int:
        """Env steps in one PPO rollout (all envs)."""
        return self.num_envs * self.num_steps

    @property
    def iterations_per_round(self) -> int:
        return self.local_steps // self.batch_steps


# The default end of the server step's schedule (issue 13): 2 -> 0.5 kept the final model solved in
# the stability benchmark (docs/stability.md), where a constant 2 let solved policies collapse late.
SERVER_LR_END = 0.5


@dataclass(frozen=True)
class StrategyConfig:
    name: Literal["fedavg", "fedprox", "fedavgm", "fedadagrad", "fedadam", "fedyogi", "median", "trimmed-mean",
                  "krum", "multi-krum", "fedbuff", "fedasync", "local"] = opt(
        "strategy.name", "fedavg",
        "fedavg, fedprox (client proximal term), server optimizers fedavgm, fedadagrad, fedadam, fedyogi (Reddi et "
        "al. 2021), robust rules median, trimmed-mean, krum, multi-krum, asynchronous fedbuff, fedasync, or local "
        "(no aggregation)")
    server_lr: float = opt("strategy.server-lr", 2.0,
                           "server step on the mean delta (1: plain FedAvg; adaptive optimizers want about 0.01; gossip: each "
                           "node's step on its own update before mixing)",
                           ck.positive)
    server_lr_end: float = opt("strategy.server-lr-end", SERVER_LR_END,
                               "server-lr in the last round, annealed linearly from strategy.server-lr in round 1; "
                               "never raises the step (the end is min(this, server-lr)); -1: constant. Used by the "
                               "server step of the star, hierarchical and fedbuff rules",
                               ck.off_or_non_negative)
    proximal_mu: float = opt("strategy.proximal-mu", 0.01, "FedProx mu (used by fedprox)", ck.non_negative)
    momentum: float = opt("strategy.momentum", 0.9, "fedavgm: server momentum", ck.unit_closed)
    beta1: float = opt("strategy.beta1", 0.9, "fedadagrad, fedadam, fedyogi: first-moment decay", ck.unit_closed)
    beta2: float = opt("strategy.beta2", 0.99, "fedadam, fedyogi: second-moment decay", ck.unit_closed)
    tau: float = opt("strategy.tau", 1e-3, "fedadagrad, fedadam, fedyogi: adaptivity (added to sqrt(v))", ck.positive)
    trim: float = opt("strategy.trim", 0.1, "trimmed-mean: fraction of updates dropped at each end, per coordinate",
                      ck.unit_closed)
    byzantine: int = opt("strategy.byzantine", -1,
                         "krum, multi-krum: Byzantine nodes f to tolerate (-1: the attackers set in attack.*)")
    krum_m: int = opt("strategy.krum-m", 0, "multi-krum: updates averaged (0: nodes - f)", ck.non_negative)
    buffer: int = opt("strategy.buffer", 4, "fedbuff: updates buffered per server step (K)", ck.positive)
    mixing: float = opt("strategy.mixing", 0.6, "fedasync: alpha in x += alpha s(staleness) (x_node - x)",
                        ck.unit_open_closed)
    staleness_exponent: float = opt("strategy.staleness-exponent", 0.5,
                                    "fedbuff, fedasync: an update tau versions old weighs (1 + tau)^-a (0: ignore "
                                    "staleness)", ck.non_negative)
    concurrency: int = opt("strategy.concurrency", 0,
                           "fedbuff, fedasync: nodes training at once (0: every node; at most one per SuperNode)",
                           ck.non_negative)
    max_update_norm: float = opt("strategy.max-update-norm", 0.0,
                                 "leave out a reply whose update's L2 norm exceeds this, with the reason logged "
                                 "(0: off)", ck.non_negative)


@dataclass(frozen=True)
class TopologyConfig:
    name: Literal["star", "hierarchical", "gossip"] = opt(
        "topology.name", "star",
        "star (one server model), hierarchical (nodes, edges, cloud; HierFAVG) or gossip (no global model: each "
        "node mixes with its neighbours over topology.graph)")
    edges: int = opt("topology.edges", 2, "hierarchical: number of edge aggregators", ck.positive)
    cloud_every: int = opt("topology.cloud-every", 2, "hierarchical: the cloud averages the edges every N rounds",
                           ck.positive)
    assign: str = opt("topology.assign", "contiguous",
                      "hierarchical: node -> edge: contiguous, cluster (k-means on variant parameters) or one edge "
                      "index per node, e.g. '0,0,1,1'")
    edge_rule: Literal["fedavg", "median", "trimmed-mean", "krum", "multi-krum"] = opt(
        "topology.edge-rule", "fedavg",
        "hierarchical: how an edge combines its nodes' updates: fedavg (env-step weighted mean) or a robust rule "
        "(strategy.trim, strategy.byzantine and strategy.krum-m apply per edge)")
    cloud_rule: Literal["fedavg", "median", "trimmed-mean"] = opt(
        "topology.cloud-rule", "fedavg",
        "hierarchical: how the cloud combines the edge models: fedavg (weighted by their nodes), coordinate-wise "
        "median or trimmed-mean (strategy.trim)")
    graph: str = opt("topology.graph", "ring",
                     "gossip: ring, torus, regular (random d-regular), exponential, complete or one-peer "
                     "(time-varying one-peer exponential)")
    degree: int = opt("topology.degree", 4, "gossip with topology.graph = regular: the degree d", ck.positive)


@dataclass(frozen=True)
class SelectionConfig:
    name: Literal["uniform", "round-robin", "deadline"] = opt(
        "selection.name", "uniform",
        "which fraction-train of the nodes train each round: uniform (drawn by seed and round), round-robin "
        "(in turn, so every node trains equally often) or deadline (the nodes least likely to miss "
        "round.deadline-s, learned from their history, with a little exploration)")


@dataclass(frozen=True)
class RoundConfig:
    deadline_s: float = opt("round.deadline-s", 0.0,
                            "a train reply later than this many seconds after its plan went out is dropped from "
                            "the round (0: wait up to round.timeout-s)", ck.non_negative)
    timeout_s: float = opt("round.timeout-s", 600.0,
                           "a node silent this long after its plan went out (a straggler, a dead SuperNode) is "
                           "dropped from the round and logged; the round goes on with the replies it has", ck.positive)


@dataclass(frozen=True)
class AttackConfig:
    name: str = opt(
        "attack.name", "none",
        "experiments: Byzantine nodes send sign-flip (-scale x their update) or gaussian (N(0, scale^2) noise) "
        "instead of their update, or random-action (train on rollouts of random actions, as in FedPG-BR); "
        "hostile replies: huge-weights, nan-weights, lie-steps, bad-moments, wrong-node, wrong-shape, bad-dtype, "
        "bad-stype, npy-bomb, topk-overflow (fedrl/attacks.py); a comma-separated list gives the attack.nodes "
        "their kinds in order", check_names)
    fraction: float = opt("attack.fraction", 0.0, "fraction of nodes that attack (chosen by seed)", ck.unit_closed)
    nodes: str = opt("attack.nodes", "", "explicit attacking nodes, e.g. '0,3' (overrides attack.fraction)")
    scale: float = opt("attack.scale", 1.0, "sign-flip factor, or gaussian std", ck.positive)


@dataclass(frozen=True)
class EvalConfig:
    every: int = opt("eval.every", 1, "evaluate the server model every N rounds (0: only at the end)", ck.non_negative)
    episodes: int = opt("eval.episodes", 5, "episodes per variant", ck.positive)
    target_return: str = opt(
        "eval.target-return", "auto", "return that counts as solved: auto (env threshold), none or a number", ck.target)
    stop_at_target: bool = opt("eval.stop-at-target", False, "end the run once every variant reaches the target")
    held_out: int = opt("eval.held-out", 0, "also evaluate on N variants no node trains on, drawn from env.vary "
                        "(0: off)", ck.held_out)


COMPRESSOR_NAMES = ("none", "fp16", "bf16", "quantize", "qsgd", "topk", "randk", "sign")


@dataclass(frozen=True)
class CompressionConfig:
    up: Literal["none", "fp16", "bf16", "quantize", "qsgd", "topk", "randk", "sign"] = opt("compression.up", "none",
                         "uplink compressor: none (float32 weights), fp16, bf16, quantize, qsgd, topk, randk, sign")
    down: Literal["none", "fp16", "bf16", "quantize", "qsgd", "topk", "randk", "sign"] = opt("compression.down", "none",
                           "downlink: none (full weights) or a compressor for the global-model delta")
    bits: int = opt("compression.bits", 8, "quantize: bits per coordinate", ck.bits)
    fraction: float = opt("compression.fraction", 0.01, "topk/randk: fraction of coordinates kept", ck.unit_open_closed)
    levels: int = opt("compression.levels", 16, "qsgd: quantization levels s", ck.positive)
    chunk: int = opt("compression.chunk", 0, "quantize: one scale per chunk of this many coordinates (0: per update)",
                     ck.non_negative)
    error_feedback: Literal["auto", "on", "ef21", "off"] = opt(
        "compression.error-feedback", "auto",
        "on: resend what a compressor dropped (EF-SGD); ef21: compress the change of each node's update "
        "(EF21); auto: on for topk and sign")


@dataclass(frozen=True)
class SecAggConfig:
    enabled: bool = opt("secagg.enabled", False, "secure aggregation (SecAgg+): the server learns only the sum")
    threshold: float = opt("secagg.threshold", 0.6,
                           "fraction of a node's share holders (neighbours + itself) needed to reconstruct its secrets",
                           ck.unit_open_closed)
    neighbors: int = opt("secagg.neighbors", 0, "SecAgg+ neighbours per node, even (0: all nodes, plain SecAgg)",
                         ck.non_negative)
    bits: int = opt("secagg.bits", 0, "ring Z_(2^bits) for masked sums (0: auto)", ck.ring_bits)
    clip_range: float = opt("secagg.clip-range", 0.5,
                            "each coordinate of a node's weighted update is clipped to [-r, r] and quantized with "
                            "compression.bits over that range", ck.positive)
    send_metrics: bool = opt("secagg.send-metrics", False, "also send per-node training metrics in the clear")


def norm_on(setting: str, continuous: bool) -> bool:
    """Whether an ``algo.norm-obs``/``algo.norm-reward`` setting is on (``auto``: for continuous actions;
    ``from_run_config`` has already turned ``algo.norm-obs = auto`` into ``on`` where it can be)."""
    return setting == "on" or (setting == "auto" and continuous)


@dataclass(frozen=True)
class PrivacyConfig:
    mode: Literal["off", "central", "distributed", "local"] = opt(
        "privacy.mode", "off",
        "client-level DP: central (nodes clip, the server adds Gaussian noise to the sum, DP-FedAvg), "
        "distributed (with secagg: each node adds Skellam noise inside the ring), local (each node noises its own "
        "clipped update), off")
    clip_norm: float = opt("privacy.clip-norm", 1.0, "L2 bound C on each node's whole update", ck.positive)
    noise_multiplier: float = opt(
        "privacy.noise-multiplier", 0.0,
        "noise std / C (0: derive it from privacy.target-epsilon over num-server-rounds)", ck.non_negative)
    target_epsilon: float = opt(
        "privacy.target-epsilon", 0.0,
        "privacy budget at privacy.delta: with noise-multiplier 0 the noise is set to meet it after the planned "
        "rounds; with a noise multiplier the run stops before a round that would exceed it (0: no budget)",
        ck.non_negative)
    delta: float = opt("privacy.delta", 1e-5, "δ of the reported (ε, δ)", ck.unit_open)
    accountant: Literal["rdp", "prv"] = opt("privacy.accountant", "rdp", "Opacus accountant: rdp or prv")
    adaptive_clip: bool = opt("privacy.adaptive-clip", False,
                              "central: the clip norm tracks a quantile of update norms (Andrew et al. 2021); "
                              "privacy.clip-norm is where it starts")
    target_quantile: float = opt("privacy.target-quantile", 0.5, "adaptive clip: fraction of updates left unclipped",
                                 ck.unit_open)
    clip_lr: float = opt("privacy.clip-lr", 0.2, "adaptive clip: geometric step of the clip norm per round", ck.positive)
    count_noise: float = opt("privacy.count-noise", 0.0,
                             "adaptive clip: std of the noise on the count of unclipped updates (0: nodes per "
                             "round / 20, as the paper suggests)", ck.non_negative)
    dpsgd: bool = opt("privacy.dpsgd", False,
                      "sample-level DP in local training: DP-SGD (Opacus) on every PPO minibatch; the privacy unit is "
                      "one rollout segment (algo.num-steps transitions of one env copy)")
    dpsgd_noise_multiplier: float = opt("privacy.dpsgd-noise-multiplier", 1.0,
                                        "DP-SGD: noise std / dpsgd-clip-norm on each minibatch's gradient sum",
                                        ck.positive)
    dpsgd_clip_norm: float = opt("privacy.dpsgd-clip-norm", 1.0, "DP-SGD: L2 bound on each segment's gradient",
                                 ck.positive)
    audit_canaries: int = opt("privacy.audit-canaries", 0,
                              "one-run audit (Steinke et al. 2023), central mode: plant this many canary updates, "
                              "each included with probability 1/2, and report an empirical ε lower bound (0: off)",
                              ck.non_negative)
    unsafe_no_noise: bool = opt("privacy.unsafe-no-noise", False,
                                "only to check the audit: add no noise but account as if it did; the reported ε is "
                                "then false (needs privacy.audit-canaries)")


@dataclass(frozen=True)
class NodesConfig:
    count: int = opt("nodes.count", 8, "federation size: one environment variant per node", ck.node_count)
    wait_s: float = opt("nodes.wait-s", 120.0, "how long the server waits for nodes to connect", ck.positive)
    dropout_prob: float = opt("nodes.dropout-prob", 0.0,
                              "experiments: probability that a node fails to answer, seeded by (seed, round, node)",
                              ck.unit_closed)
    speed: str = opt("nodes.speed", "1",
                     "experiments: per-node slowdown factor >= 1 (a number, uniform(a, b), loguniform(a, b), "
                     "linspace(a, b), choice(...) drawn by seed and node, or one factor per node, e.g. '1,1,4'); a "
                     "node sleeps (slowdown - 1) x its training time before replying")
    dropout_stage: Literal["train", "advertise", "share", "mask", "unmask", "any"] = opt(
        "nodes.dropout-stage", "any",
        "where injected dropouts happen: train, or a secure-aggregation stage (advertise: the keys request, or "
        "the train reply when keys were sent ahead); any: a seeded random stage")


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

    @property
    def nodes_per_round(self) -> int:
        """Nodes selected each round: ``fraction-train`` of them, at least ``min-train-nodes``, at most all."""
        n = self.nodes.count
        return min(n, max(self.min_train_nodes, math.ceil(self.fraction_train * n)))


_SECTIONS = ("env", "algo", "strategy", "eval", "nodes", "compression", "secagg", "privacy", "attack", "topology",
             "selection", "round")


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


RENAMED = {"nodes.reply-timeout-s": "round.timeout-s"}
LOCATION_KEYS = frozenset({"resume", "output-dir", "run-name"})  # where a run lives: may change on resume


def unknown_key_error(key: str) -> ConfigError:
    if key in RENAMED:
        return ConfigError(key, f"renamed to '{RENAMED[key]}'")
    close = difflib.get_close_matches(key, list(DEFAULTS), n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else "; run `fedrl check --list` for all keys"
    return ConfigError(key, f"unknown run-config key{hint}")


def from_run_config(run_config: Mapping[str, Any]) -> Config:
    """Parse Flower's flat run config (missing keys take defaults) into a ``Config``.

    Checks each value on its own here; cross-key and environment checks (env ids, variant
    parameters, impossible combinations) are in ``fedrl.validate.validate``.
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
        value = _coerce(key, run_config.get(key, f.default), typ)
        check: Check | None = f.metadata["check"]
        if (why := ck.travels(value) or (check(value) if check is not None else None)) is not None:
            raise ConfigError(key, f"got {value!r}; {why}")
        (top if sec is None else sections[sec])[f.name] = value
    hints = get_type_hints(Config)
    for sec in _SECTIONS:
        top[sec] = hints[sec](**sections[sec])
    return _resolve_norm_obs(Config(**top))


def _resolve_norm_obs(cfg: Config) -> Config:
    """``algo.norm-obs = auto`` becomes ``on`` where observation statistics can travel (issue 13:
    normalization with federated statistics, with the annealed server step, kept heterogeneous
    CartPole solved; docs/stability.md). With secure aggregation, privacy, hierarchical or gossip
    aggregation they cannot yet, and ``auto`` keeps its older meaning there (on for continuous
    actions, which those features then refuse with a message to set it off). The resolved value is
    what ``config.json`` records, so an exported model reads it back exactly."""
    p, t = cfg.privacy, cfg.topology.name
    if cfg.algo.norm_obs != "auto" or cfg.secagg.enabled or p.mode != "off" or p.dpsgd or t != "star":
        return cfg
    return dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, norm_obs="on"))


def to_flat(cfg: Config) -> dict[str, Any]:
    """The inverse of ``from_run_config``: key -> value for every key."""
    out: dict[str, Any] = {}
    for sec, f, _ in _all_leaves():
        holder = cfg if sec is None else getattr(cfg, sec)
        out[f.metadata["key"]] = getattr(holder, f.name)
    return out
