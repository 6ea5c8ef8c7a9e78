"""The privacy settings of a run, checked and resolved once before round 1."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from fedrl.compression.ring_codes import RingCoding
from fedrl.config import Config, node_statistics_travel
from fedrl.config.schedule import linear
from fedrl.errors import ConfigError
from fedrl.privacy.accounting import Ledger, epsilon_after, noise_for_target
from fedrl.privacy.clipping import Parts, parts_for
from fedrl.privacy.crowd import crowd_sentence
from fedrl.privacy.skellam import SkellamCoding, SkellamLedger, coding_for, z_for_target
from fedrl.secagg.params import threshold_count

if TYPE_CHECKING:
    from torch import nn

    from fedrl.rl.dpsgd import SampleDP

DISTRIBUTED_BITS = 24  # default ring width under distributed DP (secagg.bits = 0)


@dataclass(frozen=True)
class PrivacyPlan:
    """``z`` is the noise multiplier in use (given or derived), ``q`` the sampling rate accounted."""

    mode: str
    clip: float
    z: float
    q: float
    delta: float
    accountant: str
    budget: float | None  # stop before a round that would take ε above this
    note: str  # what the accounting assumes, for the run's first lines
    adaptive: bool = False
    quantile: float = 0.5
    clip_lr: float = 0.2
    count_std: float = 0.0  # noise std on the count of unclipped updates (adaptive clipping)
    audit: int = 0  # canaries of the one-run audit (0: no audit)
    no_noise: bool = False  # privacy.unsafe-no-noise: the audit's negative control
    dist: SkellamCoding | None = None  # distributed mode: the ring coding every party uses
    ring_slack: float = 0.0  # central mode under secagg: how far quantization may move a clipped update (L2)
    clip_end: float = -1.0  # privacy.clip-norm-end: the last round's clip norm (-1: constant)
    rounds: int = 1  # num-server-rounds: where the schedule ends
    parts: Parts = ()  # privacy.actor-share: the update's parts, clipped apart (fedrl.privacy.clipping)

    def clip_at(self, rnd: int) -> float:
        """Round ``rnd``'s clip norm: ``clip``, or with ``privacy.clip-norm-end`` annealed linearly
        to ``clip_end`` by the last round. Why: under ``ppo.anneal-lr`` the nodes' updates shrink
        toward 0 while noise of std z C does not, so late rounds release mostly noise. The schedule
        depends on the config alone, so every round is still a Gaussian mechanism with multiplier
        z on a sum of sensitivity ``clip_at(rnd)`` (plus ``ring_slack``): the same ε."""
        return linear(self.clip, self.clip_end, rnd, self.rounds)

    def sensitivity_at(self, clip: float) -> float:
        """How far (L2) one node clipped at ``clip`` can move the released sum: + its codes' rounding under secagg."""
        return clip + self.ring_slack

    @property
    def sensitivity(self) -> float:  # at the first round's clip norm
        return self.sensitivity_at(self.clip)

    def new_ledger(self) -> Ledger | SkellamLedger:
        """An empty ledger of the run's mechanism (Gaussian: Opacus; distributed: Skellam RDP)."""
        return SkellamLedger(self.dist, self.delta) if self.dist is not None else Ledger(self.accountant, self.delta)

    def next_round_cost(self) -> tuple[float, float]:
        """What one more round adds to the ledger at worst: (z, q), or (Skellam mu, q) with the fewest
        nodes' noise in the sum."""
        return (self.dist.mu, self.q) if self.dist is not None else (self.z, self.q)

    @property
    def z_update(self) -> float:
        """Noise multiplier on the update sum. With adaptive clipping the count of unclipped updates
        is released too; Andrew et al. (2021, Thm. 1) show the pair is as private as one Gaussian
        mechanism with multiplier z when z_update = (z^-2 - (2 count_std)^-2)^(-1/2)."""
        if not self.adaptive:
            return self.z
        return float((self.z ** -2 - (2 * self.count_std) ** -2) ** -0.5)

    def line(self, rounds: int) -> str:
        if self.dist is not None:
            d = self.dist
            eps = d.epsilon([(d.mu, rounds)], self.delta)
            return (f"privacy: distributed DP (each node adds Skellam noise inside the secure-aggregation ring), "
                    f"clip-norm {self.clip:g}, scale {d.scale:.4g} in a {d.bits}-bit ring, noise multiplier "
                    f"{d.z:.4g} with {d.share} of {d.nodes} nodes in a sum (more nodes: more noise), sensitivity "
                    f"after rounding {d.l2:.6g}, Skellam RDP accounting: ε ≤ {eps:.3g} at δ = {self.delta:g} after "
                    f"{rounds} rounds{'; budget ε ≤ ' + format(self.budget, 'g') if self.budget else ''}. {self.note}")
        eps = epsilon_after(self.z, self.q, rounds, self.delta, self.accountant)
        where = "the server adds noise to the sum" if self.mode == "central" else "each node noises its own update"
        if self.ring_slack:
            where = (f"nodes clip, the server adds noise to the securely summed updates; their {self.ring_slack:.3g} of "
                     f"rounding after quantization counts in the sensitivity {self.sensitivity:.4g}, the noise "
                     f"std is z x {self.sensitivity:.4g}{' in round 1' if self.clip_end >= 0 else ''}")
        clip = (f"clip-norm adaptive from {self.clip:g} (quantile {self.quantile:g}, count noise {self.count_std:.3g}, "
                f"update noise multiplier {self.z_update:.4g})" if self.adaptive else f"clip-norm {self.clip:g}")
        if self.clip_end >= 0:
            clip += (f" annealed linearly to {self.clip_end:g} by round {self.rounds} (the noise with it; a public "
                     "schedule, no ε cost)")
        return (f"privacy: {self.mode} DP ({where}), {clip}, noise multiplier {self.z:.4g}, "
                f"sampling rate {self.q:g}, {self.accountant} accountant: ε = {eps:.3g} at δ = {self.delta:g} "
                f"after {rounds} rounds{'; budget ε ≤ ' + format(self.budget, 'g') if self.budget else ''}. "
                f"{self.note}"
                + (f" Audit: {self.audit} canary updates." if self.audit else "")
                + (" UNSAFE: privacy.unsafe-no-noise is on, no noise is added and this ε is FALSE." if self.no_noise
                   else ""))


