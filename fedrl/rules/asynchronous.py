"""Asynchronous rules (no round barrier; ``fedrl.flower.async_loop`` drives them): FedBuff
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

from fedrl.aggregation.asynchronous import AsyncState, Buffered, Versions, async_mix, buffered_mean, staleness_weight
from fedrl.aggregation.fedavg import delta_of
from fedrl.rules.base import Model, RuleSetup, ServerRule, Update
from fedrl.wire import Reply

Guard = Callable[[str, Callable[[], None]], None]


class Asynchronous(ServerRule):
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
    def receive(self, reply: Reply, version: int, base: Model, now: int, guard: Guard) -> list[tuple[int, int]]:
        guard("fedbuff", lambda: self.merge_moments(0, [reply]))
        self.state.buffer.append(Buffered(reply.node, delta_of(reply.weights, base), reply.env_steps, version))
        return self.flush(now, guard) if len(self.state.buffer) >= self.cfg.strategy.buffer else []

    def flush(self, now: int, guard: Guard) -> list[tuple[int, int]]:
        """FedBuff: step with what is buffered (normally K updates); (node, staleness) of each."""
        entries, self.state.buffer = self.state.buffer, []
        if entries:
            guard("fedbuff", lambda: self.step(buffered_mean(entries, now, self.cfg.strategy.staleness_exponent),
                                               now + 1))
        return [(e.node, now - e.version) for e in entries]
