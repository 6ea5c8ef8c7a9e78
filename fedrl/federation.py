"""The server side of a federation, without Flower: plans, aggregation, evaluation, state.

``Federation`` holds one model per logical node (for FedAvg and FedProx every node shares
the global model; for ``local`` each node keeps its own), the federated observation
statistics, the counters and the round. The Flower loop in ``fedrl.flower.server_loop``
only moves its plans and replies over the wire.

Observation normalization federates as pooled statistics: every node trains with the
server's statistics merged with what it sees during the round, and reports only the moments
of that round's observations; the server merges them exactly (``Moments.merge``) into the
statistics it broadcasts next round and evaluates with. The global policy therefore always
has one normalization that matches the data it was trained on across all variants.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable
from typing import Any

import numpy as np

from fedrl import guards
from fedrl.aggregation.asynchronous import ASYNC_RULES, AsyncState, Buffered, async_mix, buffered_mean, staleness_weight
from fedrl.aggregation.fedavg import apply_delta, delta_of, weighted_mean
from fedrl.aggregation.robust import ROBUST_RULES, robust_aggregate
from fedrl.aggregation.server_opt import ServerOptimizer, ServerOptSettings, annealed_lr
from fedrl.attacks import attackers
from fedrl.compression.downlink import Broadcaster, Downlink
from fedrl.compression.ef21 import ServerEF21
from fedrl.compression.pipeline import decompress, flatten, stage, unflatten
from fedrl.compression.ring_codes import required_ring_bits
from fedrl.config import Config, to_flat
from fedrl.envs.spec import parse_kwargs
from fedrl.experiment import heldout_variants_of, initial_weights, policy_spec, target_return, variants_of
from fedrl.privacy.accounting import Ledger
from fedrl.privacy.audit import AuditResult
from fedrl.privacy.plan import plan_for
from fedrl.privacy.server import ServerPrivacy
from fedrl.privacy.skellam import SkellamLedger
from fedrl.rl.evaluate import evaluate
from fedrl.rl.networks import ActorCritic, weight_names
from fedrl.rl.normalize import Moments
from fedrl.rl.train import LocalPlan, uses_norm
from fedrl.seeding import HELDOUT, derive
from fedrl.selection import Selector
from fedrl.topology.gossip import Mix, Relay, consensus_distance
from fedrl.topology.hierarchy import assign_edges, cloud_average, cloud_model
from fedrl.wire import Reply, uplink_scale

log = logging.getLogger("fedrl")


class Federation:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.variants = variants_of(cfg)
        self.heldout = heldout_variants_of(cfg, self.variants)  # eval.held-out: no node trains on these
        self.spec = policy_spec(cfg, self.variants[0])
        self.names = weight_names(ActorCritic(self.spec))
        self.kwargs: dict[str, object] = dict(parse_kwargs(cfg.env.kwargs))
        w0 = initial_weights(self.spec, cfg.seed)
        t = cfg.topology
        # gossip: one model per node (what it last trained), mixed with its neighbours' (fedrl.topology.gossip)
        self.gossip = Relay(t.graph, cfg.nodes.count, t.degree, cfg.seed) if t.name == "gossip" else None
        self.per_node = cfg.strategy.name == "local" or self.gossip is not None
        self.hier = t.name == "hierarchical"
        self.edge_of = assign_edges(t.assign, self.variants, t.edges, cfg.seed) if self.hier else []
        self.bytes_cloud = 0  # hierarchical: edge <-> cloud traffic (float32 models)
        n_models = cfg.nodes.count if self.per_node else (t.edges if self.hier else 1)
        self.models: list[list[np.ndarray]] = [list(w0) for _ in range(n_models)]
        self.obs_on = uses_norm(cfg.algo.norm_obs, self.spec)
        dim = self.spec.obs_dim
        self.moments: list[Moments | None] = [Moments.empty(dim) if self.obs_on else None for _ in range(n_models)]
        self.selector = Selector(cfg)
        self.round = 0
        self.run_uid = secrets.token_hex(8)  # kept in the checkpoint: a resumed run is the same run
        self.env_steps = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self.wall_time_s = 0.0
        self.target = target_return(cfg)
        self.up = stage(cfg.compression, "up")
        self.down = stage(cfg.compression, "down")
        self.casts = [Broadcaster(self.down, m, cfg.seed, s) for s, m in enumerate(self.models)]
        self.holds: dict[int, int] = {}  # node -> round of the broadcast it holds (downlink compression)
        self.n_params = int(sum(w.size for w in w0))
        self.ef21 = ServerEF21(self.up, self.n_params) if self.up.ef21 else None
        self.privacy = plan_for(cfg, self.spec.action_kind == "continuous", self.n_params)
        self.dp = ServerPrivacy(self.privacy, self.n_params) if self.privacy is not None else None
        s = cfg.strategy
        self.robust = s.name in ROBUST_RULES
        self.attackers = attackers(cfg)
        self.byzantine = s.byzantine if s.byzantine >= 0 else len(self.attackers)  # f the robust rule tolerates
        opt_name = "fedavg" if s.name in ("fedavg", "fedprox", "local", *ROBUST_RULES, *ASYNC_RULES) else s.name
        self.asyn = AsyncState() if s.name in ASYNC_RULES else None
        self.server_opt = ServerOptimizer(ServerOptSettings(opt_name, s.server_lr, s.momentum, s.beta1, s.beta2,
                                                            s.tau), self.n_params)
        self.failed: str | None = None  # why the last aggregation was undone (take_failure)

    @property
    def ledger(self) -> Ledger | SkellamLedger | None:
        return self.dp.ledger if self.dp is not None else None

    @property
    def clip(self) -> float:
        """This round's DP clip norm (adaptive clipping moves it; 0 without DP)."""
        return self.dp.clip if self.dp is not None else 0.0

    # --- planning -------------------------------------------------------------------
    def select(self, rnd: int) -> list[int]:
        """Nodes trained in round ``rnd`` (``fedrl.selection``: ``fraction-train`` of them, at least
        ``min-train-nodes``, by ``selection.name``)."""
        return self.selector.select(rnd)

    def slot(self, node: int) -> int:
        """The model a node trains from: its own (local), its edge's (hierarchical) or the global one."""
        return node if self.per_node else (self.edge_of[node] if self.hier else 0)

    def server_model(self) -> list[np.ndarray]:
        """The model the run stands for: the global model, the cloud average of the edges, or (gossip)
        the plain average of the nodes' mixed models."""
        if self.gossip is not None:
            return cloud_average(self.node_models(), [1.0] * len(self.models))
        if not self.hier:
            return self.models[0]
        return cloud_model(self.models, [self.edge_of.count(e) for e in range(len(self.models))],
                           self.cfg.topology.cloud_rule, self.cfg.strategy.trim)

    def begin_round(self, rnd: int) -> None:
        """Make this round's broadcast of every model slot (call once, before ``plan``)."""
        for s, cast in enumerate(self.casts):
            cast.advance(self.models[s], rnd)

    def node_models(self) -> list[list[np.ndarray]]:
        """Each node's current model: what it trains from next (gossip: its mix), else the slot models."""
        return self.gossip.mixed(self.round, self.models) if self.gossip is not None else self.models

    def consensus_distance(self) -> float:
        return consensus_distance(self.node_models())

    def plan(self, node: int, rnd: int) -> tuple[LocalPlan, Downlink | Mix]:
        s = self.cfg.strategy
        mu = s.proximal_mu if s.name == "fedprox" else 0.0
        ef_base = self.ef21.base(node) if self.ef21 is not None else -1
        p = LocalPlan(node, rnd, self.cfg.num_server_rounds, self.cfg.seed, mu, self.moments[self.slot(node)], ef_base,
                      self.clip, self.run_uid)
        if self.gossip is not None:
            return p, self.gossip.plan(node, rnd, self.models, self.holds.get(node))
        return p, self.casts[self.slot(node)].downlink(self.holds.get(node))

    def sent(self, node: int) -> list[np.ndarray]:
        """The weights node ``node`` trained from this round (the current broadcast)."""
        return self.casts[self.slot(node)].base

    def delta(self, reply: Reply) -> list[np.ndarray]:
        """The reply's update: decoded payload, or trained weights minus the weights sent."""
        base = self.sent(reply.node)
        if reply.update is not None and self.ef21 is not None:
            return unflatten(self.ef21.estimate(reply.node, reply.ef_base, reply.update), base)
        if reply.update is not None:
            vec = decompress(reply.update, self.up, self.n_params)
            vec = vec * np.float32(uplink_scale(self.cfg, self.up, self.round + 1))
            return unflatten(vec, base)
        return delta_of(reply.weights, base)

    # --- aggregation ----------------------------------------------------------------
    def validate(self, reply: Reply, expected_node: int) -> str | None:
        """Why a reply must be left out of the aggregate, or None if it is usable (``fedrl.guards``:
        node id, env steps at most the plan's, payload or float32 weights of the model's shapes, all
        finite, observation statistics of the steps trained, ``strategy.max-update-norm``)."""
        return guards.reply_problem(self, reply, expected_node)

    def take_failure(self) -> str | None:
        """Why an aggregation since the last call was undone (None: none was); resets it."""
        failed, self.failed = self.failed, None
        return failed

    def _guarded(self, rule: str, apply: Callable[[], None]) -> None:
        """Run one aggregation step; if it leaves a model slot or its observation statistics
        non-finite, give back what was there before (bit for bit) and record why in ``failed``.

        One guard for every rule: whatever overflowed (a finite but huge update, a server
        optimizer's division, DP noise), the run goes on with the previous model.
        """
        saved = guards.Snapshot.of(self)
        apply()
        bad = guards.nonfinite_slots(self.models, self.moments)
        if not bad:
            return
        # Per-node models are independent: only the broken ones go back. Otherwise slots share the
        # server optimizer (and the cloud), so all of it does.
        saved.restore(self, bad if self.per_node else None)
        what = "global model" if len(self.models) == 1 else f"model of {'node' if self.per_node else 'edge'}s {bad}"
        self.failed = f"{rule} gave a non-finite {what} (or observation statistics); kept the previous one"
        log.warning("round %d: aggregation failed: %s", self.round + 1, self.failed)

    def aggregate(self, replies: list[Reply], rnd: int | None = None) -> None:
        """Apply valid replies (already checked with ``validate``) of round ``rnd`` (default: the next).

        FedAvg weighs each reply by its env steps (``validate`` bounds them by the plan). A result
        that is not finite is undone (``_guarded``; ``take_failure`` says why)."""
        rule = "gossip" if self.gossip is not None else ("hierarchical" if self.hier else self.cfg.strategy.name)
        self._guarded(rule, lambda: self._aggregate(replies, rnd))
        self.env_steps += sum(r.env_steps for r in replies)

    def _aggregate(self, replies: list[Reply], rnd: int | None) -> None:
        deltas = [self.delta(r) for r in replies]  # before EF21 commits: estimates depend on the held g_i
        if self.ef21 is not None:
            for r, d in zip(replies, deltas, strict=True):
                self.ef21.commit(r.node, flatten(d), self.round + 1 if rnd is None else rnd)
        if self.hier:
            self._hierarchical(replies, deltas, self.round + 1 if rnd is None else rnd)
        elif self.per_node:
            # No aggregation: a node's next model is exactly what it trained (no server step).
            for r, d in zip(replies, deltas, strict=True):
                self.models[r.node] = ([w.astype(np.float32) for w in r.weights] if r.update is None
                                       else apply_delta(self.sent(r.node), d, 1.0))
                self._merge_moments(r.node, [r])
                if self.gossip is not None:
                    self.gossip.trained[r.node] = self.round + 1 if rnd is None else rnd
        elif replies:
            g = self.models[0]
            mean: list[np.ndarray] | None
            if self.robust:  # weights ignored: a Byzantine node could lie about its env steps
                s = self.cfg.strategy
                try:
                    mean = unflatten(robust_aggregate(s.name, np.stack([flatten(d) for d in deltas]), self.byzantine,
                                                      s.trim, s.krum_m), g)
                except ValueError as err:  # too few replies this round for the rule's guarantee
                    log.warning("round %s: %s with %d replies: %s; the model is unchanged", rnd, s.name,
                                len(replies), err)
                    mean = None
            elif self.privacy is None:
                mean = weighted_mean(deltas, [r.env_steps for r in replies])
            else:
                below = [r.metrics.get("clip_below") for r in replies]
                mean = unflatten(self._private_mean([flatten(d) for d in deltas], rnd, below), g)
            if mean is not None:
                self._server_step(mean, rnd)
            self._merge_moments(0, replies)

    def _hierarchical(self, replies: list[Reply], deltas: list[list[np.ndarray]], rnd: int) -> None:
        """HierFAVG: each edge averages its nodes' updates; every ``cloud-every`` rounds the cloud
        averages the edges (weighted by their node counts) and every edge takes the result."""
        t, s = self.cfg.topology, self.cfg.strategy
        for e in range(len(self.models)):
            mine = [(r, d) for r, d in zip(replies, deltas, strict=True) if self.edge_of[r.node] == e]
            if not mine:
                continue
            if t.edge_rule == "fedavg":
                mean = flatten(weighted_mean([d for _, d in mine], [r.env_steps for r, _ in mine]))
            else:  # per edge: its own nodes' updates, strategy.byzantine of them hostile
                f = s.byzantine if s.byzantine >= 0 else len(self.attackers & {r.node for r, _ in mine})
                try:
                    mean = robust_aggregate(t.edge_rule, np.stack([flatten(d) for _, d in mine]), f, s.trim, s.krum_m)
                except ValueError as err:
                    log.warning("round %s: edge %d: %s with %d replies: %s; the edge model is unchanged", rnd, e,
                                t.edge_rule, len(mine), err)
                    continue
            # the same step as the star's (strategy.server-lr; the optimizer is stateless)
            self.models[e] = unflatten(self.server_opt.step(flatten(self.models[e]), mean, self._server_lr(rnd)),
                                       self.models[e])
        if rnd % t.cloud_every == 0:
            cloud = self.server_model()
            self.models = [list(cloud) for _ in self.models]
            self.bytes_cloud += 2 * len(self.models) * 4 * self.n_params  # each edge up, the cloud back down

    def _private_mean(self, deltas: list[np.ndarray], rnd: int | None,
                      below: list[float | None] | None = None) -> np.ndarray:
        """The DP mean of the round's flat updates (``ServerPrivacy.mean``)."""
        assert self.dp is not None
        r = self.round + 1 if rnd is None else rnd
        return self.dp.mean(deltas, len(self.select(r)), r, below)

    # --- privacy accounting ---------------------------------------------------------
    def epsilon(self) -> float | None:
        """ε spent so far at ``privacy.delta`` (None without DP)."""
        return None if self.dp is None else self.dp.epsilon()

    def audit_result(self) -> AuditResult | None:
        """The one-run audit's verdict so far (None without ``privacy.audit-canaries``)."""
        return None if self.dp is None else self.dp.audit_result()

    def budget_allows_next_round(self) -> bool:
        """False when one more released round would take ε above ``privacy.target-epsilon``."""
        return self.dp is None or self.dp.budget_allows_next_round()

    def ring_bits(self, nodes: int) -> int:
        """The secure-aggregation ring width for a round of ``nodes`` nodes."""
        if self.privacy is not None and self.privacy.dist is not None:
            return self.privacy.dist.bits
        return self.cfg.secagg.bits or required_ring_bits(self.cfg.compression.bits, nodes)

    def distributed_mean(self, total: np.ndarray, survivors: int, rnd: int) -> np.ndarray:
        """Distributed DP: the unmasked ring sum of ``survivors`` nodes to the mean update, and one
        ledger step with the noise those nodes added (the server now holds this sum).

        As in central mode, the sum of clipped updates is divided by the number of nodes selected.
        """
        assert self.dp is not None
        return self.dp.distributed_mean(total, survivors, len(self.select(rnd)))

    def aggregate_mean(self, mean: np.ndarray, ratio_sum: float) -> None:
        """Apply a weighted mean update that arrived as a sum (secure aggregation).

        ``ratio_sum`` is the securely summed weight in units of ``algo.local-steps``.
        """
        self._guarded("secure aggregation", lambda: self._server_step(unflatten(mean, self.models[0])))
        if math.isfinite(ratio_sum):
            self.env_steps += round(ratio_sum * self.cfg.algo.local_steps)

    def _server_step(self, mean: list[np.ndarray], rnd: int | None = None) -> None:
        """Move the global model with round ``rnd``'s (default: the next) mean update
        (``strategy.name``'s server optimizer)."""
        g = self.models[0]
        self.models[0] = unflatten(self.server_opt.step(flatten(g), flatten(mean), self._server_lr(rnd)), g)

    def _server_lr(self, rnd: int | None = None) -> float:
        """Round ``rnd``'s (default: the next) server learning rate (``strategy.server-lr``, annealed
        to ``server-lr-end``)."""
        s = self.cfg.strategy
        r = self.round + 1 if rnd is None else rnd
        return annealed_lr(s.server_lr, s.server_lr_end, r, self.cfg.num_server_rounds)

    # --- asynchronous rules (fedbuff, fedasync; fedrl.aggregation.asynchronous) ------------
    def receive_async(self, reply: Reply, version: int, base: list[np.ndarray]) -> list[tuple[int, int]]:
        """Take one valid reply that trained from model ``version`` (= ``base``). Returns the
        (node, staleness) of the updates applied if the server stepped (the round ended), else []."""
        s = self.cfg.strategy
        assert self.asyn is not None
        self.env_steps += reply.env_steps
        if s.name == "fedasync":
            tau = self.round - version

            def mix() -> None:
                self._merge_moments(0, [reply])
                self.models[0] = async_mix(self.models[0], reply.weights,
                                           s.mixing * staleness_weight(tau, s.staleness_exponent))

            self._guarded("fedasync", mix)
            return [(reply.node, tau)]
        self._guarded("fedbuff", lambda: self._merge_moments(0, [reply]))
        self.asyn.buffer.append(Buffered(reply.node, delta_of(reply.weights, base), reply.env_steps, version))
        return self.flush_buffer() if len(self.asyn.buffer) >= s.buffer else []

    def flush_buffer(self) -> list[tuple[int, int]]:
        """FedBuff: step with what is buffered (normally K updates); (node, staleness) of each."""
        assert self.asyn is not None
        entries, self.asyn.buffer = self.asyn.buffer, []
        if entries:
            self._guarded("fedbuff", lambda: self._server_step(
                buffered_mean(entries, self.round, self.cfg.strategy.staleness_exponent)))
        return [(e.node, self.round - e.version) for e in entries]

    def note_delivery(self, rnd: int, good: list[int], bad: list[int]) -> None:
        """Record which nodes now hold round ``rnd``'s broadcast (a usable reply proves it)."""
        for n in good:
            self.holds[n] = rnd
        for n in bad:
            self.holds.pop(n, None)

    def _merge_moments(self, slot: int, replies: list[Reply]) -> None:
        m = self.moments[slot]
        if m is None:
            return
        for r in replies:
            if r.obs_moments is not None:
                m = m.merge(r.obs_moments)
        self.moments[slot] = m

    # --- evaluation -----------------------------------------------------------------
    def evaluate_own(self) -> list[float]:
        """Return per variant: the global model (star) or node i's model on variant i (local, gossip)."""
        c = self.cfg
        if not self.per_node:
            return evaluate(self.spec, self.server_model(), self.moments[0], c.env.id, self.variants,
                            self.kwargs, c.eval.episodes, c.seed)
        models = self.node_models()
        return [
            evaluate(self.spec, models[i], self.moments[i], c.env.id, [v], self.kwargs, c.eval.episodes, c.seed,
                     nodes=[i])[0]
            for i, v in enumerate(self.variants)
        ]

    def evaluate_heldout(self) -> list[float]:
        """Return per held-out variant (``eval.held-out``; [] when 0) of the model the run stands for and
        exports, ``server_model()`` with the first slot's observation statistics: the global model
        (star), the cloud model (hierarchical), node 0's model (local) or the nodes' average (gossip).
        Episode seeds derive from ``(seed, HELDOUT)``, apart from the nodes' evaluation episodes."""
        c = self.cfg
        if not self.heldout:
            return []
        return evaluate(self.spec, self.server_model(), self.moments[0], c.env.id, self.heldout, self.kwargs,
                        c.eval.episodes, derive(c.seed, HELDOUT))

    def evaluate_cross(self) -> list[list[float]]:
        """``local`` and gossip only: row i = node i's model on every variant."""
        c = self.cfg
        models = self.node_models()
        return [
            evaluate(self.spec, models[i], self.moments[i], c.env.id, self.variants, self.kwargs,
                     c.eval.episodes, c.seed)
            for i in range(len(models))
        ]

    def solved(self, returns: list[float]) -> bool:
        return self.target is not None and min(returns) >= self.target

    # --- persistence ----------------------------------------------------------------
    def resolved_config(self) -> dict[str, Any]:
        return {
            "run_config": to_flat(self.cfg),
            "nodes": [{"node": i, "params": v} for i, v in enumerate(self.variants)],
            **({"heldout": [{"index": j, "params": v} for j, v in enumerate(self.heldout)]} if self.heldout else {}),
            "policy": {"obs_dim": self.spec.obs_dim, "action_kind": self.spec.action_kind,
                       "action_dim": self.spec.action_dim, "hidden": list(self.spec.hidden),
                       "weight_names": self.names},
            "target_return": self.target,
        }