def plan_for(cfg: Config, continuous: bool, dim: int, *, crowd: bool = True,
             layout: Sequence[tuple[str, int]] = ()) -> PrivacyPlan | None:
    """The run's privacy plan (None when ``privacy.mode = off``); ``continuous``: the env's actions are;
    ``dim``: the policy's number of parameters; ``layout``: its weights' names and sizes in order
    (needed by ``privacy.actor-share``). ``crowd``: end the note with the noise-to-signal
    sentence (the server and ``fedrl check`` print it; a node's plan leaves it out, since under
    gossip it builds the graph's mixing matrix, 0.5 s at 1,000 nodes on the complete graph).

    Raises:
        ConfigError: naming the key, for settings that cannot give the promised guarantee.
    """
    p = cfg.privacy
    if p.mode == "off":
        if p.audit_canaries > 0 or p.unsafe_no_noise:
            key = "privacy.audit-canaries" if p.audit_canaries > 0 else "privacy.unsafe-no-noise"
            raise ConfigError(key, "is set but privacy.mode = off: there is no DP run to audit")
        if p.target_epsilon > 0 or p.noise_multiplier > 0:
            key = "privacy.target-epsilon" if p.target_epsilon > 0 else "privacy.noise-multiplier"
            raise ConfigError(key, "is set but privacy.mode = off, so no noise would be added; set privacy.mode "
                               "= central or local, or leave it at 0")
        return None
    if p.noise_multiplier == 0 and p.target_epsilon == 0:
        raise ConfigError("privacy.noise-multiplier", f"privacy.mode = {p.mode} needs noise: set "
                                                  "privacy.noise-multiplier > 0 or privacy.target-epsilon > 0")
    if cfg.secagg.enabled and p.mode == "local":
        raise ConfigError("privacy.mode", "privacy.mode = local with secagg.enabled = true: the server sees only "
                                      "the masked sum; use privacy.mode = central (nodes clip, the server noises the "
                                      "sum) or distributed (noise added inside the ring)")
    if p.mode == "distributed" and not cfg.secagg.enabled:
        raise ConfigError("privacy.mode", "privacy.mode = distributed needs secagg.enabled = true: the nodes' noise "
                                      "shares protect only a sum the server cannot see unmasked")
    if cfg.strategy.name == "local":
        raise ConfigError("privacy.mode", "privacy.mode with strategy.name = local: there is no aggregate to protect")
    _check_clip_schedule(cfg)
    parts = parts_for(p, layout)
    if node_statistics_travel(cfg.algo.norm_obs, continuous):
        raise ConfigError("algo.norm-obs", f"privacy.mode = {p.mode} with observation normalization on "
                                       "(algo.norm-obs; auto is on for continuous actions): each node's observation "
                                       "statistics would travel without noise; set algo.norm-obs = off")
    # Selection draws a fixed number of nodes without replacement (Federation.select), not the
    # Poisson sampling the accountants assume, so no amplification is claimed.
    q = 1.0
    note = ("Every node takes part in every round (sampling rate 1)." if cfg.fraction_train >= 1 else
            f"fraction-train = {cfg.fraction_train:g} draws a fixed number of nodes without replacement, not the "
            "Poisson sampling the accountant assumes: no amplification by sampling is claimed (rate 1); "
            "selection.name = poisson would claim it.")
    rounds = cfg.num_server_rounds
    if cfg.selection.name == "poisson" and cfg.fraction_train < 1:
        q = cfg.fraction_train
        n = cfg.nodes.count
        empty = rounds * (1 - q) ** n  # at most this likely that some round draws nobody
        if p.mode == "distributed":
            raise ConfigError("selection.name", "selection.name = poisson with privacy.mode = distributed: each "
                                                "node's noise share is sized for a fixed number of nodes per round; "
                                                "use uniform selection, or privacy.mode = central")
        if empty > 0.01 * p.delta:
            raise ConfigError("fraction-train", f"selection.name = poisson draws nobody in some round with "
                                                f"probability up to {empty:.3g} (fraction-train = {q:g}, {n} "
                                                f"nodes, {rounds} rounds); such a round releases nothing, which the "
                                                f"accountant does not cover unless it is far below δ = {p.delta:g}: "
                                                "raise fraction-train or nodes.count")
        note = (f"Poisson sampling: each node joins a round independently with probability {q:g}, drawn from the "
                "OS's randomness, as the accountant assumes (amplification by sampling is claimed); the noised sum "
                f"is divided by the expected {q * n:g} nodes. A round that draws nobody (probability at most "
                f"{empty:.2g} over the run) releases nothing.")
    if cfg.topology.name == "hierarchical" and p.mode == "central":
        note += (f" DP at the edge: each of the {cfg.topology.edges} edges adds the noise to the sum of its own nodes"
                 f"{' (its secure sum)' if cfg.secagg.enabled else ''} and divides by its part of the selected nodes; "
                 "the edges' nodes are disjoint, so a round is one mechanism per node (one ledger step), and the "
                 "cloud only averages released edge models (post-processing).")
    z, budget = p.noise_multiplier, (p.target_epsilon or None)
    if p.mode == "distributed":
        return _distributed(cfg, dim, q, note, z, budget)
    if z == 0:
        try:
            z = noise_for_target(p.target_epsilon, p.delta, q, rounds, p.accountant)
        except ValueError:
            raise ConfigError("privacy.target-epsilon", f"ε = {p.target_epsilon:g} at δ = {p.delta:g} cannot be met "
                                                    f"over {rounds} rounds by any noise multiplier Opacus tries; "
                                                    "raise the target or lower num-server-rounds")
    elif budget is not None and epsilon_after(z, q, 1, p.delta, p.accountant) > budget:
        raise ConfigError("privacy.target-epsilon", f"one round with noise multiplier {z:g} already costs "
                                                f"ε = {epsilon_after(z, q, 1, p.delta, p.accountant):.3g} > "
                                                f"{budget:g}; raise privacy.noise-multiplier or the target")
    count_std = 0.0
    if p.adaptive_clip:
        if p.mode != "central":
            raise ConfigError("privacy.adaptive-clip", f"needs privacy.mode = central (got {p.mode}): each node's "
                                                       "clipped-or-not bit is noised by the server")
        count_std = p.count_noise or cfg.nodes_per_round / 20
        if 2 * count_std <= z:
            raise ConfigError("privacy.count-noise", f"the count noise {count_std:.3g} must exceed half the noise "
                                                     f"multiplier ({z:.3g} / 2) so that the update noise can make up "
                                                     "the rest (Andrew et al. 2021); raise privacy.count-noise")
    _check_audit(cfg)
    slack = 0.0
    if cfg.secagg.enabled:
        for key, on in (("privacy.adaptive-clip", p.adaptive_clip), ("privacy.audit-canaries", p.audit_canaries > 0)):
            if on:
                raise ConfigError(key, "is not supported with privacy.mode = central and secagg.enabled = true (the "
                                       "server sees only the sum)")
        slack = ring_slack(cfg, dim)
    plan = PrivacyPlan(p.mode, p.clip_norm, z, q, p.delta, p.accountant, budget, note, p.adaptive_clip,
                       p.target_quantile, p.clip_lr, count_std, p.audit_canaries, p.unsafe_no_noise,
                       ring_slack=slack, clip_end=p.clip_norm_end, rounds=rounds, parts=parts)
    return replace(plan, note=f"{note} {crowd_sentence(cfg, dim, plan.z_update, plan.sensitivity)}") if crowd else plan


