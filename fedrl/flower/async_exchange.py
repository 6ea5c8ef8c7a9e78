"""An asynchronous round's exchange (``strategy.name`` = fedbuff, fedasync): no barrier, one server step.

Every idle node (up to ``strategy.concurrency``; one message per SuperNode at a time, carrying
up to ``nodes.cohort-size`` of its idle logical nodes) is sent the current model with
``push_messages``; replies are taken with ``pull_messages`` as they arrive, each remembering the
version it started from, and handed to the server (``Federation.receive_async``) one by one until
the rule steps: that is one "round" of metrics.jsonl. Replies pulled past that step wait here
for the next round, in the order they came.

A node is not sent the same version twice: once it has trained from version v it waits for
v + 1. When every node has trained from the current version and nothing is in flight (some
replies failed), the server steps with what the rule buffers, or the version passes unchanged,
with a log line. A node silent past ``round.timeout-s`` is counted failed and may be sent work again.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from flwr.app import Message
from flwr.serverapp import Grid

from fedrl.flower import codec
from fedrl.flower.cohort_codec import content_of
from fedrl.flower.transport import Answer, NodeMap, check_reply, split_answers
from fedrl.server.delivery import Stepped
from fedrl.server.federation import Federation

log = logging.getLogger("fedrl")
_POLL_S = 0.02


class AsyncExchange:
    """The messages in flight across server steps, and who trained from which version."""

    def __init__(self, grid: Grid, nm: NodeMap) -> None:
        self.grid, self.nm = grid, nm
        self.inflight: dict[str, tuple[list[int], int, float]] = {}  # message id -> (nodes, version, sent at)
        self.trained_from: dict[int, int] = {}  # node -> the version it was last sent
        self.last_sent: dict[int, float] = {}
        self.pulled: deque[tuple[int, Answer | None, int]] = deque()  # (node, answer, version) not yet taken

    def train(self, fed: Federation, rnd: int, chosen: list[int]) -> Stepped:
        """Send and take replies until the rule steps (server step ``rnd``)."""
        got = Stepped([])
        if self.pulled:  # the rest of the last pull: the rule stepped inside it
            if self._take(fed, rnd, got):
                return got
            self._timeouts(fed, rnd, got)
            time.sleep(_POLL_S)
        while True:
            self._send(fed, rnd)
            if not self.inflight:  # every node trained from this version and nothing is pending
                got.applied = fed.flush_buffer()
                log.warning("round %d: every node has answered for version %d with %d usable update(s)%s", rnd,
                            fed.round, len(got.applied), "; stepping with them" if got.applied else
                            "; the model is unchanged")
                return got
            self._pull(fed)
            if self._take(fed, rnd, got):
                return got
            self._timeouts(fed, rnd, got)
            time.sleep(_POLL_S)

    def _take(self, fed: Federation, rnd: int, got: Stepped) -> bool:
        """Hand pulled replies to the server in order until the rule steps (True) or none is left."""
        while self.pulled:
            node, answer, version = self.pulled.popleft()
            base = fed.release_version(version)
            checked = check_reply(fed, answer, node)
            if isinstance(checked, str):
                got.failed[node] = checked
                log.warning("round %d: node %d left out: %s", rnd, node, checked)
                continue
            got.returns[node] = checked.metrics.get("train_return")
            if applied := fed.receive_async(checked, version, base):
                got.applied = applied
                return True
        return False

    def _send(self, fed: Federation, rnd: int) -> None:
        """The current model to idle nodes, longest idle first, up to ``strategy.concurrency``."""
        cfg = fed.cfg
        n = cfg.nodes.count
        busy = {self.nm.supernode(nodes[0]) for nodes, _, _ in self.inflight.values()}
        room = (cfg.strategy.concurrency or n) - sum(len(nodes) for nodes, _, _ in self.inflight.values())
        batches: dict[int, list[int]] = {}  # SuperNode -> idle nodes it hosts, at most nodes.cohort-size
        for node in sorted(range(n), key=lambda i: self.last_sent.get(i, 0.0)):
            if room <= 0:
                break
            sn = self.nm.supernode(node)
            if self.trained_from.get(node) == fed.round or sn in busy or len(batches.get(sn, ())) >= cfg.nodes.cohort_size:
                continue
            batches.setdefault(sn, []).append(node)
            room -= 1
        for sn, nodes in batches.items():
            plans = [codec.encode_plan(*fed.plan(node, rnd)) for node in nodes]
            msg = Message(content_of(plans), dst_node_id=sn, message_type=codec.TRAIN, group_id=str(rnd))
            fed.count_sent(codec.wire_bytes(msg))
            mid = next(iter(self.grid.push_messages([msg])))
            self.inflight[mid] = (nodes, fed.round, time.monotonic())
            for node in nodes:
                self.trained_from[node] = fed.hold_version()
                self.last_sent[node] = time.monotonic()

    def _pull(self, fed: Federation) -> None:
        """Replies that arrived, in order, into ``pulled``."""
        for m in self.grid.pull_messages(list(self.inflight)):
            nodes, version, _ = self.inflight.pop(m.metadata.reply_to_message_id)
            if m.has_content():
                fed.count_received(codec.wire_bytes(m))
            self.pulled.extend((node, answer, version) for node, answer in split_answers(m, nodes).items())

    def _timeouts(self, fed: Federation, rnd: int, got: Stepped) -> None:
        """Nodes silent past ``round.timeout-s`` fail."""
        now = time.monotonic()
        for mid, (nodes, version, sent) in list(self.inflight.items()):
            if now - sent > fed.cfg.round.timeout_s:
                del self.inflight[mid]
                for node in nodes:
                    fed.release_version(version)
                    got.failed[node] = "no reply before round.timeout-s"
                    # trained_from keeps this version: the node gets work again once the model
                    # moves on, and a dead node cannot keep the buffer from its partial flush
                    # when every other node has answered (it would be re-sent forever otherwise)
                    log.warning("round %d: node %d left out: no reply before round.timeout-s", rnd, node)
