"""A secure round's exchange on the Message API (SecAgg / SecAgg+): the server gets only sums.

Three message exchanges per round, each to the nodes still in the protocol, plus one before
them to the nodes whose keys the server does not hold yet:

0. ``train.secagg_keys`` (first round, and nodes that missed the end of their last round) —
   the node makes two key pairs and answers with the public keys;
1. ``train`` — the plan, the round's secure-aggregation setup and the neighbours' public keys;
   the node trains, encodes its weighted update as ring codes, opens its session and answers
   with its encrypted shares (SecAgg's advertise and share stages, the keys sent ahead);
2. ``train.secagg_mask`` — each node gets the shares addressed to it and answers with its masked
   input (packed at the ring's bit width);
3. ``train.secagg_unmask`` — each survivor learns who survived and answers with the shares that
   let the server remove the masks, and with the public keys of its next session.

Sending keys ahead saves one exchange per round (Bonawitz et al. 2017 advertise keys in a
round of their own). Keys are still fresh per session and used once; the key agreement binds
the round and session, so sending them early reveals nothing new to an honest-but-curious
server.

With ``round.deadline-s`` a node that has not answered the train stage by then is a dropout of
the secure round (its shares never reach the others), its late message is kept and reaped, and
deadline selection learns from it as in plain rounds.

The exchange hands the server each session's unmasked ring sum (``fedrl.server.delivery.Sums``);
the server turns it into the weighted mean update (with DP: noise and the ledger step), decides
whether enough nodes took part, and records the round. A node that fails or misbehaves at any
stage is dropped and the protocol recovers (``fedrl.secagg``); when it cannot (too few survivors
or shares), the session aborts: nothing is unmasked, its model stays as it was.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from flwr.app import RecordDict
from flwr.serverapp import Grid

from fedrl.flower import codec
from fedrl.flower import secure_codec as sc
from fedrl.flower.transport import BUSY, NodeMap, decode_reply_safely, exchange, reap_late, rejoin
from fedrl.privacy.node import dpsgd_field
from fedrl.secagg import Keys, Masked, SecAggAbort, make_params
from fedrl.secagg.server import SecAggServer
from fedrl.seeding import SECAGG, derive
from fedrl.server.delivery import SecureSum, Sums
from fedrl.server.federation import Federation

log = logging.getLogger("fedrl")
T = TypeVar("T")


def _replies(grid: Grid, fed: Federation, nm: NodeMap, contents: dict[int, RecordDict], mtype: str, rnd: int,
             decode: Any, bad: dict[int, str], stage: str, clock: dict[str, float],
             deadline_s: float = 0.0) -> dict[int, Any]:
    """Exchange one stage; decoded replies of the nodes that answered well, the rest into ``bad``.

    ``clock[stage]`` gets the stage's wall seconds (messages out, node work, replies back). With
    ``nodes.cohort-size > 1`` a SuperNode gets its logical nodes' stage contents in cohort
    messages; each logical node is still a party of its own. With ``deadline_s`` (the train
    stage under ``round.deadline-s``) a node that has not answered by then is a dropout of the
    secure round, and its message is kept in ``nm.late``.
    """
    t0 = time.perf_counter()
    out: dict[int, Any] = {}
    for node, r in exchange(grid, fed, nm, contents, mtype, rnd, deadline_s, fed.cfg.nodes.cohort_size).items():
        value, why = decode_reply_safely(r, decode, deadline_s)
        if why is None:
            out[node] = value
            continue
        bad[node] = f"{stage}: {why}"
        log.warning("round %d: node %d dropped at secagg stage %s: %s", rnd, node, stage, why)
    clock[stage] = time.perf_counter() - t0
    return out


class KeysAhead:
    """Public keys that nodes made for their next session (server side, between rounds).

    A node's entry is consumed when a round routes it; a node that fails anywhere in a round is
    forgotten, so its next round starts with a ``keys`` request (its stored private keys are
    replaced then).
    """

    def __init__(self) -> None:
        self.keys: dict[int, tuple[bytes, bytes]] = {}

    def take(self, nodes: list[int]) -> dict[int, tuple[bytes, bytes]]:
        return {n: self.keys.pop(n) for n in nodes if n in self.keys}


@dataclass
class _Session:
    """One secure sum of the round: the selected nodes that train model slot ``slot`` (the star's
    one model, or one edge's under a hierarchy), a SecAgg session of their own. An abort ends
    this session only: its nodes are out of the round's sums, the other sessions go on."""

    slot: int
    setup: sc.Setup
    server: SecAggServer
    aborted: str | None = None

    @property
    def members(self) -> set[int]:
        return set(self.setup.nodes)

    def mine(self, by_node: dict[int, T]) -> dict[int, T]:
        return {n: v for n, v in by_node.items() if n in self.members}

    def run(self, rnd: int, stage: Callable[..., T], *args: Any) -> T | None:
        """``stage(*args)``: one server stage (or the decoding of the sum); None once this session
        has aborted."""
        if self.aborted is not None:
            return None
        try:
            return stage(*args)
        except (SecAggAbort, ValueError) as err:
            self.aborted = str(err)
            log.warning("round %d: secure aggregation of %s aborted (%s); nothing of it was unmasked", rnd,
                        self.name, err)
            return None

    @property
    def name(self) -> str:
        return "the round" if self.slot < 0 else f"edge {self.slot}"


def _sessions(fed: Federation, nodes: list[int], bad: dict[int, str], rnd: int, bits: int) -> list[_Session]:
    """One session per model slot of the round's nodes (one for the star), each in a ring of
    ``bits``. With several, a slot left with one live node this round gets no session (a secure
    sum of one is that node's update): its node goes into ``bad`` and is not asked."""
    cfg = fed.cfg
    slots: dict[int, list[int]] = {}
    for n in nodes:
        slots.setdefault(fed.slot(n), []).append(n)
    many = len(fed.models) > 1  # one model per edge
    out = []
    for slot, group in sorted(slots.items()):
        if many and sum(n not in bad for n in group) < 2:
            for n in group:
                bad.setdefault(n, f"the only node of edge {slot} this round: a secure sum of one would be its update")
            continue
        setup = sc.Setup(os.urandom(16), group, cfg.secagg.neighbors, cfg.secagg.threshold, bits, fed.n_params + 1,
                         derive(cfg.seed, SECAGG, rnd, slot))
        params = make_params(rnd, setup.session, group, setup.neighbors, setup.threshold, bits, setup.length,
                             setup.graph_seed)
        out.append(_Session(slot if many else -1, setup, SecAggServer(params)))
    return out


class SecureExchange:
    """The secure rounds of a run on one Grid; keeps the public keys nodes sent ahead (``KeysAhead``)."""

    def __init__(self, grid: Grid, nm: NodeMap) -> None:
        self.grid, self.nm, self.ahead = grid, nm, KeysAhead()

    def train(self, fed: Federation, rnd: int, chosen: list[int]) -> Sums:
        """Round ``rnd``'s four stages with ``chosen``; each session's unmasked sum, or why it aborted.

        Under ``topology.name = hierarchical`` each edge's selected nodes form a session of their own
        (the edge learns only its nodes' sum); the stages' messages still go out together."""
        grid, nm = self.grid, self.nm
        reap_late(grid, fed, nm)
        rejoin(grid, nm)
        if not chosen:
            return Sums([], [], [], {}, {})
        bad = {n: BUSY for n in chosen if nm.busy(n)}  # dropouts from the start
        bits = fed.ring_bits(len(chosen))  # one ring for every session: wide enough for the round
        sessions = _sessions(fed, chosen, bad, rnd, bits)
        clock: dict[str, float] = {}
        fields: dict[str, Any] = {"secagg_threshold": min((s.server.params.threshold for s in sessions), default=0),
                                  "secagg_bits": bits, "secagg_seconds": clock}
        totals = self._stages(fed, rnd, sessions, bad, bits, clock, fields)
        sums = [SecureSum(s.slot, len(s.setup.nodes), s.server.params.threshold,
                          list(s.server.survivors) if s.slot in totals else [], list(s.server.dropped),
                          totals.get(s.slot), s.aborted) for s in sessions]
        return Sums(chosen, [n for s in sessions for n in s.setup.nodes], sums, bad, fields)

    def _stages(self, fed: Federation, rnd: int, sessions: list[_Session], bad: dict[int, str], bits: int,
                clock: dict[str, float], fields: dict[str, Any]) -> dict[int, Any]:
        """Keys, train and share, mask, unmask: each session's unmasked ring total by its slot."""
        grid, nm, cfg = self.grid, self.nm, fed.cfg
        length = fed.n_params + 1
        # 0. keys: those sent ahead last round, else a request
        keys: dict[int, Keys] = {}
        requests: dict[int, RecordDict] = {}
        for s in sessions:
            sid = s.setup.session
            keys |= {n: Keys(n, rnd, sid, *pair) for n, pair in self.ahead.take(s.setup.nodes).items() if n not in bad}
            requests |= {n: sc.encode_keys_request(n, rnd, sid) for n in s.setup.nodes if n not in keys and n not in bad}
        if requests:
            keys.update(_replies(grid, fed, nm, requests, sc.KEYS, rnd, sc.decode_keys, bad, "keys", clock))
        # 1. train (and share)
        plans = {}
        for s in sessions:
            routed_keys = s.run(rnd, s.server.collect_keys, s.mine(keys)) or {}
            for n in s.setup.nodes:
                if n not in routed_keys and n not in bad and s.aborted is None:
                    bad[n] = "keys: refused by the secure-aggregation protocol (see the log)"
            for node in routed_keys:
                rec = codec.encode_plan(*fed.plan(node, rnd))
                cr = codec.plan_record(rec)
                sc.put_setup(cr, s.setup)
                sc.put_keys(cr, (keys[node].c_pk, keys[node].s_pk), routed_keys[node])
                plans[node] = rec
        trained: dict[int, tuple[dict[int, bytes], dict[str, float]]] = _replies(
            grid, fed, nm, plans, codec.TRAIN, rnd, sc.decode_trained, bad, "train+share", clock, cfg.round.deadline_s)
        if cfg.secagg.send_metrics:
            fields["train_returns"] = {str(n): m.get("train_return") for n, (_, m) in trained.items()}
        fields |= dpsgd_field(m for _, m in trained.values())
        # 2. mask
        contents: dict[int, RecordDict] = {}
        for s in sessions:
            routed = s.run(rnd, s.server.collect_shares, {n: c for n, (c, _) in s.mine(trained).items()})
            contents |= {n: sc.encode_ciphertexts(n, rnd, s.setup.session, c) for n, c in (routed or {}).items()}
        masked: dict[int, Masked] = _replies(grid, fed, nm, contents, sc.MASK, rnd,
                                             lambda rec: sc.decode_masked(rec, bits, length), bad, "mask", clock)
        # 3. unmask
        contents = {}
        for s in sessions:
            sets = s.run(rnd, s.server.collect_masked, s.mine(masked))
            if sets is not None:
                survivors, dropped = sets
                contents |= {n: sc.encode_unmask_request(n, rnd, s.setup.session, survivors, dropped)
                             for n in survivors}
        replies = _replies(grid, fed, nm, contents, sc.UNMASK, rnd, sc.decode_shares, bad, "unmask", clock)
        # Keys for the nodes' next sessions; a node that failed anywhere this round gets asked afresh.
        self.ahead.keys.update({n: nxt for n, (_, nxt) in replies.items() if nxt is not None and n not in bad})
        t0 = time.perf_counter()
        totals = {}
        for s in sessions:
            total = s.run(rnd, s.server.unmask, {n: sh for n, (sh, _) in s.mine(replies).items()})
            if total is not None:
                totals[s.slot] = total
        clock["server-unmask"] = time.perf_counter() - t0
        return totals