def _check_clip_schedule(cfg: Config) -> None:
    """``privacy.clip-norm-end`` follows the server's rounds with one fixed clip norm each (DP-FedBuff:
    its steps, each buffered update clipped again to the releasing step's; FedAsync refuses DP)."""
    p = cfg.privacy
    if p.clip_norm_end < 0:
        return
    why = ("privacy.mode = distributed: each node's noise share is sized for one clip norm" if p.mode == "distributed"
           else "privacy.adaptive-clip = true: the clip norm already follows the updates" if p.adaptive_clip else "")
    if why:
        raise ConfigError("privacy.clip-norm-end", f"is a per-round schedule and cannot be used with {why}; "
                                                   "set it to -1 (a constant clip norm)")


def ring_slack(cfg: Config, dim: int) -> float:
    """Central DP under secure aggregation: how much farther than its clip norm a node's quantized
    update can reach (L2). Stochastic rounding moves each of the ``dim`` coordinates by less than
    one step ``2 r / L`` (``r`` = ``secagg.clip-range``, ``L = 2^bits - 1``), so by less than
    ``2 r sqrt(dim) / L`` in all; clipping coordinates to ``[-r, r]`` only shortens it. The server
    noises the sum for ``clip + slack`` (triangle inequality), so the guarantee holds for any codes."""
    return RingCoding.for_config(cfg).step * math.sqrt(dim)


