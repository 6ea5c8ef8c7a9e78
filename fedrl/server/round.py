"""One round, the same for plain, secure and asynchronous transports, and the loop that runs them.

A round goes through the server's stages in one order::

    plan        Federation.begin_round   broadcasts; the clip norm the round releases under
    selection   Federation.select        (asynchronous rounds send to idle nodes instead)
    exchange    Exchange.train           plans out; replies (each checked and decoded once) or sums back
    aggregate   Delivery.conclude        the rule's step, privacy, the model guard; who delivered
    record      Federation.completed     ε, the clip norm, the next round's schedule; then
                rundir.end_round         evaluation, metrics row, checkpoint, progress line

Only the exchange differs between transports, and it decides nothing about the federation:
which kind a run uses is the server's (``Federation.exchange_kind``); ``fedrl.flower`` has one
``Exchange`` per kind that moves messages on Flower's Grid.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from fedrl.runfolder.results import RunFolder
from fedrl.server.delivery import Delivery
from fedrl.server.federation import Federation
from fedrl.server.rundir import end_round, stops_for_budget


class Exchange(Protocol):
    """A transport's part of a round."""

    def train(self, fed: Federation, rnd: int, chosen: list[int]) -> Delivery:
        """Send round ``rnd``'s plans (``fed.plan``) to ``chosen`` (an asynchronous exchange: to
        its idle nodes, until the rule steps) and return what came back, checked (``fed.check``)."""
        ...


def play_round(fed: Federation, exchange: Exchange, rnd: int) -> dict[str, Any]:
    """Round (or asynchronous server step) ``rnd`` through every stage; its metrics.jsonl fields."""
    fed.begin_round(rnd)
    chosen = fed.select(rnd) if fed.exchange_kind != "asynchronous" else []
    delivery = exchange.train(fed, rnd, chosen)
    return delivery.conclude(fed, rnd) | fed.completed(rnd)


def run_rounds(fed: Federation, exchange: Exchange, folder: RunFolder, started: float) -> None:
    """Rounds from the one after ``fed.round`` to ``num-server-rounds``, each recorded, until the
    privacy budget or ``eval.stop-at-target`` ends the run."""
    for rnd in range(fed.round + 1, fed.cfg.num_server_rounds + 1):
        if stops_for_budget(fed, rnd):
            break
        t0 = time.time()
        if end_round(fed, folder, started, t0, play_round(fed, exchange, rnd)):
            break
