"""Hierarchical aggregation (HierFAVG, Liu et al., ICC 2020): nodes, edges, cloud.

Each edge combines its nodes' updates every round (``topology.edge-rule``: the env-step
weighted mean, or a robust rule per edge) and steps its model with the server step; every
``topology.cloud-every`` rounds the cloud combines the edge models (``topology.cloud-rule``,
weighted by their node counts) and every edge takes the result. Node -> edge comes from
``topology.assign`` (``fedrl.topology.hierarchy``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from fedrl.aggregation.fedavg import weighted_mean
from fedrl.aggregation.robust import robust_aggregate
from fedrl.model.layout import flatten, unflatten
from fedrl.privacy.server import ServerPrivacy
from fedrl.rules.base import Model, RuleSetup, ServerRule, Update
from fedrl.topology.hierarchy import assign_edges, cloud_model

log = logging.getLogger("fedrl")


class Hierarchical(ServerRule):
    accepts_sums = True  # one secure sum per edge (fedrl.flower.secure_exchange), stepped by step_slots
    own_privacy = frozenset({"central", "local"})  # DP at the edge (use_privacy)

    def __init__(self, setup: RuleSetup) -> None:
        t = setup.cfg.topology
        super().__init__(setup, slots=t.edges)
        self.edge_of = assign_edges(t.assign, setup.variants, t.edges, setup.cfg.seed)
        self.attackers = setup.attackers
        self.n_params = setup.n_params
        self.bytes_cloud = 0  # edge <-> cloud traffic (float32 models)
        # Client-level DP at the edge (set by the Federation): each edge releases DP-FedAvg's mean of
        # its nodes' updates; ``selected(rnd)`` is the federation's denominator, shared by the edges
        # in proportion to their nodes.
        self.privacy: ServerPrivacy | None = None
        self.selected: Callable[[int], float] = lambda rnd: float(len(self.edge_of))

    def use_privacy(self, privacy: ServerPrivacy | None, selected: Callable[[int], float]) -> None:
        self.privacy, self.selected = privacy, selected

    def label(self) -> str:
        return "hierarchical"

    def proximal_mu(self, node: int, rnd: int) -> float:
        return self.strategy_mu()  # strategy.name = fedprox: edges' nodes keep its term

    def slot(self, node: int) -> int:
        return self.edge_of[node]

    def server_model(self, rnd: int) -> Model:
        """The cloud model: the edges combined by ``topology.cloud-rule``, weighted by their nodes."""
        counts = [self.edge_of.count(e) for e in range(len(self.models))]
        return cloud_model(self.models, counts, self.cfg.topology.cloud_rule, self.cfg.strategy.trim)

    def dp_share(self, slot: int) -> float:
        """Edge ``slot``'s part of the nodes: DP at the edge divides its noised sum by the round's
        selected count times this."""
        return self.edge_of.count(slot) / len(self.edge_of)

    def aggregate(self, updates: list[Update], rnd: int) -> None:
        t, s = self.cfg.topology, self.cfg.strategy
        for e in range(len(self.models)):
            mine = [u for u in updates if self.edge_of[u.node] == e]
            if not mine:
                continue
            if self.privacy is not None:  # DP at the edge: equal weights, clipped, noised, data-independent divisor
                mean = self.privacy.noised_mean([flatten(u.delta) for u in mine], self.selected(rnd) * self.dp_share(e),
                                                rnd)
            elif t.edge_rule == "fedavg":
                mean = flatten(weighted_mean([u.delta for u in mine], [u.reply.env_steps for u in mine]))
            else:  # per edge: its own nodes' updates, strategy.byzantine of them hostile
                f = s.byzantine if s.byzantine >= 0 else len(self.attackers & {u.node for u in mine})
                try:
                    mean = robust_aggregate(t.edge_rule, np.stack([flatten(u.delta) for u in mine]), f, s.trim,
                                            s.krum_m)
                except ValueError as err:
                    log.warning("round %s: edge %d: %s with %d replies: %s; the edge model is unchanged", rnd, e,
                                t.edge_rule, len(mine), err)
                    continue
            self._step_edge(e, mean, rnd)
        if self.privacy is not None:
            # The edges' sums are over disjoint nodes, so one node's data reaches one noised sum:
            # the round is one mechanism per node (parallel composition), one ledger step.
            self.privacy.account()
        self._cloud(rnd)

    def step_slots(self, means: dict[int, Model], rnd: int) -> None:
        """Secure aggregation per edge: each edge that had a secure sum steps with its mean (the
        caller noised it and accounts for DP at the edge), then the cloud as in ``aggregate``."""
        for e, mean in means.items():
            self._step_edge(e, flatten(mean), rnd)
        self._cloud(rnd)

    def _step_edge(self, e: int, mean: np.ndarray, rnd: int) -> None:
        # the same step as the star's (strategy.server-lr; the optimizer is stateless)
        self.models[e] = unflatten(self.optimizer.step(flatten(self.models[e]), mean, self.server_lr(rnd)),
                                   self.models[e])

    def _cloud(self, rnd: int) -> None:
        if rnd % self.cfg.topology.cloud_every == 0:
            cloud = self.server_model(rnd)
            self.models = [list(cloud) for _ in self.models]
            self.bytes_cloud += 2 * len(self.models) * 4 * self.n_params  # each edge up, the cloud back down

    def row_fields(self, rnd: int) -> dict[str, Any]:
        return {"bytes_cloud": self.bytes_cloud}  # the edge <-> cloud tier; bytes_up/down are node <-> edge

    def summary_fields(self, rnd: int) -> dict[str, Any]:
        return {"bytes_cloud_total": self.bytes_cloud}

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta, arrays = super().state_dict()
        return {**meta, "bytes_cloud": self.bytes_cloud}, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        super().load_state_dict(meta, arrays)
        self.bytes_cloud = int(meta.get("bytes_cloud", 0))
