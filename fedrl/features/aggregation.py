"""Server rules and topologies: what each aggregates, and so what it cannot combine with."""

from __future__ import annotations

from fedrl.aggregation.asynchronous import ASYNC_RULES
from fedrl.aggregation.robust import ROBUST_RULES
from fedrl.aggregation.server_opt import OPTIMIZERS
from fedrl.config import SERVER_LR_END
from fedrl.features.compat import Feature, Rule, setting

_SERVER_OPTIMIZERS = tuple(o for o in OPTIMIZERS if o != "fedavg")
_BEYOND_FEDPROX = ("server-optimizer", "robust-rule", "asynchronous-rule", "local")  # every strategy.name but these two

# strategy.name = fedavg is the default and the baseline: every feature combines with it.
STRATEGIES = (
    setting("fedprox", "strategy.name", "fedprox"),
    setting("server-optimizer", "strategy.name", *_SERVER_OPTIMIZERS),
    setting("local", "strategy.name", "local"),
    setting("fedasync", "strategy.name", "fedasync", excludes=(Rule(
        ("privacy",), "privacy.mode", "each update moves the model on arrival, with no sum to noise (DP-FedBuff has one)",
        lambda cfg: "strategy.name = fedasync does not combine with privacy.mode: each update moves the model on "
                    "arrival, with no sum to noise; use strategy.name = fedbuff (DP-FedBuff)"),)),
)


def _unless(topology: str, why: str, features: tuple[str, ...], key: str) -> Rule:
    return Rule(features, key, why, lambda cfg: f"topology.name = {topology} does not combine with {key} yet: {why}")


def _asynchronous(features: tuple[str, ...], key: str, why: str) -> Rule:
    return Rule(features, key, why,
                lambda cfg: f"strategy.name = {cfg.strategy.name} does not combine with {key}: {why}")


_GOSSIP_CLEAR = ("nodes exchange models (or compressed differences to their public copies) in the clear, and "
                 "per-node observation statistics are not mixed")

