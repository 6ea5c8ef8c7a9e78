"""The server-rule interface: how replies become the next model(s), one class per rule.

Modelled on Flower's ``Strategy``: a rule owns the models it keeps (one global model, one per
edge, one per node), their observation statistics and its server optimizer, and nothing else;
``Federation`` coordinates selection, compression, privacy and evaluation around it and never
reaches into a rule's fields. Central DP wraps a rule (``fedrl.rules.private``) as Flower's DP
strategies wrap a ``Strategy``.

A rule's state is ``state_dict()`` (checkpoint arrays and JSON metadata) and comes back with
``load_state_dict``; ``save``/``restore`` give the non-finite guard its bit-for-bit undo.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedrl.aggregation.fedavg import apply_delta
from fedrl.aggregation.server_opt import ServerOptimizer, ServerOptSettings, annealed_lr
from fedrl.compression.downlink import Broadcaster, Downlink
from fedrl.config import Config
from fedrl.model.layout import flatten, unflatten
from fedrl.model.moments import Moments
from fedrl.topology.gossip import Mix
from fedrl.wire import Reply

if TYPE_CHECKING:
    from fedrl.privacy.server import ServerPrivacy

Model = list[np.ndarray]


@dataclass(frozen=True)
class RuleSetup:
    """What a rule is built from: the config, the first weights, whether observation statistics
    travel (their dimension), the nodes' variants and the Byzantine nodes of ``attack.*``."""

    cfg: Config
    initial: Model
    obs_dim: int | None  # None: algo.norm-obs is off
    variants: list[dict[str, float]]
    attackers: frozenset[int] = frozenset()

    @property
    def n_params(self) -> int:
        return int(sum(w.size for w in self.initial))


@dataclass(frozen=True)
class Update:
    """One checked reply and its decoded update (``trained - sent``, in the model's layers)."""

    reply: Reply
    delta: Model
    sent: Model  # the weights the node trained from

    @property
    def node(self) -> int:
        return self.reply.node

    def trained(self) -> Model:
        """The node's trained weights: as sent (float32 weights) or the weights sent plus the update."""
        r = self.reply
        if r.update is None:
            return [w.astype(np.float32) for w in r.weights]
        return apply_delta(self.sent, self.delta, 1.0)


@dataclass(frozen=True)
class Saved:
    """A rule's state before an aggregation (copies), for ``restore``."""

    models: list[Model]
    moments: list[Moments | None]
    extra: dict[str, Any] = field(default_factory=dict)


