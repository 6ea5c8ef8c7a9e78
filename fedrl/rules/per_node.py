"""Rules with one model per node and no global model: ``local`` (each node keeps exactly what
it trained; the no-federation baseline) and gossip (each node mixes its model with its
neighbours' over ``topology.graph``, the ServerApp relaying the models: ``fedrl.topology.gossip``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedrl.compression.downlink import Broadcaster, Downlink
from fedrl.privacy.server import ServerPrivacy
from fedrl.rules.base import Model, RuleSetup, Saved, ServerRule, Update
from fedrl.topology.consensus_step import step_for
from fedrl.topology.gossip import Mix, Relay, consensus_distance
from fedrl.topology.hierarchy import cloud_average


class Local(ServerRule):
    """No aggregation: a node's next model is exactly what it trained (no server step)."""

    per_node = True
    not_privatizable = "there is no aggregate to protect"
    no_sums = "keeps one model per node, so it needs each node's update, not their sum"

    def __init__(self, setup: RuleSetup) -> None:
        super().__init__(setup, slots=setup.cfg.nodes.count)

    def slot(self, node: int) -> int:
        return node

    def aggregate(self, updates: list[Update], rnd: int) -> None:
        for u in updates:
            self.models[u.node] = u.trained()
            self.merge_moments(u.node, [u.reply])

    def restore(self, saved: Saved, broken: list[int]) -> None:
        """Per-node models are independent: only the broken ones go back."""
        for s in broken:
            self.models[s] = list(saved.models[s])
            self.moments[s] = saved.moments[s]


class Gossip(Local):
    """Decentralized averaging: what a node trains from is its own last model mixed with its
    neighbours' (Metropolis-Hastings weights); the run stands for the nodes' plain average."""

    own_privacy = frozenset({"local"})  # each node noises its own update (use_privacy keeps the ledger)

    def __init__(self, setup: RuleSetup) -> None:
        super().__init__(setup)
        t, cfg = setup.cfg.topology, setup.cfg
        self.relay = Relay(t.graph, cfg.nodes.count, t.degree, cfg.seed)
        self.gamma = step_for(cfg, [w.shape for w in setup.initial])  # topology.consensus-step
        # privacy.mode = local (set by the Federation): every node noises its own update, every
        # round; one ledger step per round is the epsilon of a node that took part in every round,
        # the worst node's.
        self.privacy: ServerPrivacy | None = None

    def use_privacy(self, privacy: ServerPrivacy | None, selected: Callable[[int], float]) -> None:
        self.privacy = privacy

    def label(self) -> str:
        return "gossip"

    def proximal_mu(self, node: int, rnd: int) -> float:
        return self.strategy_mu()  # strategy.name = fedprox: its local term on every node

    def node_models(self, rnd: int) -> list[Model]:
        """What each node trains from next, as far as the server knows: under compression it holds
        the public copies, not the nodes' own models (``fedrl.topology.choco``)."""
        return self.relay.mixed(rnd, self.models, self.gamma)

    def server_model(self, rnd: int) -> Model:
        return cloud_average(self.node_models(rnd), [1.0] * len(self.models))

    def row_fields(self, rnd: int) -> dict[str, Any]:
        """How far the nodes' models are from their average (Koloskova et al., ICML 2020)."""
        return {"consensus_distance": consensus_distance(self.node_models(rnd))}

    def summary_fields(self, rnd: int) -> dict[str, Any]:
        return self.row_fields(rnd)

    def downlink(self, node: int, rnd: int, casts: list[Broadcaster], held: int | None) -> Downlink | Mix:
        return self.relay.plan(node, rnd, self.models, held)

    def aggregate(self, updates: list[Update], rnd: int) -> None:
        super().aggregate(updates, rnd)
        for u in updates:
            self.relay.trained[u.node] = rnd
        if self.privacy is not None:  # every node was planned and noised its update this round
            self.privacy.account()

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta, arrays = super().state_dict()
        return {**meta, "gossip_trained": list(self.relay.trained)}, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        super().load_state_dict(meta, arrays)
        self.relay.trained = [int(x) for x in meta["gossip_trained"]]

    def save(self) -> Saved:
        saved = super().save()
        return Saved(saved.models, saved.moments, {**saved.extra, "trained": list(self.relay.trained)})

    def restore(self, saved: Saved, broken: list[int]) -> None:
        """A restored node's model is again from the round it was before, so the next plan sends
        it that model instead of letting the node keep the one it trained."""
        super().restore(saved, broken)
        for s in broken:
            self.relay.trained[s] = saved.extra["trained"][s]
