"""The server side of a federation, without Flower: a thin coordinator of its components.

``Federation`` moves data between its components and makes no aggregation decision itself:
the **server rule** (``fedrl.rules``: the models it keeps, their observation statistics, its
server step; central DP wraps it), **selection** (``fedrl.server.selection``), **compression** (the
uplink stage and EF21's memory decode replies; one downlink broadcaster per model slot),
**privacy** (``fedrl.privacy.server``), **evaluation** (``fedrl.server.evaluation``) and the run's
**counters**. The Flower loops in ``fedrl.flower`` only move its plans and replies over the
wire; the checkpoint is the union of the components' states (``fedrl.server.snapshot``).

Observation normalization federates as pooled statistics: nodes train with the server's
statistics merged with what they see, report only this round's moments, and the rule merges
them exactly (``Moments.merge``) into what it broadcasts next round and evaluates with.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from fedrl.aggregation.fedavg import delta_of
from fedrl.compression.downlink import Broadcaster, Downlink
from fedrl.compression.ef21 import ServerEF21
from fedrl.compression.pipeline import decompress, stage, uplink_scale
from fedrl.config import Config
from fedrl.errors import ConfigError
from fedrl.experiment import initial_weights, policy_spec, variants_of
from fedrl.inject.attacks import attackers
from fedrl.model.layout import flatten, unflatten
from fedrl.privacy.audit import AuditResult
from fedrl.privacy.plan import plan_for
from fedrl.privacy.server import ServerPrivacy
from fedrl.registry import rules as registry
from fedrl.registry.algorithms import get as algorithm
from fedrl.rl.networks import weight_layout, weight_names
from fedrl.rl.train import uses_norm
from fedrl.rules.asynchronous import Asynchronous
from fedrl.rules.base import Model, RuleSetup, ServerRule, Update
from fedrl.rules.private import Private
from fedrl.server import guards, secure_sum
from fedrl.server.counters import Counters
from fedrl.server.evaluation import Evaluation
from fedrl.server.iterate_average import IterateAverage
from fedrl.server.selection import Selector
from fedrl.topology.gossip import Mix
from fedrl.wire import LocalPlan, Reply

log = logging.getLogger("fedrl")


class Federation:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.algorithm = algorithm(cfg.algo.name)
        self.variants = variants_of(cfg)
        self.spec = policy_spec(cfg, self.variants[0])
        make_model = self.algorithm.model_for(cfg)
        template = make_model(self.spec)
        self.names = weight_names(template)
        w0 = initial_weights(self.spec, cfg.seed, make_model)
        self.n_params = int(sum(w.size for w in w0))
        self.obs_on = uses_norm(cfg.algo.norm_obs, self.spec)
        # algo.norm-obs = server: the statistics come from the server's own rollouts (begin_round)
        self.obs_from_server = self.obs_on and cfg.algo.norm_obs == "server"
        self.obs_travel = self.obs_on and not self.obs_from_server  # replies carry the nodes' statistics
        self.privacy = plan_for(cfg, self.spec.action_kind == "continuous", self.n_params,
                                layout=weight_layout(template))
        self.dp = ServerPrivacy(self.privacy, self.n_params) if self.privacy is not None else None
        self.selector = Selector(cfg)
        rule = registry.build(RuleSetup(cfg, w0, self.spec.obs_dim if self.obs_on else None, self.variants,
                                        frozenset(attackers(cfg))))
        if self.dp is not None and not (rule.privatizable or cfg.privacy.mode in rule.own_privacy):
            # never a silent non-private run (fedrl.features.components refuses it before round 1 too)
            raise ConfigError("strategy.name", f"{rule.label()} with privacy.mode = {cfg.privacy.mode}: "
                                               f"{rule.not_privatizable}")
        self.rule: ServerRule = Private(rule, self.dp, self.dp_denominator) \
            if self.dp is not None and rule.privatizable else rule
        rule.use_privacy(self.dp, self.dp_denominator)  # rules that apply DP themselves (FedBuff, gossip, edges)
        self.up = stage(cfg.compression, "up", [w.shape for w in w0], compensated=cfg.topology.name == "gossip")
        self.down = stage(cfg.compression, "down")
        self.casts = [Broadcaster(self.down, m, cfg.seed, s) for s, m in enumerate(self.rule.models)]
        self.holds: dict[int, int] = {}  # node -> round of the broadcast it holds (downlink compression)
        self.ef21 = ServerEF21(self.up, self.n_params) if self.up.ef21 else None
        self.evaluation = Evaluation(cfg, self.spec, self.variants, make_model)
        self.counters = Counters()
        # strategy.ema: the model the run keeps, evaluates and saves is an average of the server's models
        self.average = IterateAverage(cfg.strategy.ema) if cfg.strategy.ema > 0 else None
        self.round = 0
        self.run_uid = secrets.token_hex(8)  # kept in the checkpoint: a resumed run is the same run
        self.failed: str | None = None  # why the last aggregation was undone (take_failure)
        self.round_clip = self.clip  # the DP clip norm of the round begun last (begin_round)

    # --- what other modules read ---------------------------------------------------------
    @property
    def models(self) -> list[Model]:
        """The rule's model slots (read-only for callers)."""
        return self.rule.models

    @property
    def moments(self) -> list[Any]:
        return self.rule.moments

    @property
    def per_node(self) -> bool:
        return self.rule.per_node

    @property
    def asyn(self) -> Asynchronous | None:
        """The asynchronous rule (fedbuff, fedasync), or None: rounds have a barrier."""
        return self.rule if isinstance(self.rule, Asynchronous) else None

    @property
    def kwargs(self) -> dict[str, object]:
        return self.evaluation.kwargs

    @property
    def heldout(self) -> list[dict[str, float]]:
        return self.evaluation.heldout

    @property
    def target(self) -> float | None:
        return self.evaluation.target

    @property
    def exchange_kind(self) -> str:
        """How rounds travel: ``asynchronous`` (the rule steps as replies arrive), ``secure`` (the
        server sees only sums, ``secagg.enabled``) or ``plain``."""
        if self.asyn is not None:
            return "asynchronous"
        return "secure" if self.cfg.secagg.enabled else "plain"

    @property
    def obs_dim(self) -> int:
        """The observation size replies' statistics must have."""
        return int(self.spec.obs_dim)

    def privacy_line(self) -> str | None:
        """The run's privacy plan in one line (None without DP)."""
        return None if self.privacy is None else self.privacy.line(self.cfg.num_server_rounds)

    # --- the wire's counters (fedrl.server.counters) -----------------------------------------
    def count_sent(self, nbytes: int) -> None:
        self.counters.sent(nbytes)

    def count_received(self, nbytes: int) -> None:
        self.counters.received(nbytes)

    def ran(self, seconds: float) -> None:
        self.counters.ran(seconds)

    @property
    def clip(self) -> float:
        """This round's DP clip norm (adaptive clipping moves it; 0 without DP)."""
        return self.dp.clip if self.dp is not None else 0.0

    # --- planning -------------------------------------------------------------------------
    def select(self, rnd: int) -> list[int]:
        """Nodes trained in round ``rnd`` (``fedrl.server.selection``)."""
        return self.selector.select(rnd)

    def dp_denominator(self, rnd: int) -> float:
        """What DP-FedAvg divides the noised sum by: the nodes selected for round ``rnd`` (a fixed
        number), or with poisson selection their expected number q n, which does not depend on
        who was drawn."""
        return self.selector.expected()

    def slot(self, node: int) -> int:
        """The model slot a node trains from (the rule's: its own, its edge's or the global one)."""
        return self.rule.slot(node)

    def server_model(self) -> Model:
        """The model the run stands for: the global model, the cloud model, or (gossip) the average;
        with ``strategy.ema`` the moving average of those (``fedrl.server.iterate_average``)."""
        if self.average is not None and self.average.mean is not None:
            return self.average.model()
        return self.rule.server_model(self.round)

    def node_models(self) -> list[Model]:
        """Each slot's current model (gossip: what each node trains from next)."""
        return self.rule.node_models(self.round)

    def begin_round(self, rnd: int) -> None:
        """Make this round's broadcast of every model slot (call once, before ``plan``); with
        ``algo.norm-obs = server`` first merge the server's own rollouts into the statistics."""
        if self.obs_from_server:  # the server's own rollouts on evaluated variants (fedrl.rl.obs_stats)
            m = self.rule.moments[0]
            assert m is not None  # obs_on: the rule keeps statistics
            self.rule.observe(self.evaluation.observe(self.rule.server_model(self.round), m, rnd))
        for s, cast in enumerate(self.casts):
            cast.advance(self.rule.models[s], rnd)
        self.round_clip = self.clip  # what its plans carry; adaptive clipping moves ``clip`` as it aggregates

    def plan(self, node: int, rnd: int) -> tuple[LocalPlan, Downlink | Mix]:
        mu = self.rule.proximal_mu(node, rnd)  # the rule's part of the plan (FedProx's term)
        ef_base = self.ef21.base(node) if self.ef21 is not None else -1
        p = LocalPlan(node, rnd, self.cfg.num_server_rounds, self.cfg.seed, mu, self.rule.moments[self.slot(node)],
                      ef_base, self.clip, self.run_uid)
        return p, self.rule.downlink(node, rnd, self.casts, self.holds.get(node))

    def sent(self, node: int) -> Model:
        """The weights node ``node`` trained from this round (the current broadcast)."""
        return self.casts[self.slot(node)].base

    def delta(self, reply: Reply) -> Model:
        """The reply's update: decoded payload, or trained weights minus the weights sent."""
        base = self.sent(reply.node)
        if reply.decoded is not None:  # checked: decoded once, by fedrl.server.guards.checked
            return reply.decoded
        if reply.update is not None and self.ef21 is not None:
            return unflatten(self.ef21.estimate(reply.node, reply.ef_base, reply.update), base)
        if reply.update is not None:
            vec = decompress(reply.update, self.up, self.n_params)
            vec = vec * np.float32(uplink_scale(self.cfg, self.up, self.round + 1))
            return unflatten(vec, base)
        return delta_of(reply.weights, base)

    def note_selection(self, asked: list[int], missed: list[int]) -> None:
        """Tell selection who was sent a plan and who failed or missed the deadline (``fedrl.server.selection``)."""
        self.selector.note(asked, missed)

    def ring_bits(self, nodes: int) -> int:
        """The secure-aggregation ring width for a round of ``nodes`` nodes (``secure_sum.ring_bits``)."""
        return secure_sum.ring_bits(self, nodes)

    def dp_share(self, slot: int) -> float:
        """The part of the round's selected nodes model slot ``slot``'s secure sum stands for (DP)."""
        return self.rule.dp_share(slot)

    def account_sums(self) -> None:
        """One ledger step for a round of several disjoint noised sums (no-op without DP)."""
        if self.dp is not None:
            self.dp.account()

    def note_delivery(self, rnd: int, good: list[int], bad: list[int]) -> None:
        """Record which nodes now hold round ``rnd``'s broadcast (a usable reply proves it)."""
        for n in good:
            self.holds[n] = rnd
        for n in bad:
            self.holds.pop(n, None)

    # --- aggregation ----------------------------------------------------------------------
    def validate(self, reply: Reply, expected_node: int) -> str | None:
        """Why a reply must be left out of the aggregate, or None if it is usable (``fedrl.server.guards``)."""
        return guards.reply_problem(self, reply, expected_node)

    def check(self, reply: Reply, expected_node: int) -> Reply | str:
        """The usable reply with its update decoded once (what ``aggregate`` takes), or why not."""
        return guards.checked(self, reply, expected_node)

    def take_failure(self) -> str | None:
        """Why an aggregation since the last call was undone (None: none was); resets it."""
        failed, self.failed = self.failed, None
        return failed

    def guarded(self, label: str, apply: Callable[[], None]) -> None:
        """Run one aggregation step; one that leaves a model slot or its statistics non-finite is
        undone (``guards.undo_if_nonfinite``) and ``failed`` says why."""
        failed = guards.undo_if_nonfinite(self.rule, label, apply)
        if failed is not None:
            self.failed = failed
            log.warning("round %d: aggregation failed: %s", self.round + 1, failed)

    def aggregate(self, replies: list[Reply], rnd: int | None = None) -> None:
        """Apply valid replies (already checked with ``validate``) of round ``rnd`` (default: the next).

        The rule weighs each reply by its env steps (``validate`` bounds them by the plan). A
        result that is not finite is undone (``guarded``; ``take_failure`` says why)."""
        r = self.round + 1 if rnd is None else rnd
        self.guarded(self.rule.label(), lambda: self._aggregate(replies, r))
        self.counters.env_steps += sum(x.env_steps for x in replies)

    def _aggregate(self, replies: list[Reply], rnd: int) -> None:
        updates = [Update(x, self.delta(x), self.sent(x.node)) for x in replies]  # before EF21 commits
        if self.ef21 is not None:
            for u in updates:
                self.ef21.commit(u.node, flatten(u.delta), rnd)
        self.rule.aggregate(updates, rnd)

    def aggregate_sums(self, means: dict[int, np.ndarray], ratio_sum: float) -> None:
        """Apply weighted mean updates that arrived as sums (secure aggregation): one per model slot
        that had a secure session this round (the star's one model; one per edge under a hierarchy).

        ``ratio_sum`` is the securely summed weight of all of them in units of ``algo.local-steps``."""
        rnd = self.round + 1
        self.guarded("secure aggregation", lambda: self.rule.step_slots(
            {s: unflatten(m, self.rule.models[s]) for s, m in means.items()}, rnd))
        if math.isfinite(ratio_sum):
            self.counters.env_steps += round(ratio_sum * self.cfg.algo.local_steps)

    def completed(self, rnd: int) -> dict[str, Any]:
        """Round (or asynchronous server step) ``rnd`` is over: its model is final and recorded next.
        Returns the round's closing fields for metrics.jsonl (why its aggregate was undone; with DP
        the ε spent so far and the clip norm the round released under, fixed when it began), then
        sets the next round's clip norm; ``strategy.ema`` folds the model into the average. A
        restored checkpoint sets ``round`` instead (``fedrl.server.snapshot``).

        The synchronous and asynchronous loops both record a round with this, so they cannot
        disagree on which clip norm a row shows (the asynchronous loop once showed the next step's)."""
        fields: dict[str, Any] = {"aggregation_failed": self.take_failure()}
        if self.privacy is not None:
            fields |= {"epsilon": self.epsilon(), "delta": self.privacy.delta, "clip_norm": self.round_clip}
        self.round = rnd
        if self.dp is not None:
            self.dp.schedule(rnd + 1)  # privacy.clip-norm-end: the next round's clip norm (checkpointed with it)
        if self.average is not None:
            self.average.update(self.rule.server_model(rnd))
        return fields

    def count_unused(self, replies: list[Reply]) -> None:
        """Count the env steps of replies the round did not aggregate (too few of them)."""
        self.counters.env_steps += sum(x.env_steps for x in replies)

    # --- asynchronous rules (fedbuff, fedasync; fedrl.rules.asynchronous) --------------------
    def receive_async(self, reply: Reply, version: int, base: Model) -> list[tuple[int, int]]:
        """Take one valid reply that trained from model ``version`` (= ``base``). Returns the
        (node, staleness) of the updates applied if the server stepped (the round ended), else [].

        A compressed update (``compression.up``) becomes the weights it stands for, ``base`` plus
        the decoded update, so the rules see what they would without compression. The node's
        error-feedback residual is its own, whatever the staleness."""
        assert self.asyn is not None
        self.counters.env_steps += reply.env_steps
        if reply.update is not None:
            reply = replace(reply, weights=unflatten(flatten(base) + flatten(self.delta(reply)), base), update=None,
                            decoded=None)
        return self.asyn.receive(reply, version, base, self.round, self.guarded)

    def hold_version(self) -> int:
        """Keep the current model as the version a node is sent (``release_version`` lets it go)."""
        assert self.asyn is not None
        self.asyn.versions.acquire(self.round, self.models[0])
        return self.round

    def release_version(self, version: int) -> Model:
        """The model of ``version`` (what a node trained from), released once."""
        assert self.asyn is not None
        return self.asyn.versions.release(version)

    def flush_buffer(self) -> list[tuple[int, int]]:
        """Step with what the rule buffers (FedBuff; FedAsync buffers nothing); (node, staleness) of each."""
        assert self.asyn is not None
        return self.asyn.flush(self.round, self.guarded)

    # --- privacy --------------------------------------------------------------------------
    def epsilon(self) -> float | None:
        """ε spent so far at ``privacy.delta`` (None without DP)."""
        return None if self.dp is None else self.dp.epsilon()

    def audit_result(self) -> AuditResult | None:
        """The one-run audit's verdict so far (None without ``privacy.audit-canaries``)."""
        return None if self.dp is None else self.dp.audit_result()

    def budget_allows_next_round(self) -> bool:
        """False when one more released round would take ε above ``privacy.target-epsilon``."""
        return self.dp is None or self.dp.budget_allows_next_round()

    # --- evaluation -----------------------------------------------------------------------
    def evaluate_own(self) -> list[float]:
        """Return per variant: the global model (star) or node i's model on variant i (local, gossip)."""
        if not self.per_node:
            return self.evaluation.on_variants(self.server_model(), self.rule.moments[0])
        return self.evaluation.each_own(self.node_models(), self.rule.moments)

    def evaluate_heldout(self) -> list[float]:
        """Return per held-out variant (``eval.held-out``; [] when 0) of the model the run exports."""
        return self.evaluation.on_heldout(self.server_model(), self.rule.moments[0])

    def evaluate_cross(self) -> list[list[float]]:
        """``local`` and gossip only: row i = node i's model on every variant."""
        return self.evaluation.cross(self.node_models(), self.rule.moments)

    def solved(self, returns: list[float]) -> bool:
        return self.target is not None and min(returns) >= self.target