class ServerRule(ABC):
    """A server rule. Subclass, implement ``aggregate``, and register a factory
    (``fedrl.registry.rules.register``); override the rest where the defaults do not fit."""

    per_node: ClassVar[bool] = False  # one model per node, no global model (evaluated per node)
    accepts_sums: ClassVar[bool] = False  # can step with a securely aggregated mean (``step``)
    privatizable: ClassVar[bool] = False  # central DP can wrap it (its aggregate is a mean + ``step``)
    own_privacy: ClassVar[frozenset[str]] = frozenset()  # privacy.mode values it applies itself (``use_privacy``)
    # Why not, in the words a refused run hears (``fedrl.features.components`` checks the flags above
    # before round 1): a rule that keeps the defaults is refused under DP and under secure aggregation.
    not_privatizable: ClassVar[str] = (
        "it does not declare privatizable = True (an aggregate that is a weighted mean stepped by ServerRule.step, "
        "which central DP replaces by a noised mean), nor applies this privacy mode itself (own_privacy), so no "
        "noise would be added and the reported epsilon would be false")
    no_sums: ClassVar[str] = ("it does not declare accepts_sums = True: it needs each node's update, which masking "
                              "hides")

    def __init__(self, setup: RuleSetup, slots: int = 1, optimizer: str = "fedavg") -> None:
        cfg = setup.cfg
        s = cfg.strategy
        self.cfg = cfg
        self.models: list[Model] = [list(setup.initial) for _ in range(slots)]
        self.moments: list[Moments | None] = [
            Moments.empty(setup.obs_dim) if setup.obs_dim is not None else None for _ in range(slots)]
        # The server step (strategy.server-lr; a plain scaled FedAvg step unless a server optimizer is named).
        self.optimizer = ServerOptimizer(ServerOptSettings(optimizer, s.server_lr, s.momentum, s.beta1, s.beta2,
                                                           s.tau), setup.n_params)

    # --- which model a node trains, what the run stands for -------------------------------
    def slot(self, node: int) -> int:
        """The model slot node ``node`` trains from."""
        return 0

    def server_model(self, rnd: int) -> Model:
        """The model the run stands for after round ``rnd`` (what it evaluates and exports)."""
        return self.models[0]

    def node_models(self, rnd: int) -> list[Model]:
        """Each slot's model after round ``rnd`` (per-node rules: what node i trains from next)."""
        return self.models

    def downlink(self, node: int, rnd: int, casts: list[Broadcaster], held: int | None) -> Downlink | Mix:
        """What node ``node`` is sent in round ``rnd``: its slot's broadcast (``held``: the round
        of the broadcast it holds, for downlink compression)."""
        return casts[self.slot(node)].downlink(held)

    @classmethod
    def local_mu(cls, cfg: Config) -> float:
        """The proximal weight this rule asks of every node in every round (FedProx's
        ``strategy.proximal-mu``); a topology's rule takes it from ``strategy.name``'s rule. 0: none."""
        return 0.0

    def proximal_mu(self, node: int, rnd: int) -> float:
        """The weight of the proximal term ``mu/2 ||w - w_sent||^2`` node ``node``'s local objective
        gets in round ``rnd``, toward the weights it is sent (FedProx, Li et al. 2020); 0: none.
        Override it to ask nodes for something else than ``local_mu`` (per node, per round)."""
        return self.local_mu(self.cfg)

    # --- aggregation ------------------------------------------------------------------------
    @abstractmethod
    def aggregate(self, updates: list[Update], rnd: int) -> None:
        """Apply round ``rnd``'s checked updates (possibly none) to the rule's models."""

    def step(self, mean: Model, rnd: int) -> None:
        """Move the global model by round ``rnd``'s mean update with the server step."""
        g = self.models[0]
        self.models[0] = unflatten(self.optimizer.step(flatten(g), flatten(mean), self.server_lr(rnd)), g)

    def step_slots(self, means: dict[int, Model], rnd: int) -> None:
        """Step with round ``rnd``'s securely aggregated means, one per model slot that had a
        secure sum (``accepts_sums``). A rule of one global model steps it (``step``)."""
        for slot, mean in means.items():
            if slot != 0:
                raise ValueError(f"{self.label()} keeps one model; got a secure sum for slot {slot}")
            self.step(mean, rnd)

    def dp_share(self, slot: int) -> float:
        """The part of a round's selected nodes whose sum slot ``slot`` steps with (DP-FedAvg's divisor
        is the selected count times this): 1 for one global model."""
        return 1.0

    def adopt(self, weights: Model, moments: Moments | None) -> None:
        """Make ``weights`` the global model and merge ``moments`` into its statistics (the
        centralized baseline, whose one learner's model is the model)."""
        self.models[0] = weights
        if self.moments[0] is not None and moments is not None:
            self.moments[0] = self.moments[0].merge(moments)

    def strategy_mu(self) -> float:
        """``local_mu`` of the rule ``strategy.name`` names (fedprox: its term), for the topologies'
        rules, whose nodes train with the star rule's local objective."""
        from fedrl.registry.rules import declared

        return float(getattr(declared(self.cfg.strategy.name), "local_mu", ServerRule.local_mu)(self.cfg))

    def server_lr(self, rnd: int) -> float:
        """Round ``rnd``'s server learning rate (``strategy.server-lr`` annealed to ``server-lr-end``)."""
        s = self.cfg.strategy
        return annealed_lr(s.server_lr, s.server_lr_end, rnd, self.cfg.num_server_rounds)

    def use_privacy(self, privacy: ServerPrivacy | None, selected: Callable[[int], float]) -> None:
        """Client-level DP for a rule that applies it itself (DP-FedBuff's steps, gossip's local
        DP, DP at the edge); ``selected(rnd)`` is DP-FedAvg's data-independent divisor. A rule whose
        aggregate is one mean is wrapped by ``fedrl.rules.private.Private`` instead: nothing here."""

    def merge_moments(self, slot: int, replies: list[Reply]) -> None:
        """Pool the replies' observation statistics into slot ``slot``'s (Chan et al.'s merge)."""
        m = self.moments[slot]
        if m is None:
            return
        for r in replies:
            if r.obs_moments is not None:
                m = m.merge(r.obs_moments)
        self.moments[slot] = m

    def observe(self, moments: Moments) -> None:
        """Merge the server's own rollout statistics into every slot's (``algo.norm-obs = server``:
        every slot holds the same statistics, so a hierarchy's edges share the cloud's)."""
        m = self.moments[0]
        assert m is not None  # the caller checked that observation statistics are on
        self.moments = [m.merge(moments)] * len(self.moments)

    def label(self) -> str:
        """The rule's name in log lines and ``aggregation_failed``."""
        return self.cfg.strategy.name

    def row_fields(self, rnd: int) -> dict[str, Any]:
        """What the rule adds to round ``rnd``'s metrics.jsonl row (none by default)."""
        return {}

    def summary_fields(self, rnd: int) -> dict[str, Any]:
        """What the rule adds to summary.json after round ``rnd`` (none by default)."""
        return {}

    # --- state ------------------------------------------------------------------------------
    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON metadata, arrays): the models, their statistics and the server optimizer."""
        arrays: dict[str, np.ndarray] = {}
        for s, (w, m) in enumerate(zip(self.models, self.moments, strict=True)):
            arrays.update({f"model{s}/{i}": a for i, a in enumerate(w)})
            if m is not None:
                arrays[f"moments{s}"] = m.to_array()
        arrays.update(self.optimizer.to_arrays())
        return {}, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """The inverse of ``state_dict`` (the caller has checked shapes: ``fedrl.server.snapshot_checks``)."""
        n = len(self.models[0])
        for s in range(len(self.models)):
            self.models[s] = [arrays[f"model{s}/{i}"].astype(np.float32) for i in range(n)]
            if self.moments[s] is not None:
                self.moments[s] = Moments.from_array(arrays[f"moments{s}"])
        self.optimizer.load_arrays(arrays)

    def save(self) -> Saved:
        # Copies: the guard must give back the previous model bit for bit whatever a rule does in place.
        return Saved([[w.copy() for w in m] for m in self.models], list(self.moments),
                     {"optimizer": {k: v.copy() for k, v in self.optimizer.to_arrays().items()}})

    def restore(self, saved: Saved, broken: list[int]) -> None:
        """Undo an aggregation that left slots ``broken`` non-finite. Slots share the server
        optimizer (and the cloud), so by default all of it goes back."""
        for s in range(len(self.models)):
            self.models[s] = list(saved.models[s])
            self.moments[s] = saved.moments[s]
        self.optimizer.load_arrays(saved.extra["optimizer"])
