"""The ServerApp's round loop on Flower's Message API (a ``Grid``).

Per round: select logical nodes, send each its plan (in waves, so a SuperNode that serves
several logical nodes never gets two at once), check every reply (errors, node id,
shapes, finite values) and leave out bad ones with a log line, aggregate, evaluate,
log one progress line, append to metrics.jsonl and checkpoint atomically.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from flwr.app import Message
from flwr.serverapp import Grid

from fedrl.config import Config
from fedrl.federation import Federation, Reply
from fedrl.flower import codec
from fedrl.rundir import end_round, finish, resolve_run_folder

log = logging.getLogger("fedrl")


@dataclass(frozen=True)
class NodeMap:
    """SuperNode ids ordered by partition id; logical node i runs on ``ids[i % len(ids)]``."""

    ids: list[int]

    def supernode(self, node: int) -> int:
        return self.ids[node % len(self.ids)]


def discover(grid: Grid, cfg: Config) -> NodeMap:
    """Wait for SuperNodes and ask each which partition it serves.

    Done when every partition 0..P-1 announced by the nodes (``num-partitions`` of their
    node config) has answered, or when ``nodes.wait-s`` runs out with at least one node.
    """
    deadline = time.monotonic() + cfg.nodes.wait_s
    known: dict[int, tuple[int, int]] = {}
    while True:
        new = [n for n in grid.get_node_ids() if n not in known]
        if new:
            msgs = [Message(codec.encode_hello(), dst_node_id=n, message_type=codec.QUERY) for n in new]
            for r in grid.send_and_receive(msgs, timeout=max(5.0, deadline - time.monotonic())):
                if r.has_error():
                    continue
                try:
                    known[r.metadata.src_node_id] = codec.decode_hello_reply(r.content)
                except codec.WireError as err:
                    log.warning("SuperNode %d sent a malformed hello (%s); ignored", r.metadata.src_node_id, err)
        parts = {p for p, _ in known.values()}
        wanted = max((n for _, n in known.values()), default=0)
        if known and wanted > 0 and parts >= set(range(wanted)):
            break
        if time.monotonic() > deadline:
            if not known:
                raise RuntimeError(f"no SuperNode connected within nodes.wait-s = {cfg.nodes.wait_s} s")
            log.warning("nodes.wait-s elapsed: continuing with %d SuperNode(s)", len(known))
            break
        time.sleep(0.5)
    ids = sorted(known, key=lambda n: (known[n][0], n))
    log.info("%d SuperNode(s) serve %d logical nodes", len(ids), cfg.nodes.count)
    return NodeMap(ids)


def _waves(nodes: list[int], nm: NodeMap) -> Iterable[list[int]]:
    pending = list(nodes)
    while pending:
        used: set[int] = set()
        wave = []
        for n in pending:
            if nm.supernode(n) not in used:
                used.add(nm.supernode(n))
                wave.append(n)
        pending = [n for n in pending if n not in wave]
        yield wave


def train_round(grid: Grid, fed: Federation, nm: NodeMap, rnd: int) -> tuple[list[Reply], dict[int, str]]:
    """Send plans to the selected nodes; return valid replies and {node: why excluded}."""
    cfg = fed.cfg
    good: list[Reply] = []
    bad: dict[int, str] = {}
    fed.begin_round(rnd)
    for wave in _waves(fed.select(rnd), nm):
        msgs = []
        for node in wave:
            plan, dl = fed.plan(node, rnd)
            msg = Message(codec.encode_plan(plan, dl), dst_node_id=nm.supernode(node),
                          message_type=codec.TRAIN, group_id=str(rnd))
            fed.bytes_down += codec.wire_bytes(msg)
            msgs.append(msg)
        sent = list(grid.push_messages(msgs))
        node_of = dict(zip(sent, wave, strict=True))
        replies = _collect(grid, sent, cfg.nodes.reply_timeout_s)
        for mid, node in node_of.items():
            r = replies.get(mid)
            if r is not None and r.has_content():
                fed.bytes_up += codec.wire_bytes(r)  # it crossed the wire, usable or not
            checked = _check_reply(fed, r, node)
            if isinstance(checked, str):
                bad[node] = checked
                log.warning("round %d: node %d left out: %s", rnd, node, checked)
            else:
                good.append(checked)
    fed.note_delivery(rnd, [r.node for r in good], list(bad))
    return good, bad


def _collect(grid: Grid, ids: list[str], timeout: float) -> dict[str, Message]:
    # push/pull with a short poll beats send_and_receive's fixed sleeps (Flower 1.42).
    out: dict[str, Message] = {}
    deadline = time.monotonic() + timeout
    pending = set(ids)
    delay = 0.02
    while pending and time.monotonic() < deadline:
        for m in grid.pull_messages(list(pending)):
            out[m.metadata.reply_to_message_id] = m
            pending.discard(m.metadata.reply_to_message_id)
        if pending:
            time.sleep(delay)
            delay = min(0.25, delay * 1.5)
    return out


def _check_reply(fed: Federation, r: Message | None, node: int) -> Reply | str:
    """The decoded reply if it may enter the aggregate, else why not."""
    if r is None:
        return "no reply before nodes.reply-timeout-s"
    if r.has_error():
        return f"client error: {r.error.reason}"
    try:
        reply = codec.decode_reply(r.content)
    except (codec.WireError, ValueError) as err:
        return f"malformed reply: {err}"
    why = fed.validate(reply, node)
    return reply if why is None else why


def run(grid: Grid, cfg: Config) -> Path:
    """Run (or resume) the whole experiment; return the run folder."""
    fed = Federation(cfg)
    folder = resolve_run_folder(fed)
    started = time.time()
    nm = discover(grid, cfg)
    for rnd in range(fed.round + 1, cfg.num_server_rounds + 1):
        t0 = time.time()
        good, bad = train_round(grid, fed, nm, rnd)
        # "Enough" replies: min-train-nodes, or every selected node if fewer were selected.
        enough = min(cfg.min_train_nodes, len(good) + len(bad))
        if len(good) >= enough:
            fed.aggregate(good)
        else:
            fed.env_steps += sum(r.env_steps for r in good)
            log.warning("round %d: %d usable replies, fewer than min-train-nodes = %d; the model is unchanged",
                        rnd, len(good), cfg.min_train_nodes)
        fed.round = rnd
        fields = {
            "nodes_trained": sorted(r.node for r in good), "nodes_failed": {str(k): v for k, v in bad.items()},
            "train_returns": {str(r.node): r.metrics.get("train_return") for r in good},
            "train_seconds": {str(r.node): r.metrics.get("train_seconds") for r in good},
        }
        if end_round(fed, folder, started, t0, fields):
            break
    fed.wall_time_s += time.time() - started
    finish(fed, folder)
    return folder.path
