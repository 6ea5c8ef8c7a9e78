"""Checks of a feature's own settings against the run: sizes, counts, graphs and rings.

Which features combine is declared in ``fedrl.features`` and checked by ``fedrl.features.compat``; what
is here asks whether an allowed combination can work at the run's size: enough honest nodes for
a robust rule, a connected gossip graph, a ring wide enough for the sum. ``fedrl.checks.validate.check``
calls everything, in order. Each function returns the error to raise or None (the graph and the
edge assignment raise their own).
"""

from __future__ import annotations

from fedrl.aggregation.asynchronous import ASYNC_RULES
from fedrl.aggregation.robust import ROBUST_RULES
from fedrl.compression.ring_codes import required_ring_bits
from fedrl.config import Config
from fedrl.envs.spec import parse_vary, sample_variant
from fedrl.errors import ConfigError
from fedrl.inject.attacks import attackers
from fedrl.topology.graphs import graph
from fedrl.topology.hierarchy import assign_edges


def compression_fraction_error(cfg: Config) -> ConfigError | None:
    c = cfg.compression
    if c.up in ("topk", "randk") and not 0 < c.fraction <= 1:
        return ConfigError("compression.fraction", "must be in (0, 1]")
    return None


def eval_nodes_error(cfg: Config) -> ConfigError | None:
    """An ``eval.nodes`` sample larger than the federation."""
    if cfg.eval.nodes > cfg.nodes.count:
        return ConfigError("eval.nodes", f"got {cfg.eval.nodes}; at most nodes.count = {cfg.nodes.count} "
                                         "(0: every node's variant)")
    return None


def secagg_error(cfg: Config) -> ConfigError | None:
    """SecAgg+ neighbourhoods that do not fit the federation, or a ring a sum of codes would wrap."""
    c, secagg, n = cfg.compression, cfg.secagg, cfg.nodes.count
    if not secagg.enabled:
        return None
    if secagg.neighbors and (secagg.neighbors % 2 or secagg.neighbors >= n):
        return ConfigError("secagg.neighbors", f"got {secagg.neighbors}; must be even and below nodes.count = {n} "
                                               "(0: every node, plain SecAgg)")
    if cfg.privacy.mode == "distributed":  # the DP coding sizes its own ring (fedrl.privacy.plan)
        return None
    try:
        need = required_ring_bits(c.bits, n)
    except ValueError:
        return ConfigError("compression.bits", f"compression.bits = {c.bits} with nodes.count = {n} needs a ring "
                                               "wider than 32 bits; at most 32: lower compression.bits")
    if secagg.bits and secagg.bits < need:
        return ConfigError("secagg.bits", f"secagg.bits = {secagg.bits} with compression.bits = {c.bits} and "
                                          f"nodes.count = {n}: a sum of {n} codes of {c.bits} bits needs {need} bits "
                                          "and would wrap around; raise secagg.bits or set it to 0 (auto)")
    return None


def byzantine_error(cfg: Config) -> ConfigError | None:
    """Attackers named wrongly (``attack.nodes``), or more than the robust rule tolerates."""
    s = cfg.strategy
    bad = attackers(cfg)  # raises on a malformed attack.nodes
    if s.name not in ROBUST_RULES:
        return None
    return rule_error(cfg, s.name, cfg.nodes_per_round, s.byzantine if s.byzantine >= 0 else len(bad),
                      "nodes per round")


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


def hierarchy_error(cfg: Config) -> ConfigError | None:
    """A bad edge assignment, an edge of one node under secure aggregation, or an edge or cloud
    rule its tier's size or attackers defeat."""
    t = cfg.topology
    if t.name != "hierarchical":
        return None
    variants = [sample_variant(parse_vary(cfg.env.vary), i, cfg.nodes.count, cfg.seed) for i in range(cfg.nodes.count)]
    edge_of = assign_edges(t.assign, variants, t.edges, cfg.seed)  # raises on a bad mapping or edge count
    bad = attackers(cfg)
    for edge in range(t.edges):
        mine = [i for i in range(cfg.nodes.count) if edge_of[i] == edge]
        if cfg.secagg.enabled and len(mine) < 2:
            return ConfigError("topology.assign", f"edge {edge} has {len(mine)} node; with secagg.enabled each edge "
                                                  "sums its nodes securely, and a sum of one node is its update: "
                                                  "give every edge at least 2 nodes (or fewer topology.edges)")
        f = cfg.strategy.byzantine if cfg.strategy.byzantine >= 0 else len(bad & set(mine))
        err = rule_error(cfg, t.edge_rule, len(mine), f, f"nodes of edge {edge}") if t.edge_rule != "fedavg" else None
        if err is not None:
            return err
    if t.cloud_rule == "trimmed-mean" and 2 * int(cfg.strategy.trim * t.edges) >= t.edges:
        return ConfigError("strategy.trim", f"the cloud's trimmed mean of {t.edges} edges at strategy.trim = "
                                            f"{cfg.strategy.trim:g} leaves none")
    return None


def gossip_graph_error(cfg: Config) -> ConfigError | None:
    """None, or raises ``ConfigError`` on an unknown or disconnected ``topology.graph``."""
    t = cfg.topology
    if t.name == "gossip":
        for rnd in (1, 2, 3):  # one-peer changes with the round; the others are checked once
            graph(t.graph, cfg.nodes.count, rnd, t.degree, cfg.seed)
    return None


def asynchronous_error(cfg: Config) -> ConfigError | None:
    """A buffer or a concurrency the federation has not enough nodes for."""
    s, n = cfg.strategy, cfg.nodes.count
    if s.name not in ASYNC_RULES:
        return None
    if s.name == "fedbuff" and s.buffer > n:
        return ConfigError("strategy.buffer", f"fedbuff buffers K = {s.buffer} updates per step, more than the "
                                              f"{n} nodes of the federation (nodes.count)")
    if s.concurrency > n:
        return ConfigError("strategy.concurrency", f"{s.concurrency} nodes training at once, but nodes.count is {n}")
    return None


def tensorboard_error(cfg: Config) -> ConfigError | None:
    """``log.tensorboard`` needs TensorBoard where the server runs (found, not imported)."""
    if not cfg.log.tensorboard:
        return None
    from fedrl.runfolder.tensorboard_log import require

    try:
        require()
    except ConfigError as err:
        return err
    return None
