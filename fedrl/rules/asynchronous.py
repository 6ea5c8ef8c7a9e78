"""Asynchronous rules (no round barrier; ``fedrl.flower.async_exchange`` drives them): FedBuff
(Nguyen et al., AISTATS 2022) steps once ``strategy.buffer`` updates are buffered; FedAsync
(Xie et al., 2019) mixes each update in as it arrives. An update ``tau`` versions old weighs
``(1 + tau)^-strategy.staleness-exponent`` (``fedrl.aggregation.asynchronous``).

A "round" is one server step. ``receive`` takes one checked reply that trained from model
``version`` (= ``base``) and returns the (node, staleness) of the updates applied if the server
stepped, else []. The versions in flight and FedBuff's buffer are not checkpointed (see
``AsyncState``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedrl.aggregation.asynchronous import AsyncState, Buffered, Versions, async_mix, buffered_mean, staleness_weight
from fedrl.aggregation.fedavg import delta_of
from fedrl.model.layout import flatten, unflatten
from fedrl.privacy.server import ServerPrivacy
from fedrl.rules.base import Model, RuleSetup, ServerRule, Update
from fedrl.wire import Reply

Guard = Callable[[str, Callable[[], None]], None]


class Asynchronous(ServerRule):
    no_sums = "secure aggregation needs a round's nodes to finish together"

    def __init__(self, setup: RuleSetup) -> None:
        super().__init__(setup)
        self.state = AsyncState()

    @property
    def versions(self) -> Versions:
        """The models in-flight nodes started from (the loop acquires and releases them)."""
        return self.state.versions

    def aggregate(self, updates: list[Update], rnd: int) -> None:
        raise TypeError(f"{self.label()} is asynchronous: replies go to receive(), one at a time")

    def receive(self, reply: Reply, version: int, base: Model, now: int, guard: Guard) -> list[tuple[int, int]]:
        raise NotImplementedError

    def flush(self, now: int, guard: Guard) -> list[tuple[int, int]]:
        """Step with what is buffered, if anything (the loop calls it when no node is in flight)."""
        return []


class FedAsync(Asynchronous):
    not_privatizable = "each update moves the model on arrival, with no sum to noise (DP-FedBuff has one)"

    def receive(self, reply: Reply, version: int, base: Model, now: int, guard: Guard) -> list[tuple[int, int]]:
        s = self.cfg.strategy
        tau = now - version

        def mix() -> None:
            self.merge_moments(0, [reply])
            self.models[0] = async_mix(self.models[0], reply.weights,
                                       s.mixing * staleness_weight(tau, s.staleness_exponent))

        guard("fedasync", mix)
        return [(reply.node, tau)]


class FedBuff(Asynchronous):
    """FedBuff; with ``privacy`` set (client-level DP, ``fedrl.server.federation``), DP-FedBuff: each server
    step is DP-FedAvg's mean of the buffer (``ServerPrivacy.mean``).

    The privacy argument: a node is never sent the same version twice and the version changes
    only at a step, so each buffer holds at most one update per node. Weighting nodes equally
    (not by env steps) and by staleness ``s(tau) <= 1`` moves the sum by at most the clip norm
    ``C`` per node, so a step is a Gaussian mechanism of sensitivity ``C`` on the buffer's sum,
    divided by ``strategy.buffer`` (fixed, whoever is in it). ``num-server-rounds`` steps compose as
    that many rounds with every node present (q = 1): no amplification is claimed from who
    happens to land in a buffer. Its inputs are the nodes' data and versions already released,
    so adaptive composition applies. As in synchronous rounds, who took part and when stays
    visible."""

    privacy: ServerPrivacy | None = None
    own_privacy = frozenset({"central", "local"})  # DP-FedBuff: each step is DP-FedAvg's mean of the buffer

    def use_privacy(self, privacy: ServerPrivacy | None, selected: Callable[[int], float]) -> None:
        self.privacy = privacy  # each server step divides by the buffer size, not by ``selected``

    def receive(self, reply: Reply, version: int, base: Model, now: int, guard: Guard) -> list[tuple[int, int]]:
        guard("fedbuff", lambda: self.merge_moments(0, [reply]))
        self.state.buffer.append(Buffered(reply.node, delta_of(reply.weights, base), reply.env_steps, version,
                                          reply.metrics.get("clip_below")))
        return self.flush(now, guard) if len(self.state.buffer) >= self.cfg.strategy.buffer else []

    def flush(self, now: int, guard: Guard) -> list[tuple[int, int]]:
        """FedBuff: step with what is buffered (normally K updates); (node, staleness) of each."""
        entries, self.state.buffer = self.state.buffer, []
        if entries:
            s = self.cfg.strategy
            if self.privacy is None:
                direction = buffered_mean(entries, now, s.staleness_exponent)
            else:  # DP-FedBuff: equal weights, noise on the sum, divided by K (see the class doc)
                flat = [flatten(e.delta) * np.float32(staleness_weight(now - e.version, s.staleness_exponent))
                        for e in entries]
                direction = unflatten(self.privacy.mean(flat, s.buffer, now + 1, [e.clip_below for e in entries]),
                                      self.models[0])
            guard("fedbuff", lambda: self.step(direction, now + 1))
        return [(e.node, now - e.version) for e in entries]