def _distributed(cfg: Config, dim: int, q: float, note: str, z: float, budget: float | None) -> PrivacyPlan:
    p, sa = cfg.privacy, cfg.secagg
    for key, on in (("privacy.adaptive-clip", p.adaptive_clip), ("privacy.audit-canaries", p.audit_canaries > 0),
                    ("privacy.unsafe-no-noise", p.unsafe_no_noise)):
        if on:
            raise ConfigError(key, "is not supported with privacy.mode = distributed (the server sees only the sum)")
    bits = sa.bits or DISTRIBUTED_BITS
    if not 16 <= bits <= 32:
        raise ConfigError("secagg.bits", f"privacy.mode = distributed needs a ring of 16 to 32 bits (got {bits}; "
                                         f"0: {DISTRIBUTED_BITS}): the noise and the scaled updates must fit")
    n = cfg.nodes_per_round
    share = threshold_count(sa.threshold, sa.neighbors + 1 if sa.neighbors else n)  # fewest nodes in an unmasked sum
    rounds = cfg.num_server_rounds
    try:
        if z == 0:
            z = z_for_target(p.target_epsilon, p.delta, rounds, bits, p.clip_norm, dim, n, share)
        coding = coding_for(bits, p.clip_norm, dim, n, share, z)
    except ValueError as err:
        key = "privacy.target-epsilon" if p.noise_multiplier == 0 else "secagg.bits"
        raise ConfigError(key, f"distributed DP: {err}") from err
    if budget is not None and coding.epsilon([(coding.mu, 1)], p.delta) > budget:
        raise ConfigError("privacy.target-epsilon", f"one round with noise multiplier {z:g} already costs more than "
                                                    f"ε = {budget:g}; raise privacy.noise-multiplier or the target")
    note += (f" Each node adds 1/{share} of the noise, so any sum the secure aggregation can unmask ({share} or more "
             "nodes) has at least the accounted noise.")
    return PrivacyPlan(p.mode, p.clip_norm, coding.z, q, p.delta, "skellam", budget, note, dist=coding)


def sample_plan(cfg: Config, model: nn.Module) -> SampleDP | None:
    """DP-SGD settings for local training (None when ``privacy.dpsgd`` is off), checked before round 1
    by the algorithm that runs it (``Algorithm.sample_dp``: a learner without a DP-SGD update refuses).

    Raises:
        ConfigError: naming the key, for settings the algorithm cannot make private.
    """
    from fedrl.registry.algorithms import get

    return get(cfg.algo.name).sample_dp(cfg, model)


def _check_audit(cfg: Config) -> None:
    p = cfg.privacy
    if p.unsafe_no_noise and p.audit_canaries == 0:
        raise ConfigError("privacy.unsafe-no-noise", "is only for checking the privacy audit and needs "
                                                     "privacy.audit-canaries > 0")
    if p.audit_canaries == 0:
        return
    if p.mode != "central":
        raise ConfigError("privacy.audit-canaries", f"the audit plants canaries in the server's noisy sum: it needs "
                                                    f"privacy.mode = central (got {p.mode})")
    if p.adaptive_clip:
        raise ConfigError("privacy.audit-canaries", "with privacy.adaptive-clip = true is not supported: the "
                                                    "canaries would move the clip norm; audit a fixed clip norm")
    if p.audit_canaries < 2:
        raise ConfigError("privacy.audit-canaries", f"needs at least 2 canaries (got {p.audit_canaries}); "
                                                    "hundreds give a useful bound")
