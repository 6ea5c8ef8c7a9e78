"""The ServerApp's round loop on Flower's Message API (a ``Grid``).

Per round: select logical nodes, send each its plan (``transport.exchange``: in waves, so a
SuperNode that serves several logical nodes never gets two at once), check every reply (errors,
node id, shapes or payload, finite values, ``fedrl.guards``) and leave out bad ones with a log line,
aggregate (a non-finite result is undone and recorded as ``aggregation_failed``), evaluate, log one
progress line, append to metrics.jsonl and checkpoint atomically. With ``secagg.enabled`` a round
is ``secure_round`` instead (three exchanges, keys sent ahead; the server sees only sums).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from flwr.serverapp import Grid

from fedrl.config import Config
from fedrl.federation import Federation
from fedrl.flower import codec
from fedrl.flower.async_loop import run_async
from fedrl.flower.secure_round import KeysAhead, secure_round
from fedrl.flower.transport import NodeMap, check_reply, discover, exchange, reap_late, rejoin
from fedrl.privacy.node import dpsgd_field
from fedrl.results import RunFolder
from fedrl.rundir import end_round, finish, resolve_run_folder, stops_for_budget
from fedrl.wire import Reply

log = logging.getLogger("fedrl")


def train_round(grid: Grid, fed: Federation, nm: NodeMap, rnd: int) -> tuple[list[Reply], dict[int, str]]:
    """Send plans to the selected nodes; return valid replies and {node: why excluded}."""
    good: list[Reply] = []
    bad: dict[int, str] = {}
    fed.begin_round(rnd)
    deadline = fed.cfg.round.deadline_s
    reap_late(grid, fed, nm)
    rejoin(grid, nm)
    chosen = fed.select(rnd)
    for node in chosen:
        if nm.busy(node):  # its SuperNode still runs a plan that missed an earlier deadline
            bad[node] = "still busy with an earlier round's plan (missed round.deadline-s)"
    plans = {node: codec.encode_plan(*fed.plan(node, rnd)) for node in chosen if node not in bad}
    for node, r in exchange(grid, fed, nm, plans, codec.TRAIN, rnd, deadline, fed.cfg.nodes.cohort_size).items():
        checked = check_reply(fed, r, node, deadline)
        if isinstance(checked, str):
            bad[node] = checked
        else:
            good.append(checked)
    for node, why in bad.items():
        log.warning("round %d: node %d left out: %s", rnd, node, why)
    fed.note_delivery(rnd, [r.node for r in good], list(bad))
    fed.selector.note(chosen, bad)
    return good, bad


def plain_round(grid: Grid, fed: Federation, nm: NodeMap, rnd: int) -> dict[str, Any]:
    """Round ``rnd`` without secure aggregation; return its fields for metrics.jsonl."""
    cfg = fed.cfg
    good, bad = train_round(grid, fed, nm, rnd)
    if not good and not bad:  # poisson selection drew nobody
        log.warning("round %d: no node was selected; the model is unchanged", rnd)
        return {"nodes_trained": [], "nodes_failed": {}}
    # "Enough" replies: min-train-nodes, or every selected node if fewer were selected.
    enough = min(cfg.min_train_nodes, len(good) + len(bad))
    if len(good) >= enough:
        fed.aggregate(good)
    else:
        fed.count_unused(good)
        log.warning("round %d: %d usable replies, fewer than min-train-nodes = %d; the model is unchanged",
                    rnd, len(good), cfg.min_train_nodes)
    return {
        **dpsgd_field(r.metrics for r in good),  # sample-level DP: the most any node has spent
        "nodes_trained": sorted(r.node for r in good), "nodes_failed": {str(k): v for k, v in bad.items()},
        "train_returns": {str(r.node): r.metrics.get("train_return") for r in good},
        "train_seconds": {str(r.node): r.metrics.get("train_seconds") for r in good},
        "optimizer_steps": {str(r.node): r.metrics.get("optimizer_steps") for r in good},
    }


def run(grid: Grid, cfg: Config) -> Path:
    """Run (or resume) the whole experiment; return the run folder."""
    fed = Federation(cfg)
    folder = resolve_run_folder(fed)
    started = time.time()
    nm = discover(grid, cfg)
    if fed.privacy is not None:
        print(fed.privacy.line(cfg.num_server_rounds), flush=True)
    if fed.asyn is not None:  # fedbuff, fedasync: no round barrier
        run_async(grid, fed, nm, folder, started)
    else:
        _run_rounds(grid, fed, nm, folder, started)
    fed.counters.ran(time.time() - started)
    finish(fed, folder)
    return folder.path


def _run_rounds(grid: Grid, fed: Federation, nm: NodeMap, folder: RunFolder, started: float) -> None:
    cfg = fed.cfg
    ahead = KeysAhead()  # public keys nodes made for their next secure session
    for rnd in range(fed.round + 1, cfg.num_server_rounds + 1):
        if stops_for_budget(fed, rnd):
            break
        t0 = time.time()
        fields = secure_round(grid, fed, nm, rnd, ahead) if cfg.secagg.enabled else plain_round(grid, fed, nm, rnd)
        fields |= fed.completed(rnd)  # why its aggregate was undone; with DP its ε and clip norm
        if end_round(fed, folder, started, t0, fields):
            break
