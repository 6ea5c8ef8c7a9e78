"""Moving messages between the ServerApp and logical nodes on Flower's ``Grid``.

Discovery maps logical nodes onto SuperNodes (``NodeMap``); ``exchange`` sends one content per
logical node in waves (``fedrl.flower.waves``: a SuperNode that serves several logical nodes
never holds two messages at once), or several nodes' contents in one cohort message
(``nodes.cohort-size``), polls for the
replies, splits them into one ``Answer`` per logical node, and counts every byte that crosses
the wire.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from fedrl.config import Config
from fedrl.flower import codec
from fedrl.flower.cohort_codec import content_of, decode_cohort
from fedrl.flower.waves import waves
from fedrl.server.federation import Federation
from fedrl.wire import Reply

log = logging.getLogger("fedrl")
T = TypeVar("T")
BUSY = "still busy with an earlier round's plan (missed round.deadline-s)"


@dataclass(frozen=True)
class Answer:
    """What came back for one logical node: its reply content, or why there is none (``why``:
    a client error, or a cohort reply that could not be split)."""

    content: RecordDict | None = None
    why: str | None = None

    @staticmethod
    def of(m: Message | None) -> Answer | None:
        """A Flower reply as an answer (None: no reply)."""
        if m is None:
            return None
        if m.has_error():
            return Answer(why=f"client error: {short_reason(m.error.reason or '')}")
        return Answer(content=m.content)


@dataclass(frozen=True)
class NodeMap:
    """SuperNode ids ordered by partition id; logical node i runs on ``ids[i % len(ids)]``.

    ``late`` holds the train messages that missed ``round.deadline-s`` and are still running
    (logical node -> (message id, sent at)): their SuperNode gets nothing new until they are back.
    """

    ids: list[int]
    late: dict[int, tuple[str, float]] = field(default_factory=dict)
    parts: list[int] = field(default_factory=list)  # the partition id each of ``ids`` announced
    strangers: set[int] = field(default_factory=set)  # not to ask again: no known partition, or replaced

    def supernode(self, node: int) -> int:
        return self.ids[node % len(self.ids)]

    def busy(self, node: int) -> bool:
        """Whether ``node``'s SuperNode still runs a late message (for any logical node)."""
        return any(self.supernode(n) == self.supernode(node) for n in self.late)


def reap_late(grid: Grid, fed: Federation, nm: NodeMap) -> None:
    """Take back late replies (counted on the wire, then dropped: their round is over) and give up
    on any silent past ``round.timeout-s``."""
    if not nm.late:
        return
    by_id: dict[str, list[int]] = {}
    for node, (mid, _) in nm.late.items():
        by_id.setdefault(mid, []).append(node)  # a cohort's nodes share one message
    for m in grid.pull_messages(list(by_id)):
        nodes = by_id[m.metadata.reply_to_message_id]
        if m.has_content():
            fed.count_received(codec.wire_bytes(m))
        log.info("node(s) %s: a late reply arrived and was dropped (its round is over)", nodes)
        for node in nodes:
            del nm.late[node]
    now = time.monotonic()
    for node, (_, sent) in list(nm.late.items()):
        if now - sent > fed.cfg.round.timeout_s:
            del nm.late[node]


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
            answers = _ask_partitions(grid, new, max(5.0, deadline - time.monotonic()))
            known |= {n: a for n, a in answers.items() if a is not None}
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
    return NodeMap(ids, parts=[known[n][0] for n in ids])


def rejoin(grid: Grid, nm: NodeMap) -> None:
    """Let a restarted SuperNode take its partition's place again.

    A SuperNode that restarts registers under a new node id; asked which partition it serves, it
    replaces the id that announced the same partition at discovery (that one is dead or will be
    treated as such). A new SuperNode for a partition nobody announced is left out: the node map
    is fixed at discovery. Costs one ``get_node_ids`` call per round when nothing changed.
    """
    new = [n for n in grid.get_node_ids() if n not in nm.ids and n not in nm.strangers]
    if not new:
        return
    answers = _ask_partitions(grid, new, 10.0)
    for n in new:
        if n not in answers:
            log.warning("SuperNode %d did not say which partition it serves within 10 s; asking again next round", n)
            continue
        answer = answers[n]
        part = answer[0] if answer is not None else None
        if part is not None and part in nm.parts:
            slot = nm.parts.index(part)
            log.info("SuperNode %d serves partition %d again (it was SuperNode %d)", n, part, nm.ids[slot])
            for node in [k for k in nm.late if nm.supernode(k) == nm.ids[slot]]:
                del nm.late[node]  # the old SuperNode's late work is lost with it
            nm.strangers.add(nm.ids[slot])  # Flower lists a dead SuperNode for about a minute: never ask it
            nm.ids[slot] = n
        else:  # answered, but for no partition in the map (or with an error): never ask again
            nm.strangers.add(n)


def _ask_partitions(grid: Grid, ids: list[int], timeout: float) -> dict[int, tuple[int, int] | None]:
    """Ask SuperNodes which (partition-id, num-partitions) they serve: id -> answer, None for an
    error or malformed answer (logged); ids that did not answer in time are left out."""
    msgs = [Message(codec.encode_hello(), dst_node_id=n, message_type=codec.QUERY) for n in ids]
    out: dict[int, tuple[int, int] | None] = {}
    for r in push_and_collect(grid, msgs, timeout):
        n = r.metadata.src_node_id
        out[n] = None
        if r.has_error():
            continue
        try:
            out[n] = codec.decode_hello_reply(r.content)
        except codec.WireError as err:
            log.warning("SuperNode %d sent a malformed hello (%s); ignored", n, err)
    return out


