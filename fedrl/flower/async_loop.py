"""The ServerApp's loop for asynchronous rules (``strategy.name`` = fedbuff, fedasync).

No round barrier: every idle node (up to ``strategy.concurrency``; one message per SuperNode at a
time, carrying up to ``nodes.cohort-size`` of its idle logical nodes) is sent the current model
with ``push_messages``; replies are taken with ``pull_messages`` as
they arrive, each remembering the version it started from, and the server steps whenever the
rule says so (``Federation.receive_async``). A "round" in metrics.jsonl is one server step.

A node is not sent the same version twice: once it has trained from version v it waits for
v + 1. When every node has trained from the current version and nothing is in flight (some
replies failed), FedBuff steps with what it has, or the version passes unchanged, with a log line.
A node silent past ``round.timeout-s`` is counted failed and may be sent work again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid

from fedrl.federation import Federation
from fedrl.flower import codec
from fedrl.flower.cohort_codec import content_of
from fedrl.flower.transport import NodeMap, check_reply, split_answers
from fedrl.results import RunFolder
from fedrl.rundir import end_round, stops_for_budget

log = logging.getLogger("fedrl")
_POLL_S = 0.02


@dataclass
class _Round:
    """What happened since the last server step (one metrics.jsonl row)."""

    started: float = field(default_factory=time.time)
    failed: dict[int, str] = field(default_factory=dict)
    returns: dict[int, float | None] = field(default_factory=dict)

    def fields(self, applied: list[tuple[int, int]]) -> dict[str, Any]:
        return {"nodes_trained": [n for n, _ in applied], "staleness": [t for _, t in applied],
                "nodes_failed": {str(k): v for k, v in self.failed.items()},
                "train_returns": {str(k): v for k, v in self.returns.items()}}


def run_async(grid: Grid, fed: Federation, nm: NodeMap, folder: RunFolder, started: float) -> None:
    """Run asynchronous rounds until ``num-server-rounds`` server steps (or the target is reached)."""
    cfg = fed.cfg
    n, total = cfg.nodes.count, cfg.num_server_rounds
    limit = cfg.strategy.concurrency or n
    assert fed.asyn is not None
    if fed.round < total and stops_for_budget(fed, fed.round + 1):
        return  # a resumed DP-FedBuff run that had spent its budget: no further release
    inflight: dict[str, tuple[list[int], int, float]] = {}  # message id -> (nodes, version, sent at)
    trained_from: dict[int, int] = {}  # node -> the version it was last sent
    last_sent = dict.fromkeys(range(n), 0.0)
    cohort = cfg.nodes.cohort_size
    cur = _Round()
    fed.begin_round(fed.round + 1)

    def step(applied: list[tuple[int, int]]) -> bool:
        nonlocal cur
        fields = cur.fields(applied) | fed.completed(fed.round + 1)  # DP-FedBuff: ε so far, the step's clip norm
        stop = end_round(fed, folder, started, cur.started, fields)
        if not stop and fed.round < total and stops_for_budget(fed, fed.round + 1):
            stop = True  # DP-FedBuff: the next server step would spend more than the budget
        cur = _Round()
        if fed.round < total:
            fed.begin_round(fed.round + 1)
        # the last step ends the run even inside a message: a cohort's remaining replies (or the
        # rest of a pull) would otherwise step again, past num-server-rounds
        return stop or fed.round >= total

    while fed.round < total:
        busy = {nm.supernode(nodes[0]) for nodes, _, _ in inflight.values()}
        room = limit - sum(len(nodes) for nodes, _, _ in inflight.values())
        batches: dict[int, list[int]] = {}  # SuperNode -> idle nodes it hosts, at most nodes.cohort-size
        for node in sorted(range(n), key=lambda i: last_sent[i]):  # longest idle first
            if room <= 0:
                break
            sn = nm.supernode(node)
            if trained_from.get(node) == fed.round or sn in busy or len(batches.get(sn, ())) >= cohort:
                continue
            batches.setdefault(sn, []).append(node)
            room -= 1
        for sn, nodes in batches.items():
            plans = [codec.encode_plan(*fed.plan(node, fed.round + 1)) for node in nodes]
            msg = Message(content_of(plans), dst_node_id=sn, message_type=codec.TRAIN, group_id=str(fed.round + 1))
            fed.counters.sent(codec.wire_bytes(msg))
            mid = next(iter(grid.push_messages([msg])))
            inflight[mid] = (nodes, fed.round, time.monotonic())
            for node in nodes:
                fed.asyn.versions.acquire(fed.round, fed.models[0])
                trained_from[node] = fed.round
                last_sent[node] = time.monotonic()
        if not inflight:  # every node trained from this version and nothing is pending
            applied = fed.flush_buffer() if cfg.strategy.name == "fedbuff" else []
            log.warning("round %d: every node has answered for version %d with %d usable update(s)%s", fed.round + 1,
                        fed.round, len(applied), "; stepping with them" if applied else "; the model is unchanged")
            if step(applied):
                break
            continue
        stop = False
        for m in grid.pull_messages(list(inflight)):
            nodes, version, _ = inflight.pop(m.metadata.reply_to_message_id)
            if m.has_content():
                fed.counters.received(codec.wire_bytes(m))
            for node, answer in split_answers(m, nodes).items():
                base = fed.asyn.versions.release(version)
                if stop:  # the run ended inside this cohort's replies
                    continue
                checked = check_reply(fed, answer, node)
                if isinstance(checked, str):
                    cur.failed[node] = checked
                    log.warning("round %d: node %d left out: %s", fed.round + 1, node, checked)
                    continue
                cur.returns[node] = checked.metrics.get("train_return")
                applied = fed.receive_async(checked, version, base)
                if applied and step(applied):
                    stop = True
            if stop:
                break
        if stop:
            break
        now = time.monotonic()
        for mid, (nodes, version, sent) in list(inflight.items()):
            if now - sent > cfg.round.timeout_s:
                del inflight[mid]
                for node in nodes:
                    fed.asyn.versions.release(version)
                    cur.failed[node] = "no reply before round.timeout-s"
                    # trained_from keeps this version: the node gets work again once the model
                    # moves on, and a dead node cannot keep the buffer from its partial flush
                    # when every other node has answered (it would be re-sent forever otherwise)
                    log.warning("round %d: node %d left out: no reply before round.timeout-s", fed.round + 1, node)
        time.sleep(_POLL_S)
