"""Central (and local) client-level DP around a rule, as Flower's DP strategies wrap a Strategy.

``Private(inner, privacy, selected)`` replaces the inner rule's mean by DP-FedAvg's
(``fedrl.privacy.server.ServerPrivacy.mean``: every update clipped again, Gaussian noise on the
sum, divided by the nodes *selected*; in local mode the updates arrive noised and their plain
mean is post-processing) and then steps the inner rule's model with its own server step.
Everything else (models, state, evaluation) is the inner rule's. Only a rule whose aggregate is
a mean and a step (``privatizable``) can be wrapped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedrl.aggregation.server_opt import ServerOptimizer
from fedrl.compression.downlink import Broadcaster, Downlink
from fedrl.model.layout import flatten, unflatten
from fedrl.model.moments import Moments
from fedrl.privacy.server import ServerPrivacy
from fedrl.rules.base import Model, Saved, ServerRule, Update
from fedrl.topology.gossip import Mix
from fedrl.wire import Reply


class Private(ServerRule):
    def __init__(self, inner: ServerRule, privacy: ServerPrivacy, selected: Callable[[int], float]) -> None:
        if not inner.privatizable:
            raise ValueError(f"{inner.label()} cannot be wrapped by central DP (its aggregate is not a mean)")
        self.inner, self.privacy, self.selected = inner, privacy, selected
        self.cfg = inner.cfg
        self.per_node, self.accepts_sums = inner.per_node, inner.accepts_sums  # type: ignore[misc]

    def aggregate(self, updates: list[Update], rnd: int) -> None:
        if not updates:
            return
        below = [u.reply.metrics.get("clip_below") for u in updates]
        flat = self.privacy.mean([flatten(u.delta) for u in updates], self.selected(rnd), rnd, below)
        self.inner.step(unflatten(flat, self.inner.models[0]), rnd)
        self.inner.merge_moments(0, [u.reply for u in updates])

    # Everything else is the inner rule's.
    @property
    def models(self) -> list[Model]:
        return self.inner.models

    @models.setter
    def models(self, value: list[Model]) -> None:
        self.inner.models = value

    @property
    def moments(self) -> list[Moments | None]:
        return self.inner.moments

    @moments.setter
    def moments(self, value: list[Moments | None]) -> None:
        self.inner.moments = value

    @property
    def optimizer(self) -> ServerOptimizer:
        return self.inner.optimizer

    @optimizer.setter
    def optimizer(self, value: ServerOptimizer) -> None:
        self.inner.optimizer = value

    def slot(self, node: int) -> int:
        return self.inner.slot(node)

    def server_model(self, rnd: int) -> Model:
        return self.inner.server_model(rnd)

    def node_models(self, rnd: int) -> list[Model]:
        return self.inner.node_models(rnd)

    def downlink(self, node: int, rnd: int, casts: list[Broadcaster], held: int | None) -> Downlink | Mix:
        return self.inner.downlink(node, rnd, casts, held)

    def proximal_mu(self, node: int, rnd: int) -> float:
        return self.inner.proximal_mu(node, rnd)

    def adopt(self, weights: Model, moments: Moments | None) -> None:
        self.inner.adopt(weights, moments)

    def step(self, mean: Model, rnd: int) -> None:
        self.inner.step(mean, rnd)

    def step_slots(self, means: dict[int, Model], rnd: int) -> None:
        self.inner.step_slots(means, rnd)

    def dp_share(self, slot: int) -> float:
        return self.inner.dp_share(slot)

    def merge_moments(self, slot: int, replies: list[Reply]) -> None:
        self.inner.merge_moments(slot, replies)

    def label(self) -> str:
        return self.inner.label()

    def row_fields(self, rnd: int) -> dict[str, Any]:
        return self.inner.row_fields(rnd)

    def summary_fields(self, rnd: int) -> dict[str, Any]:
        return self.inner.summary_fields(rnd)

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return self.inner.state_dict()

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.inner.load_state_dict(meta, arrays)

    def save(self) -> Saved:
        return self.inner.save()

    def restore(self, saved: Saved, broken: list[int]) -> None:
        self.inner.restore(saved, broken)
