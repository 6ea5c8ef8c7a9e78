"""The ServerApp's run on Flower's Message API (a ``Grid``): discovery, then the server's rounds.

The round itself is the server's (``fedrl.server.round``: plan, selection, exchange, aggregation,
record); this module only picks the ``Exchange`` for the run's kind (``Federation.exchange_kind``:
plain, secure or asynchronous) and wires it to the discovered SuperNodes.
"""

from __future__ import annotations

import time
from pathlib import Path

from flwr.serverapp import Grid

from fedrl.config import Config
from fedrl.flower.async_exchange import AsyncExchange
from fedrl.flower.plain_exchange import PlainExchange
from fedrl.flower.secure_exchange import SecureExchange
from fedrl.flower.transport import NodeMap, discover
from fedrl.server.federation import Federation
from fedrl.server.round import Exchange, run_rounds
from fedrl.server.rundir import finish, resolve_run_folder

EXCHANGES: dict[str, type[PlainExchange | SecureExchange | AsyncExchange]] = {
    "plain": PlainExchange, "secure": SecureExchange, "asynchronous": AsyncExchange}


def exchange_for(grid: Grid, fed: Federation, nm: NodeMap) -> Exchange:
    return EXCHANGES[fed.exchange_kind](grid, nm)


def run(grid: Grid, cfg: Config) -> Path:
    """Run (or resume) the whole experiment; return the run folder."""
    fed = Federation(cfg)
    folder = resolve_run_folder(fed)
    started = time.time()
    nm = discover(grid, cfg)
    if (line := fed.privacy_line()) is not None:
        print(line, flush=True)
    run_rounds(fed, exchange_for(grid, fed, nm), folder, started)
    fed.ran(time.time() - started)
    finish(fed, folder)
    return folder.path
