"""Moving messages between the ServerApp and logical nodes on Flower's ``Grid``.

Discovery maps logical nodes onto SuperNodes (``NodeMap``); ``exchange`` sends one content per
logical node in waves, so a SuperNode that serves several logical nodes never holds two
messages at once (Flower's simulation worker updates a node's ``context.state`` without a
lock), polls for the replies, and counts every byte that crosses the wire.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from fedrl.config import Config
from fedrl.federation import Federation, Reply
from fedrl.flower import codec

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


def exchange(grid: Grid, fed: Federation, nm: NodeMap, contents: dict[int, RecordDict], mtype: str,
             rnd: int) -> dict[int, Message | None]:
    """Send each logical node its content (in waves) and return its reply (None: none in time).

    Every byte that crosses the wire is counted, usable or not.
    """
    out: dict[int, Message | None] = {}
    for wave in _waves(list(contents), nm):
        msgs = [Message(contents[n], dst_node_id=nm.supernode(n), message_type=mtype, group_id=str(rnd))
                for n in wave]
        fed.bytes_down += sum(codec.wire_bytes(m) for m in msgs)
        sent = list(grid.push_messages(msgs))
        replies = _collect(grid, sent, fed.cfg.nodes.reply_timeout_s)
        for mid, node in zip(sent, wave, strict=True):
            r = replies.get(mid)
            if r is not None and r.has_content():
                fed.bytes_up += codec.wire_bytes(r)
            out[node] = r
    return out


def check_reply(fed: Federation, r: Message | None, node: int) -> Reply | str:
    """The decoded reply if it may enter the aggregate, else why not."""
    why = failure(r)
    if why is not None or r is None:
        return why or "no reply"
    try:
        reply = codec.decode_reply(r.content)
    except (codec.WireError, ValueError) as err:
        return f"malformed reply: {err}"
    why = fed.validate(reply, node)
    return reply if why is None else why


def failure(r: Message | None) -> str | None:
    """Why a reply is no answer at all (timeout or client error), else None."""
    if r is None:
        return "no reply before nodes.reply-timeout-s"
    if r.has_error():
        return f"client error: {short_reason(r.error.reason or '')}"
    return None


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
            delay = min(0.05, delay * 1.5)  # short stages (secure aggregation) must not wait on the poll
    return out


def short_reason(reason: str) -> str:
    """The exception message inside an engine's error report (Ray wraps it in a traceback)."""
    tail = reason.rsplit("Message: ", 1)[-1].strip()
    return tail.removesuffix("'>")
