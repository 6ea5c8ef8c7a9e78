"""Checks that need more than one key or a real environment; all run before round 1.

``check(run_config)`` is what ``fedrl check``, ``fedrl run`` and the ServerApp call: it
parses (unknown keys, types, ranges) and then validates the combination, raising a
``ConfigError`` that names the key and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedrl import speed
from fedrl.aggregation.asynchronous import ASYNC_RULES
from fedrl.algorithms.registry import get as algorithm
from fedrl.aggregation.robust import ROBUST_RULES
from fedrl.attacks import attackers
from fedrl.compression.ring_codes import required_ring_bits
from fedrl.config import SERVER_LR_END, Config, from_run_config, norm_on
from fedrl.dropout import SECAGG_STAGES
from fedrl.env_checks import check_environments
from fedrl.envs.families import check_env_id, check_params, check_values
from fedrl.envs.make import make_env
from fedrl.envs.spec import parse_kwargs, parse_vary, sample_heldout, sample_variant
from fedrl.errors import ConfigError
from fedrl.privacy.plan import plan_for, sample_plan
from fedrl.topology.graphs import graph
from fedrl.topology.hierarchy import assign_edges


def validate(cfg: Config) -> None:
    algorithm(cfg.algo.name).check(cfg)  # its own settings (PPO: a round is whole rollouts)
    if cfg.resume == "true" and not cfg.run_name:
        raise ConfigError("resume", "resume=true needs run-name (or give the run folder path as resume)")
    check_env_id(cfg.env.id)
    speed.check(cfg)
    specs = parse_vary(cfg.env.vary)
    check_params(cfg.env.id, specs.keys())
    kwargs = parse_kwargs(cfg.env.kwargs)
    variants = [sample_variant(specs, i, cfg.nodes.count, cfg.seed) for i in range(cfg.nodes.count)]
    # eval.held-out: variants no node trains on, checked like the nodes' (listed after them)
    heldout = [sample_heldout(specs, j, variants, cfg.seed) for j in range(cfg.eval.held_out)]
    for v in variants + heldout:
        check_values(cfg.env.id, v)
    check_environments(cfg, variants + heldout, kwargs)


def config_warnings(cfg: Config) -> list[str]:
    """Settings that work but weaken a guarantee, each one line naming the key and the risk."""
    out = []
    t = cfg.secagg.threshold
    if cfg.secagg.enabled and t <= 0.5:
        out.append(f"secagg.threshold = {t:g} <= 0.5: a server that sends different survivor lists to different "
                   "nodes can collect one node's mask-key shares from some holders and its self-mask shares from "
                   "others, and so recover that node's input; use a threshold above 0.5 unless the server is "
                   "trusted to follow the protocol")
    return out


# Why each uplink compressor cannot feed secure aggregation (the server only sees sums).
_NOT_MASKABLE = {
    "none": "float32 weights cannot be masked in a ring; secure aggregation needs integer codes",
    "fp16": "floats cannot be masked in a ring; secure aggregation needs integer codes",
    "bf16": "floats cannot be masked in a ring; secure aggregation needs integer codes",
    "qsgd": "each node scales by its own norm, so the sum of codes decodes to nothing (not summable)",
    "topk": "each node keeps different coordinates, so the sum of payloads is not summable",
    "sign": "each node scales by its own mean magnitude, so the sum of signs is not summable",
    "randk": "random-k with secure aggregation is not implemented yet (only quantize is)",
}
# Aggregation rules that need each update in the clear (robust rules arrive with issue 5).
_NEEDS_CLEAR_UPDATES = {
    "local": "keeps one model per node, so it needs each node's update, not their sum",
    **{rule: "a robust rule looks at each update (medians, distances), which masking hides"
       for rule in ROBUST_RULES},
}


def topology_error(cfg: Config) -> ConfigError | None:
    """Settings hierarchical aggregation does not combine with (yet), or a bad edge assignment."""
    t = cfg.topology
    if t.name == "gossip":
        return _gossip_error(cfg)
    if t.name != "hierarchical":
        return None
    variants = [sample_variant(parse_vary(cfg.env.vary), i, cfg.nodes.count, cfg.seed) for i in range(cfg.nodes.count)]
    edge_of = assign_edges(t.assign, variants, t.edges, cfg.seed)  # raises on a bad mapping or edge count
    bad = attackers(cfg)
    for e in range(t.edges):
        mine = [i for i in range(cfg.nodes.count) if edge_of[i] == e]
        f = cfg.strategy.byzantine if cfg.strategy.byzantine >= 0 else len(bad & set(mine))
        err = rule_error(cfg, t.edge_rule, len(mine), f, f"nodes of edge {e}") if t.edge_rule != "fedavg" else None
        if err is not None:
            return err
    if t.cloud_rule == "trimmed-mean" and 2 * int(cfg.strategy.trim * t.edges) >= t.edges:
        return ConfigError("strategy.trim", f"the cloud's trimmed mean of {t.edges} edges at strategy.trim = "
                                            f"{cfg.strategy.trim:g} leaves none")
    if cfg.strategy.name not in ("fedavg", "fedprox"):
        return ConfigError("strategy.name", f"topology.name = hierarchical with strategy.name = {cfg.strategy.name}: "
                                            "edges and cloud average (FedAvg with strategy.server-lr); use fedavg "
                                            "or fedprox")
    for key, on in (("secagg.enabled", cfg.secagg.enabled), ("privacy.mode", cfg.privacy.mode != "off"),
                    ("algo.norm-obs", norm_on(cfg.algo.norm_obs, cfg.algo.norm_obs == "auto" and _continuous(cfg)))):
        if on:
            return ConfigError(key, f"topology.name = hierarchical does not combine with {key} yet: it aggregates "
                                    "per edge in the clear, with per-edge observation statistics left out")
    return None


def _gossip_error(cfg: Config) -> ConfigError | None:
    t = cfg.topology
    for rnd in (1, 2, 3):  # one-peer changes with the round; the others are checked once
        graph(t.graph, cfg.nodes.count, rnd, t.degree, cfg.seed)  # raises on an unknown or disconnected graph
    if cfg.strategy.name not in ("fedavg", "fedprox"):
        return ConfigError("strategy.name", f"topology.name = gossip with strategy.name = {cfg.strategy.name}: "
                                            "there is no server model to step or robustly aggregate; nodes mix with "
                                            "Metropolis-Hastings weights (use fedavg, or fedprox for its local term)")
    if cfg.nodes_per_round < cfg.nodes.count:
        return ConfigError("fraction-train", f"topology.name = gossip trains and mixes every node every round; "
                                             f"fraction-train = {cfg.fraction_train:g} selects only "
                                             f"{cfg.nodes_per_round} of {cfg.nodes.count}")
    c = cfg.compression
    for key, on in (("secagg.enabled", cfg.secagg.enabled), ("privacy.mode", cfg.privacy.mode != "off"),
                    ("compression.up", c.up != "none"), ("compression.down", c.down != "none"),
                    ("algo.norm-obs", norm_on(cfg.algo.norm_obs, cfg.algo.norm_obs == "auto" and _continuous(cfg)))):
        if on:
            return ConfigError(key, f"topology.name = gossip does not combine with {key} yet: nodes exchange "
                                    "full float32 models in the clear, and per-node observation statistics are "
                                    "not mixed")
    return None


def async_error(cfg: Config) -> ConfigError | None:
    """Settings the asynchronous rules (fedbuff, fedasync) cannot honour."""
    s, n = cfg.strategy, cfg.nodes.count
    if s.name not in ASYNC_RULES:
        return None
    if s.name == "fedbuff" and s.buffer > n:
        return ConfigError("strategy.buffer", f"fedbuff buffers K = {s.buffer} updates per step, more than the "
                                              f"{n} nodes of the federation (nodes.count)")
    if s.concurrency > n:
        return ConfigError("strategy.concurrency", f"{s.concurrency} nodes training at once, but nodes.count is {n}")
    c = cfg.compression
    for key, on, why in (
            ("fraction-train", cfg.fraction_train < 1, ("asynchronous rules dispatch every idle node (bound it with "
                                                       "strategy.concurrency)")),
            ("selection.name", cfg.selection.name != "uniform", ("asynchronous rules dispatch nodes as they become "
                                                                "idle, not by a per-round selection")),
            ("secagg.enabled", cfg.secagg.enabled, "secure aggregation needs a round's nodes to finish together"),
            ("privacy.mode", cfg.privacy.mode != "off", "DP accounting here assumes synchronous rounds"),
            ("compression.up", c.up != "none", "compressed uplinks are not combined with asynchronous rules yet"),
            ("compression.down", c.down != "none", "compressed downlinks are not combined with asynchronous rules yet"),
            ("topology.name", cfg.topology.name != "star", "asynchronous rules step one server model")):
        if on:
            return ConfigError(key, f"strategy.name = {s.name} does not combine with {key}: {why}")
    return None


def selection_error(cfg: Config) -> ConfigError | None:
    """Deadline settings that cannot work together."""
    d = cfg.round.deadline_s
    if cfg.selection.name == "deadline" and d <= 0:
        return ConfigError("round.deadline-s", "selection.name = deadline learns which nodes miss the deadline; "
                                               "set round.deadline-s > 0")
    if d > 0 and cfg.secagg.enabled:
        return ConfigError("round.deadline-s", "round.deadline-s with secagg.enabled is not supported: secure "
                                               "aggregation already treats a late node as a dropout at its stage")
    if d > 0 and cfg.strategy.name in ASYNC_RULES:
        return ConfigError("round.deadline-s", f"strategy.name = {cfg.strategy.name} has no rounds to be late "
                                               "for; round.timeout-s bounds a node's silence")
    return None


def robust_error(cfg: Config) -> ConfigError | None:
    """Byzantine settings the chosen rule cannot tolerate, or attackers named wrongly."""
    s = cfg.strategy
    bad = attackers(cfg)  # raises on a malformed attack.nodes
    f = s.byzantine if s.byzantine >= 0 else len(bad)
    if s.name not in ROBUST_RULES:
        return None
    if cfg.privacy.mode != "off":
        return ConfigError("strategy.name", f"{s.name} with privacy.mode = {cfg.privacy.mode}: the noise is calibrated "
                                            "to the sensitivity of a sum, not of a robust rule")
    return rule_error(cfg, s.name, cfg.nodes_per_round, f, "nodes per round")


def rule_error(cfg: Config, rule: str, n: int, f: int, what: str) -> ConfigError | None:
    """Whether robust ``rule`` over ``n`` updates (``what`` they are) tolerates ``f`` Byzantine ones."""
    s = cfg.strategy
    f_key = "strategy.byzantine" if s.byzantine >= 0 else ("attack.nodes" if cfg.attack.nodes.strip()
                                                             else "attack.fraction")
    if rule in ("krum", "multi-krum") and n <= 2 * f + 2:
        return ConfigError(f_key, f"{rule} needs {what} n > 2f + 2; n = {n}, f = {f} Byzantine nodes")
    if rule == "multi-krum" and s.krum_m > n:
        return ConfigError("strategy.krum-m", f"got {s.krum_m}; at most the {n} {what}")
    if rule == "median" and 2 * f >= n:
        return ConfigError(f_key, f"median tolerates fewer than half Byzantine nodes; f = {f} of {what} n = {n}")
    if rule == "trimmed-mean":
        k = int(s.trim * n)
        if 2 * k >= n:
            return ConfigError("strategy.trim", f"trimming {k} of {n} updates ({what}) at each end leaves none; "
                                                "lower it")
        if f > k:
            return ConfigError("strategy.trim", f"trimmed-mean drops {k} updates at each end (strategy.trim = "
                                                f"{s.trim:g} of {what} {n}) but f = {f} nodes attack; raise "
                                                "strategy.trim")
    return None


def pipeline_error(cfg: Config) -> ConfigError | None:
    """The first impossible combination of compression, secure aggregation and strategy, if any."""
    c, sa = cfg.compression, cfg.secagg
    if c.up in ("topk", "randk") and not 0 < c.fraction <= 1:
        return ConfigError("compression.fraction", "must be in (0, 1]")
    if not sa.enabled:
        if cfg.nodes.dropout_stage in SECAGG_STAGES:
            return ConfigError("nodes.dropout-stage", f"'{cfg.nodes.dropout_stage}' is a secure-aggregation stage, "
                                                      "but secagg.enabled = false; use train or any")
        return None
    distributed = cfg.privacy.mode == "distributed"  # the DP coding replaces compression; privacy.plan checks it
    if distributed and c.up not in ("none", "quantize"):
        return ConfigError("compression.up", f"privacy.mode = distributed with compression.up = {c.up}: the DP "
                                             "coding (scaled, rounded, noised in the secagg.bits ring) replaces the "
                                             "compressor; use none or quantize")
    if c.up in _NOT_MASKABLE and not distributed:
        return ConfigError("compression.up", f"secagg.enabled = true with compression.up = {c.up}: "
                                             f"{_NOT_MASKABLE[c.up]}; use compression.up = quantize")
    if cfg.strategy.name in _NEEDS_CLEAR_UPDATES:
        return ConfigError("strategy.name", f"secagg.enabled = true with strategy.name = {cfg.strategy.name}: "
                                            f"{_NEEDS_CLEAR_UPDATES[cfg.strategy.name]}")
    if c.error_feedback in ("on", "ef21"):
        return ConfigError("compression.error-feedback", f"secagg.enabled = true with compression.error-feedback = "
                                                         f"{c.error_feedback}: "
                                                         "quantize is unbiased; error feedback is not supported there")
    if norm_on(cfg.algo.norm_obs, cfg.algo.norm_obs == "auto" and _continuous(cfg)):  # env built only for auto
        return ConfigError("algo.norm-obs", "secagg.enabled = true with observation normalization on (algo.norm-obs; "
                                            "auto is on for continuous actions): each node's observation statistics "
                                            "would travel in the clear; set algo.norm-obs = off")
    n = cfg.nodes.count
    if sa.neighbors and (sa.neighbors % 2 or sa.neighbors >= n):
        return ConfigError("secagg.neighbors", f"got {sa.neighbors}; must be even and below nodes.count = {n} "
                                               "(0: every node, plain SecAgg)")
    if distributed:
        return None
    try:
        need = required_ring_bits(c.bits, n)
    except ValueError:
        return ConfigError("compression.bits", f"compression.bits = {c.bits} with nodes.count = {n} needs a ring "
                                               "wider than 32 bits; at most 32: lower compression.bits")
    if sa.bits and sa.bits < need:
        return ConfigError("secagg.bits", f"secagg.bits = {sa.bits} with compression.bits = {c.bits} and "
                                          f"nodes.count = {n}: a sum of {n} codes of {c.bits} bits needs {need} bits "
                                          "and would wrap around; raise secagg.bits or set it to 0 (auto)")
    return None


def _continuous(cfg: Config) -> bool:
    import gymnasium as gym

    env = make_env(cfg.env.id, {}, dict(parse_kwargs(cfg.env.kwargs)))
    try:
        return isinstance(env.action_space, gym.spaces.Box)
    finally:
        env.close()


def schedule_error(cfg: Config) -> ConfigError | None:
    """``strategy.server-lr-end`` anneals the server's step: a value other than the default (or -1)
    is refused where there is no server step to anneal (the default is simply unused there)."""
    s = cfg.strategy
    if s.server_lr_end < 0 or s.server_lr_end == SERVER_LR_END:
        return None
    none = ("strategy.name = local" if s.name == "local" else "strategy.name = fedasync (it mixes, no server step)"
            if s.name == "fedasync" else "topology.name = gossip (nodes step themselves)"
            if cfg.topology.name == "gossip" else None)
    if none is None:
        return None
    return ConfigError("strategy.server-lr-end", f"anneals the server's step, but {none} has none; leave it at -1")


def check(run_config: Mapping[str, Any]) -> Config:
    cfg = from_run_config(run_config)
    validate(cfg)
    err = (pipeline_error(cfg) or robust_error(cfg) or topology_error(cfg) or async_error(cfg)
           or selection_error(cfg) or schedule_error(cfg))
    if err is not None:
        raise err
    p = cfg.privacy
    if p.mode != "off" or p.target_epsilon or p.noise_multiplier or p.audit_canaries or p.unsafe_no_noise or p.dpsgd:
        from fedrl.experiment import policy_spec, variants_of
        from fedrl.rl.networks import ActorCritic

        model = ActorCritic(policy_spec(cfg, variants_of(cfg)[0]))
        plan_for(cfg, model.spec.action_kind == "continuous", sum(t.numel() for t in model.parameters()))
        sample_plan(cfg, model)
    return cfg
