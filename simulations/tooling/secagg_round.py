"""Run one whole fedrl SecAgg round in-process: for tests, benchmarks and dropout experiments.

Test tooling, not runtime code: the ServerApp and ClientApp drive :mod:`fedrl.secagg` through
``fedrl.flower.secure_exchange`` and ``fedrl.flower.secure_client`` instead.

Every client stage starts from a session rebuilt from plain arrays, as it would in a fresh
process, and the params travel as arrays too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrl.secagg.client import ClientSession
from fedrl.secagg.params import Params
from fedrl.secagg.ring import RingVector
from fedrl.secagg.server import SecAggServer

DROP_STAGES = ("advertise", "share", "mask", "unmask")

Inputs = Mapping[int, np.ndarray]
"""``{node: ring vector}``: one input per node of the round's params."""

Drop = Mapping[str, set[int]]
"""``{stage: nodes}``: the nodes that send nothing from ``stage`` (one of :data:`DROP_STAGES`) on."""

Tamper = Callable[[str, dict[int, Any]], dict[int, Any]]
"""``tamper(stage, messages) -> messages``: edits what clients send to the server at ``stage``
(``{node: message}``), e.g. to corrupt or replay a message in transit."""


@dataclass(frozen=True, eq=False)
class RoundOutcome:
    """Result of a completed round: the ring sum and who it covers."""

    total: RingVector
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]


def simulate_round(
    inputs: Inputs, params: Params, drop: Drop | None = None, tamper: Tamper | None = None
) -> RoundOutcome:
    """Run all stages; nodes in ``drop[stage]`` send nothing from that stage on.

    Args:
        inputs: one ring vector per node of ``params.nodes``.
        params: the round's parameters.
        drop: ``{stage: nodes}`` with stages among :data:`DROP_STAGES`.
        tamper: optional hook applied to each stage's client messages before the server sees them.

    Raises:
        SecAggAbort: when the server aborts (nothing is returned).
        ValueError: on inputs for other nodes than ``params.nodes`` or an unknown drop stage.
    """
    drop = dict(drop or {})
    if set(drop) - set(DROP_STAGES):
        raise ValueError(f"drop stages must be among {DROP_STAGES}, got {sorted(drop)}")
    if set(inputs) != set(params.nodes):
        raise ValueError("inputs must have exactly one vector per node of params.nodes")
    hook: Tamper = tamper or (lambda _stage, msgs: msgs)
    wire = params.to_arrays()
    states: dict[int, dict[str, np.ndarray]] = {}
    gone: set[int] = set()

    def run(stage: str, nodes: list[int], call: Callable[[ClientSession, int], Any]) -> dict[int, Any]:
        gone.update(drop.get(stage, set()))
        p = Params.from_arrays(wire)
        out: dict[int, Any] = {}
        for u in nodes:
            if u in gone:
                continue
            session = ClientSession.new(u, p) if stage == "advertise" else ClientSession.from_arrays(u, p, states[u])
            out[u] = call(session, u)
            states[u] = session.to_arrays()
        return hook(stage, out)

    server = SecAggServer(params)
    keys = server.collect_keys(run("advertise", list(params.nodes), lambda s, u: s.advertise()))
    routed = server.collect_shares(run("share", sorted(keys), lambda s, u: s.share(keys[u])))
    survivors, dropped = server.collect_masked(run("mask", sorted(routed), lambda s, u: s.mask(inputs[u], routed[u])))
    total = server.unmask(run("unmask", survivors, lambda s, u: s.unmask(survivors, dropped)))
    return RoundOutcome(total, server.survivors, server.dropped)


def run_round(inputs: Inputs, params: Params, drop: Drop | None = None, tamper: Tamper | None = None) -> RingVector:
    """The ring sum of the survivors' inputs from :func:`simulate_round`; raises ``SecAggAbort``."""
    return simulate_round(inputs, params, drop, tamper).total
