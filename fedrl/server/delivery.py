"""What an exchange brings back from a round, and how the server concludes the round with it.

Three kinds, one per transport, each with ``conclude(fed, rnd)``: the aggregation by the rule
(privacy and the model guard inside ``Federation``), what selection and the downlink learn from
who delivered, and the round's fields for metrics.jsonl.

- ``Replies``: a synchronous round's checked replies, each decoded once (``Federation.check``);
- ``Sums``: a secure round's unmasked ring totals, one per secure session (the star's one, or
  one per edge), which the server turns into mean updates (with DP: noise and the ledger step);
- ``Stepped``: an asynchronous server step the rule has already taken as replies arrived.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedrl.privacy.node import dpsgd_field
from fedrl.server import secure_sum
from fedrl.server.federation import Federation
from fedrl.wire import Reply

log = logging.getLogger("fedrl")


def _failed(bad: dict[int, str]) -> dict[str, str]:
    return {str(k): v for k, v in bad.items()}


def _enough(fed: Federation, usable: int, selected: int, rnd: int, what: str) -> bool:
    """Whether ``usable`` updates may move the model: ``min-train-nodes``, or every selected node
    if fewer were selected; says why not in the log."""
    if usable >= min(fed.cfg.min_train_nodes, selected):
        return True
    log.warning("round %d: %d %s, fewer than min-train-nodes = %d; the model is unchanged", rnd, usable, what,
                fed.cfg.min_train_nodes)
    return False


@dataclass
class Replies:
    """A synchronous round: the nodes sent a plan, their usable replies, and the rest with why."""

    asked: list[int]
    good: list[Reply]
    failed: dict[int, str]

    def conclude(self, fed: Federation, rnd: int) -> dict[str, Any]:
        for node, why in self.failed.items():
            log.warning("round %d: node %d left out: %s", rnd, node, why)
        fed.note_delivery(rnd, [r.node for r in self.good], list(self.failed))
        fed.note_selection(self.asked, list(self.failed))
        if not self.good and not self.failed:  # poisson selection drew nobody
            log.warning("round %d: no node was selected; the model is unchanged", rnd)
            return {"nodes_trained": [], "nodes_failed": {}}
        if _enough(fed, len(self.good), len(self.good) + len(self.failed), rnd, "usable replies"):
            fed.aggregate(self.good)
        else:
            fed.count_unused(self.good)
        good = self.good
        return {
            **dpsgd_field(r.metrics for r in good),  # sample-level DP: the most any node has spent
            "nodes_trained": sorted(r.node for r in good), "nodes_failed": _failed(self.failed),
            "train_returns": {str(r.node): r.metrics.get("train_return") for r in good},
            "train_seconds": {str(r.node): r.metrics.get("train_seconds") for r in good},
            "optimizer_steps": {str(r.node): r.metrics.get("optimizer_steps") for r in good},
        }


@dataclass
class SecureSum:
    """One secure session of a round: its model slot (-1: the star's one session, else an edge),
    its size and threshold, and the unmasked ring total of its survivors or why it aborted."""

    slot: int
    nodes: int
    threshold: int
    survivors: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    total: np.ndarray | None = None
    aborted: str | None = None

    @property
    def name(self) -> str:
        return "the round" if self.slot < 0 else f"edge {self.slot}"


@dataclass
class Sums:
    """A secure round: the selected nodes, those in a session (``asked``), each session's outcome,
    the nodes left out with why, and the transport's own fields (ring width, stage seconds)."""

    chosen: list[int]
    asked: list[int]
    sessions: list[SecureSum]
    failed: dict[int, str]
    fields: dict[str, Any]

    def conclude(self, fed: Federation, rnd: int) -> dict[str, Any]:
        if not self.chosen:  # poisson selection drew nobody
            log.warning("round %d: no node was selected; the model is unchanged", rnd)
            return {"nodes_trained": [], "nodes_failed": {}, "secagg_aborted": None}
        t0 = time.perf_counter()
        means, ratio_sum, survivors = self._means(fed, rnd)
        clock = self.fields.get("secagg_seconds")
        if isinstance(clock, dict):
            clock["server-unmask"] = clock.get("server-unmask", 0.0) + time.perf_counter() - t0
        fed.note_delivery(rnd, survivors, [n for n in self.chosen if n not in survivors])
        trained: list[int] = []
        if means and _enough(fed, len(survivors), len(self.chosen), rnd, "nodes in the secure sums"):
            fed.aggregate_sums(means, ratio_sum)
            trained = survivors
        return self._fields(fed, trained)

    def _means(self, fed: Federation, rnd: int) -> tuple[dict[int, np.ndarray], float, list[int]]:
        """Each unmasked session's mean update (DP: noised), the summed weight, the survivors; a
        session whose sum cannot be decoded aborts."""
        means: dict[int, np.ndarray] = {}
        ratio_sum, survivors = 0.0, []
        one = len(self.sessions) == 1  # one sum: its ledger step is taken with it (distributed DP's depends on it)
        for s in self.sessions:
            if s.total is None or s.aborted is not None:
                continue
            slot = max(s.slot, 0)
            try:
                mean, ratio = secure_sum.mean_update(fed, s.total, len(s.survivors), rnd, fed.dp_share(slot), one)
            except ValueError as err:
                s.aborted = str(err)
                log.warning("round %d: secure aggregation of %s aborted (%s); nothing of it was unmasked", rnd,
                            s.name, err)
                continue
            means[slot], ratio_sum = mean, ratio_sum + ratio
            survivors += s.survivors
            for n in s.dropped:
                self.failed.setdefault(n, "excluded by the secure-aggregation protocol")
        if means and not one:
            fed.account_sums()  # disjoint edges: one node's data is in one noised sum (parallel composition)
        return means, ratio_sum, survivors

    def _fields(self, fed: Federation, trained: list[int]) -> dict[str, Any]:
        fed.note_selection(self.asked, [n for n in self.failed if n in self.asked])  # deadline selection learns
        reasons = [f"{s.name}: {s.aborted}" if len(self.sessions) > 1 else s.aborted
                   for s in self.sessions if s.aborted]
        every = bool(self.sessions) and len(reasons) == len(self.sessions)
        out = {**self.fields, "nodes_trained": sorted(trained), "nodes_failed": _failed(self.failed),
               "secagg_aborted": "; ".join(r for r in reasons if r) if every else None}
        if any(s.slot >= 0 for s in self.sessions):
            out["secagg_edges"] = {str(s.slot): {"nodes": s.nodes, "threshold": s.threshold,
                                                 "survivors": len(s.survivors) if not s.aborted else 0,
                                                 "aborted": s.aborted} for s in self.sessions}
        return out


@dataclass
class Stepped:
    """An asynchronous server step: the (node, staleness) the rule stepped with (already applied,
    ``Federation.receive_async``), the nodes that failed since the last step, the returns reported."""

    applied: list[tuple[int, int]]
    failed: dict[int, str] = field(default_factory=dict)
    returns: dict[int, float | None] = field(default_factory=dict)

    def conclude(self, fed: Federation, rnd: int) -> dict[str, Any]:
        return {"nodes_trained": [n for n, _ in self.applied], "staleness": [t for _, t in self.applied],
                "nodes_failed": _failed(self.failed), "train_returns": {str(k): v for k, v in self.returns.items()}}


Delivery = Replies | Sums | Stepped