AGGREGATION = (
    Feature("robust-edge-rule", "topology.edge-rule", "topology.edge-rule is a robust rule",
            lambda cfg: cfg.topology.name == "hierarchical" and cfg.topology.edge_rule != "fedavg", excludes=(Rule(
                ("privacy",), "topology.edge-rule", "the noise is calibrated to the sensitivity of a sum, not of a "
                "robust rule",
                lambda cfg: f"topology.edge-rule = {cfg.topology.edge_rule} with privacy.mode = {cfg.privacy.mode}: "
                            "the noise is calibrated to the sensitivity of a sum, not of a robust rule; use fedavg"),
                Rule(("secagg",), "topology.edge-rule", "a robust rule looks at each update, which masking hides",
                     lambda cfg: f"topology.edge-rule = {cfg.topology.edge_rule} with secagg.enabled = true: a robust "
                                 "rule looks at each update (medians, distances), which masking hides; use fedavg"))),
    setting("robust-rule", "strategy.name", *ROBUST_RULES, excludes=(Rule(
        ("privacy",), "strategy.name", "the noise is calibrated to the sensitivity of a sum, not of a robust rule",
        lambda cfg: f"{cfg.strategy.name} with privacy.mode = {cfg.privacy.mode}: the noise is calibrated to the "
                    "sensitivity of a sum, not of a robust rule"),)),
    setting("gossip", "topology.name", "gossip", excludes=(
        Rule(_BEYOND_FEDPROX, "strategy.name", "there is no server model to step or robustly aggregate; nodes mix "
             "with Metropolis-Hastings weights",
             lambda cfg: f"topology.name = gossip with strategy.name = {cfg.strategy.name}: there is no server model "
                         "to step or robustly aggregate; nodes mix with Metropolis-Hastings weights (use fedavg, or "
                         "fedprox for its local term)"),
        Rule(("partial-rounds",), "fraction-train", "gossip trains and mixes every node every round",
             lambda cfg: f"topology.name = gossip trains and mixes every node every round; fraction-train = "
                         f"{cfg.fraction_train:g} selects only {cfg.nodes_per_round} of {cfg.nodes.count}"),
        _unless("gossip", _GOSSIP_CLEAR, ("secagg",), "secagg.enabled"),
        Rule(("privacy-central", "privacy-distributed"), "privacy.mode", "there is no server sum to noise: each "
             "node's model goes to its neighbours (local DP noises it on the node)",
             lambda cfg: f"topology.name = gossip with privacy.mode = {cfg.privacy.mode}: there is no server sum to "
                         "noise, each node's model goes to its neighbours; use privacy.mode = local"),
        Rule(("error-feedback", "ef21"), "compression.error-feedback", "compressed gossip keeps public copies "
             "(CHOCO), which already resend what compression dropped",
             lambda cfg: f"topology.name = gossip with compression.error-feedback = "
                         f"{cfg.compression.error_feedback}: compressed gossip keeps public copies (CHOCO), which "
                         "already resend what compression dropped; use auto or off"),
        _unless("gossip", _GOSSIP_CLEAR, ("downlink-compression",), "compression.down"),
        _unless("gossip", _GOSSIP_CLEAR, ("norm-obs",), "algo.norm-obs"),
    )),
    setting("hierarchical", "topology.name", "hierarchical", excludes=(
        Rule(("norm-obs",), "algo.norm-obs", "the nodes' own statistics are not merged across edges and cloud "
             "(algo.norm-obs = server keeps the cloud model's)",
             lambda cfg: "topology.name = hierarchical does not merge the nodes' own observation statistics across "
                         "edges and cloud; use algo.norm-obs = server (statistics of the cloud model, no node data) "
                         "or off"),
        Rule(_BEYOND_FEDPROX, "strategy.name", "edges and cloud average (FedAvg with strategy.server-lr)",
             lambda cfg: f"topology.name = hierarchical with strategy.name = {cfg.strategy.name}: edges and cloud "
                         "average (FedAvg with strategy.server-lr); use fedavg or fedprox"),
        Rule(("privacy-distributed",), "privacy.mode", "each node's noise is sized for one secure sum of every "
             "selected node; an edge's sum would hold only its part of it",
             lambda cfg: "topology.name = hierarchical with privacy.mode = distributed: each node's noise is sized for "
                         "one secure sum of every selected node, and an edge's sum would hold only its part of it; "
                         "use privacy.mode = central (DP at the edge)"),
        Rule(("privacy-adaptive-clip",), "privacy.adaptive-clip", "each edge releases its own noised sum; one "
             "clip norm moved by several edges a round is not supported",
             lambda cfg: "topology.name = hierarchical with privacy.adaptive-clip: each edge releases its own noised "
                         "sum, and one clip norm moved by several edges a round is not supported"),
        Rule(("privacy-audit",), "privacy.audit-canaries", "each edge releases its own noised sum; the audit plants "
             "canaries in one",
             lambda cfg: "topology.name = hierarchical with privacy.audit-canaries: each edge releases its own noised "
                         "sum, and the audit plants its canaries in one server sum"),
    )),
    setting("asynchronous-rule", "strategy.name", *ASYNC_RULES, excludes=(
        _asynchronous(("fraction-train",), "fraction-train", "asynchronous rules dispatch every idle node (bound it "
                      "with strategy.concurrency)"),
        _asynchronous(("round-robin-selection", "deadline-selection", "poisson-selection"), "selection.name", "asynchronous rules "
                      "dispatch nodes as they become idle, not by a per-round selection"),
        _asynchronous(("secagg",), "secagg.enabled", "secure aggregation needs a round's nodes to finish together"),
        _asynchronous(("ef21",), "compression.error-feedback", "EF21's server memory advances with synchronous "
                      "rounds (classic error feedback, on, keeps the residual on the node)"),
        _asynchronous(("downlink-compression",), "compression.down", "compressed downlinks are not combined with "
                      "asynchronous rules yet"),
        _asynchronous(("hierarchical", "gossip"), "topology.name", "asynchronous rules step one server model"),
    )),
    setting("deadline-selection", "selection.name", "deadline", requires=(Rule(
        ("round-deadline",), "round.deadline-s", "it learns which nodes miss the deadline",
        lambda cfg: "selection.name = deadline learns which nodes miss the deadline; set round.deadline-s > 0"),)),
    Feature("round-deadline", "round.deadline-s", "round.deadline-s > 0", lambda cfg: cfg.round.deadline_s > 0,
            excludes=(
                Rule(("asynchronous-rule",), "round.deadline-s", "there are no rounds to be late for",
                     lambda cfg: f"strategy.name = {cfg.strategy.name} has no rounds to be late for; round.timeout-s "
                                 "bounds a node's silence"),
            )),
)


def _no_server_step(feature: str, which: str) -> Rule:
    return Rule((feature,), "strategy.server-lr-end", "there is no server step to anneal",
                lambda cfg: f"anneals the server's step, but {which} has none; leave it at -1")


SCHEDULE = (
    Feature("server-lr-schedule", "strategy.server-lr-end",
            f"strategy.server-lr-end is neither -1 nor the default {SERVER_LR_END:g}",
            lambda cfg: cfg.strategy.server_lr_end >= 0 and cfg.strategy.server_lr_end != SERVER_LR_END, excludes=(
                _no_server_step("local", "strategy.name = local"),
                _no_server_step("fedasync", "strategy.name = fedasync (it mixes, no server step)"),
                _no_server_step("gossip", "topology.name = gossip (nodes step themselves)"),
            )),
    Feature("model-average", "strategy.ema", "strategy.ema > 0", lambda cfg: cfg.strategy.ema > 0, excludes=(
        Rule(("local", "gossip"), "strategy.ema", "each node keeps its own model: there is no server model to average",
             lambda cfg: "averages the server's models, but "
                         + ("strategy.name = local" if cfg.strategy.name == "local" else "topology.name = gossip")
                         + " keeps one model per node; leave it at 0"),
    )),
)
