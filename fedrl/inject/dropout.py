"""Injected node failures for experiments and tests (``nodes.dropout-prob``, ``nodes.dropout-stage``).

Whether node ``i`` fails in round ``r`` is a pure function of (seed, round, node), so a rerun
fails the same nodes at the same stage, and the decision is made where the failure happens
(the node itself), not by the server. A failing node raises ``InjectedDropout`` instead of
answering; the server sees an error reply and treats the node as dropped at that stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedrl.seeding import DROPOUT, derive

if TYPE_CHECKING:
    from fedrl.config import Config

SECAGG_STAGES = ("advertise", "share", "mask", "unmask")
STAGES = ("train", *SECAGG_STAGES)


class InjectedDropout(RuntimeError):
    """Raised by a node that ``nodes.dropout-prob`` made fail at this stage."""


def failing_stage(cfg: Config, rnd: int, node: int) -> str | None:
    """The stage at which ``node`` fails in round ``rnd``, or None if it does not fail."""
    p = cfg.nodes.dropout_prob
    if p <= 0:
        return None
    rng = np.random.default_rng(derive(cfg.seed, DROPOUT, rnd, node))
    if rng.random() >= p:
        return None
    stages = STAGES if cfg.secagg.enabled else ("train",)
    if cfg.nodes.dropout_stage == "any":
        return str(stages[int(rng.integers(len(stages)))])
    return cfg.nodes.dropout_stage


def maybe_fail(cfg: Config, rnd: int, node: int, stage: str) -> None:
    """Raise ``InjectedDropout`` if ``node`` is set to fail at ``stage`` in round ``rnd``."""
    if failing_stage(cfg, rnd, node) == stage:
        raise InjectedDropout(f"node {node} dropped out at stage '{stage}' of round {rnd} (nodes.dropout-prob)")
