"""The sections of the run configuration that shape what an update goes through: the server
strategy, the topology, compression, secure aggregation and privacy (``fedrl.config.sections``
has the experiment's sections; ``fedrl.config`` parses them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fedrl.compression.compressors import check_down, check_up
from fedrl.config import checks as ck
from fedrl.config.sections import opt
from fedrl.registry.rules import check_name as check_rule

# The default end of the server step's schedule (issue 13): 2 -> 0.5 kept the final model solved in
# the stability benchmark (docs/stability.md), where a constant 2 let solved policies collapse late.
SERVER_LR_END = 0.5


@dataclass(frozen=True)
class StrategyConfig:
    name: str = opt(
        "strategy.name", "fedavg",
        "fedavg, fedprox (client proximal term), server optimizers fedavgm, fedadagrad, fedadam, fedyogi (Reddi et "
        "al. 2021), robust rules median, trimmed-mean, krum, multi-krum, asynchronous fedbuff, fedasync, local "
        "(no aggregation), or a rule registered in fedrl.registry.rules", check_rule)
    server_lr: float = opt("strategy.server-lr", "auto",
                           "server step on the mean delta (1: plain FedAvg; adaptive optimizers want about 0.01; gossip: each "
                           "node's step on its own update before mixing); auto: 2 for ppo, 1 for the replay learners "
                           "dqn and sac (docs/algorithms.md, 'Server step')",
                           ck.positive, auto=True)
    server_lr_end: float = opt("strategy.server-lr-end", "auto",
                               "server-lr in the last round, annealed linearly from strategy.server-lr in round 1; "
                               "never raises the step (the end is min(this, server-lr)); -1: constant. Used by the "
                               "server step of the star, hierarchical and fedbuff rules; auto: 0.5 for ppo, -1 for dqn "
                               "and sac", ck.off_or_non_negative, auto=True)
    ema: float = opt("strategy.ema", 0.0,
                     "keep, evaluate and save an exponential moving average of the server model with this decay "
                     "(bias-corrected; 0.9 weighs about the last 10 rounds; 0: off, the latest model). Training "
                     "still steps from the latest model; under DP the average is post-processing and costs no "
                     "epsilon (fedrl.server.iterate_average); under fedasync, whose model is mostly the last node's, 0.9 kept "
                     "heterogeneous CartPole solved (docs/aggregation.md)", ck.decay)
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
    consensus_step: str = opt("topology.consensus-step", "auto",
                              "gossip: CHOCO's consensus step γ towards the neighbours' public copies, in (0, 1] "
                              "(1: plain gossip), or auto: 1 uncompressed, else the γ at which CHOCO's consensus "
                              "contracts fastest for this graph and compressor (fedrl.topology.consensus_step; "
                              "e.g. 0.18 for topk at 5% on a ring, 1 for 8-bit quantize)", ck.step_or_auto)


@dataclass(frozen=True)
class CompressionConfig:
    up: str = opt("compression.up", "none",
                  "uplink compressor: none (float32 weights), fp16, bf16, quantize, qsgd, topk, randk, sign, powersgd, "
                  "or one registered in fedrl.compression.compressors", check_up)
    down: str = opt("compression.down", "none",
                    "downlink: none (full weights) or a compressor for the global-model delta (any but powersgd)",
                    check_down)
    bits: int = opt("compression.bits", 8, "quantize: bits per coordinate", ck.bits)
    fraction: float = opt("compression.fraction", 0.01, "topk/randk: fraction of coordinates kept", ck.unit_open_closed)
    levels: int = opt("compression.levels", 16, "qsgd: quantization levels s", ck.positive)
    chunk: int = opt("compression.chunk", 0, "quantize: one scale per chunk of this many coordinates (0: per update)",
                     ck.non_negative)
    rank: int = opt("compression.rank", 2, "powersgd: rank of each weight matrix's factors", ck.positive)
    factor_bits: int = opt("compression.factor-bits", 0,
                           "powersgd: quantize factors and vectors to this many bits (0: send float32)", ck.off_or_bits)
    error_feedback: Literal["auto", "on", "ef21", "off"] = opt(
        "compression.error-feedback", "auto",
        "on: resend what a compressor dropped (EF-SGD); ef21: compress the change of each node's update "
        "(EF21); auto: on for topk, sign and powersgd")



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
    clip_norm_end: float = opt(
        "privacy.clip-norm-end", -1.0,
        "central or local: the clip norm in the last round, annealed linearly from privacy.clip-norm in round 1, so "
        "the noise (z x the clip norm) shrinks as the updates do under ppo.anneal-lr; a public schedule, no ε cost "
        "(-1: constant)", ck.off_or_positive)
    actor_share: float = opt(
        "privacy.actor-share", 0.0,
        "central or local, ppo: clip the actor's and the critic's parts of an update apart, the actor to "
        "C sqrt(s) and the critic to C sqrt(1 - s), so the whole stays within C (same ε) and the critic's larger "
        "update no longer takes the actor's share of the clip (0: one clip on the whole update)", ck.off_or_unit_open)
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
                      "one rollout segment (ppo.num-steps transitions of one env copy)")
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

