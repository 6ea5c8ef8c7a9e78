"""ServerApp of the latency benchmark: the round-latency floor of Flower's Deployment Engine.

Run config: ``mode`` (``fedrl``: push with ``grid.push_messages`` and poll ``grid.pull_messages``
every 20-50 ms via ``fedrl.flower.transport.push_and_collect``; ``flower``: ``Grid.send_and_receive``,
which in Flower 1.42's Deployment Engine (``flwr.superlink.grid.http_grid.HttpGrid``) sleeps a
fixed 3 s after every pull that leaves replies outstanding), ``rounds``, ``out``, ``nodes``.

Waits until ``nodes`` SuperNodes are connected, runs one untimed warm-up round, then ``rounds``
timed rounds; a round sends one empty ``train`` message to each of the first ``nodes`` SuperNodes
at once and ends when all have replied. Every SuperNode must reply without error, else the
ServerApp raises and writes nothing. On success it writes ``{"mode", "nodes", "round_s"}`` as JSON
to ``out``. In deployment every message a SuperNode receives runs in a fresh ClientApp process,
so each round's time includes starting that process.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from fedrl.flower.transport import push_and_collect

TIMEOUT_S = 60.0  # per round
WAIT_S = 120.0  # for the SuperNodes to connect

app = ServerApp()


def _round(grid: Grid, mode: str, node_ids: list[int]) -> float:
    """One round; its wall time in seconds. Raises unless every node replied without error."""
    msgs = [Message(RecordDict(), dst_node_id=n, message_type="train") for n in node_ids]
    t0 = time.perf_counter()
    if mode == "fedrl":
        replies = push_and_collect(grid, msgs, TIMEOUT_S)
    elif mode == "flower":
        replies = list(grid.send_and_receive(msgs, timeout=TIMEOUT_S))
    else:
        raise ValueError(f"mode must be 'fedrl' or 'flower', not {mode!r}")
    dt = time.perf_counter() - t0
    ok = {r.metadata.src_node_id for r in replies if not r.has_error()}
    if ok != set(node_ids):
        errors = [r.error.reason for r in replies if r.has_error()]
        raise RuntimeError(f"{len(ok)}/{len(node_ids)} nodes replied without error; errors: {errors}")
    return dt


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    mode, rounds, nodes, out = str(cfg["mode"]), int(cfg["rounds"]), int(cfg["nodes"]), Path(str(cfg["out"]))
    deadline = time.monotonic() + WAIT_S
    while len(node_ids := sorted(grid.get_node_ids())) < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(node_ids)} of {nodes} SuperNodes connected within {WAIT_S} s")
        time.sleep(0.5)
    node_ids = node_ids[:nodes]
    _round(grid, mode, node_ids)  # warm-up
    round_s = [_round(grid, mode, node_ids) for _ in range(rounds)]
    out.write_text(json.dumps({"mode": mode, "nodes": nodes, "round_s": round_s}))