def exchange(grid: Grid, fed: Federation, nm: NodeMap, contents: dict[int, RecordDict], mtype: str,
             rnd: int, deadline_s: float = 0.0, cohort: int = 1) -> dict[int, Answer | None]:
    """Send each logical node its content (in waves) and return its answer (None: none in time).

    With ``cohort > 1`` a SuperNode gets up to ``cohort`` of its logical nodes' contents in one
    message (``fedrl.flower.cohort_codec``) and answers for each. Every byte that crosses the
    wire is counted, usable or not. With ``deadline_s`` a wave waits at most that long, and
    messages still out are kept in ``nm.late``.
    """
    out: dict[int, Answer | None] = {}
    timeout = min(deadline_s, fed.cfg.round.timeout_s) if deadline_s > 0 else fed.cfg.round.timeout_s
    for wave in waves(list(contents), nm.supernode, cohort):
        msgs = [Message(content_of([contents[n] for n in batch]), dst_node_id=nm.supernode(batch[0]),
                        message_type=mtype, group_id=str(rnd)) for batch in wave]
        fed.count_sent(sum(codec.wire_bytes(m) for m in msgs))
        sent = list(grid.push_messages(msgs))
        t0 = time.monotonic()
        replies = _collect(grid, sent, timeout)
        for mid, batch in zip(sent, wave, strict=True):
            r = replies.get(mid)
            if r is not None and r.has_content():
                fed.count_received(codec.wire_bytes(r))
            if r is None and deadline_s > 0:
                nm.late.update({node: (mid, t0) for node in batch})
            out.update(split_answers(r, batch))
    return out


def split_answers(r: Message | None, batch: list[int]) -> dict[int, Answer | None]:
    """Each node's answer in a reply to one message (one node, or a cohort)."""
    answer = Answer.of(r)
    if len(batch) == 1 or answer is None or answer.content is None:
        return dict.fromkeys(batch, answer)
    try:
        members = decode_cohort(answer.content, len(batch))
        if len(members) != len(batch):
            raise codec.WireError(f"{len(members)} member replies for {len(batch)} plans")
    except Exception as err:  # noqa: BLE001 - a hostile SuperNode's bytes never end the round
        return dict.fromkeys(batch, Answer(why=f"malformed cohort reply: {err}"))
    return {node: Answer(why=f"client error: {m}") if isinstance(m, str) else Answer(content=m)
            for node, m in zip(batch, members, strict=True)}


def check_reply(fed: Federation, r: Answer | None, node: int, deadline_s: float = 0.0) -> Reply | str:
    """The decoded reply if it may enter the aggregate, else why not (never raises).

    The reply is decoded against the layout of the model ``node`` was sent
    (``codec.decode_reply``), then checked by ``Federation.check``, which decodes a compressed
    update once: the reply returned carries it (``Reply.decoded``) into the aggregate.
    """
    layout = reply_layout(fed, node)

    def decode(content: RecordDict) -> Reply | str:
        return fed.check(codec.decode_reply(content, layout), node)

    checked, why = decode_reply_safely(r, decode, deadline_s)
    return why or "no reply" if checked is None else checked


def decode_reply_safely(r: Answer | None, decode: Callable[[RecordDict], T],
                        deadline_s: float = 0.0) -> tuple[T | None, str | None]:
    """``(decode(r.content), None)``, or ``(None, why the node is left out)``; never raises.

    Any exception while decoding one node's bytes (``codec.WireError`` or anything a hostile
    record makes Flower or numpy raise) is that node's exclusion, never the round's end.
    """
    why = failure(r, deadline_s)
    if why is not None or r is None or r.content is None:
        return None, why or "no reply"
    try:
        return decode(r.content), None
    except codec.WireError as err:
        return None, f"malformed reply: {err}"
    except Exception as err:  # noqa: BLE001 - one node's bytes must never take the round down
        return None, f"malformed reply: {type(err).__name__}: {err}".rstrip(": ")


def reply_layout(fed: Federation, node: int) -> codec.Layout:
    """What ``node``'s reply must look like: the shapes of the model it trains from, the observation size."""
    return codec.Layout(tuple(w.shape for w in fed.models[fed.slot(node)]), fed.obs_dim)


def failure(r: Answer | None, deadline_s: float = 0.0) -> str | None:
    """Why an answer is no reply at all (timeout, client error, a broken cohort reply), else None."""
    if r is None:
        return f"no reply within round.deadline-s = {deadline_s:g} s" if deadline_s > 0 else \
            "no reply before round.timeout-s"
    return r.why


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


def push_and_collect(grid: Grid, msgs: list[Message], timeout: float) -> list[Message]:
    """Push ``msgs`` and poll for their replies (fedrl's loop; replies in the order of ``msgs``, missing ones left out)."""
    ids = list(grid.push_messages(msgs))
    replies = _collect(grid, ids, timeout)
    return [replies[mid] for mid in ids if mid in replies]


def short_reason(reason: str) -> str:
    """The exception message inside an engine's error report (Ray wraps it in a traceback)."""
    tail = reason.rsplit("Message: ", 1)[-1].strip()
    return tail.removesuffix("'>")
