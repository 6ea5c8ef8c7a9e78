"""Which logical nodes go in which message: a round's nodes in waves.

A wave sends each SuperNode at most one message, with at most ``cohort`` of the logical nodes it
hosts (``nodes.cohort-size``); the next wave goes once the whole wave before it is back. So a
SuperNode never holds two messages at once (Flower's simulation worker updates a node's
``context.state`` without a lock), and a SuperNode's nodes beyond the cap cost a round trip.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

log = logging.getLogger("fedrl")

_NOTED: set[int] = set()  # the cohort sizes said to be too small in this process


def waves(nodes: list[int], supernode: Callable[[int], int], cohort: int = 1) -> list[list[list[int]]]:
    """Batches of ``nodes``, in order: one batch per SuperNode (``supernode(node)``) per wave, at
    most ``cohort`` nodes a batch. With cohorts, a second wave is reported once (``note``)."""
    out: list[list[list[int]]] = []
    pending = list(nodes)
    while pending:
        batches: dict[int, list[int]] = {}
        for n in pending:
            batch = batches.setdefault(supernode(n), [])
            if len(batch) < cohort:
                batch.append(n)
        wave = list(batches.values())
        taken = {n for batch in wave for n in batch}
        pending = [n for n in pending if n not in taken]
        out.append(wave)
    if cohort > 1 and len(out) > 1:
        note(nodes, supernode, cohort, len(out))
    return out


def note(nodes: list[int], supernode: Callable[[int], int], cohort: int, count: int) -> None:
    """Say once per cohort size that a SuperNode's share of the round did not fit one message,
    and the cap that would have sent it one."""
    if cohort in _NOTED:
        return
    _NOTED.add(cohort)
    most = max(Counter(supernode(n) for n in nodes).values())
    log.info("a SuperNode hosts %d of this round's nodes, more than nodes.cohort-size = %d: they go in %d "
             "waves of messages, one after another; a cohort size of at least %d sends each SuperNode one "
             "message (memory allowing)", most, cohort, count, most)
