"""One round of training with secure aggregation, on the Message API (SecAgg / SecAgg+).

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

The server only ever holds the ring sum, which ``RingCoding.decode_sum`` turns into the weighted
mean update and the total weight. A node that fails or misbehaves at any stage is dropped and the
protocol recovers (``fedrl.secagg``); when it cannot (too few survivors or shares), the round
aborts: nothing is unmasked, the model stays as it was, and training goes on next round.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from flwr.app import RecordDict
from flwr.serverapp import Grid

from fedrl import secure_sum
from fedrl.federation import Federation
from fedrl.flower import codec
from fedrl.flower import secure_codec as sc
from fedrl.flower.transport import NodeMap, decode_reply_safely, exchange, reap_late, rejoin
from fedrl.privacy.node import dpsgd_field
from fedrl.secagg import Keys, Masked, SecAggAbort, SecAggServer, make_params
from fedrl.seeding import SECAGG, derive

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


def secure_round(grid: Grid, fed: Federation, nm: NodeMap, rnd: int, ahead: KeysAhead | None = None) -> dict[str, Any]:
    """Run round ``rnd`` with secure aggregation; return its fields for metrics.jsonl.

    Under ``topology.name = hierarchical`` each edge's selected nodes form a session of their own
    (the edge learns only its nodes' sum); the stages' messages still go out together."""
    cfg = fed.cfg
    ahead = ahead if ahead is not None else KeysAhead()
    reap_late(grid, fed, nm)
    rejoin(grid, nm)
    nodes = fed.select(rnd)
    fed.begin_round(rnd)
    if not nodes:  # poisson selection drew nobody
        log.warning("round %d: no node was selected; the model is unchanged", rnd)
        return {"nodes_trained": [], "nodes_failed": {}, "secagg_aborted": None}
    bad: dict[int, str] = {}
    for n in nodes:  # a dropout from the start: its SuperNode still runs a plan that missed a deadline
        if nm.busy(n):
            bad[n] = "still busy with an earlier round's plan (missed round.deadline-s)"
    bits = secure_sum.ring_bits(fed, len(nodes))  # one ring for every session: wide enough for the round
    sessions = _sessions(fed, nodes, bad, rnd, bits)
    asked = [n for s in sessions for n in s.setup.nodes]
    length = fed.n_params + 1
    clock: dict[str, float] = {}
    fields: dict[str, Any] = {"secagg_threshold": min((s.server.params.threshold for s in sessions), default=0),
                              "secagg_bits": bits, "secagg_seconds": clock}

    def outcome(trained: list[int]) -> dict[str, Any]:
        fed.selector.note(asked, [n for n in bad if n in asked])  # deadline selection learns who missed the deadline
        reasons = [f"{s.name}: {s.aborted}" if len(sessions) > 1 else s.aborted for s in sessions if s.aborted]
        every = bool(sessions) and len(reasons) == len(sessions)
        out = {**fields, "nodes_trained": sorted(trained), "nodes_failed": {str(k): v for k, v in bad.items()},
               "secagg_aborted": "; ".join(r for r in reasons if r) if every else None}
        if any(s.slot >= 0 for s in sessions):
            out["secagg_edges"] = {str(s.slot): {"nodes": len(s.setup.nodes), "threshold": s.server.params.threshold,
                                                 "survivors": len(s.server.survivors) if not s.aborted else 0,
                                                 "aborted": s.aborted} for s in sessions}
        return out

    # 0. keys: those sent ahead last round, else a request
    keys: dict[int, Keys] = {}
    requests: dict[int, RecordDict] = {}
    for s in sessions:
        sid = s.setup.session
        keys |= {n: Keys(n, rnd, sid, *pair) for n, pair in ahead.take(s.setup.nodes).items() if n not in bad}
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
    ahead.keys.update({n: nxt for n, (_, nxt) in replies.items() if nxt is not None and n not in bad})
    t0 = time.perf_counter()
    means: dict[int, np.ndarray] = {}
    ratio_sum, survivors_all = 0.0, []
    one = len(sessions) == 1  # one sum: its ledger step is taken with it (distributed DP's depends on it)
    for s in sessions:
        total = s.run(rnd, s.server.unmask, {n: sh for n, (sh, _) in s.mine(replies).items()})
        if total is None:
            continue
        slot, share = max(s.slot, 0), fed.rule.dp_share(max(s.slot, 0))
        got = s.run(rnd, secure_sum.mean_update, fed, total, len(s.server.survivors), rnd, share, one)  # DP: noised
        if got is not None:
            means[slot], ratio_sum = got[0], ratio_sum + got[1]
            survivors_all += list(s.server.survivors)
            for n in s.server.dropped:
                bad.setdefault(n, "excluded by the secure-aggregation protocol")
    if fed.dp is not None and means and not one:
        fed.dp.account()  # disjoint edges: one node's data is in one noised sum (parallel composition)
    clock["server-unmask"] = time.perf_counter() - t0
    fed.note_delivery(rnd, survivors_all, [n for n in nodes if n not in survivors_all])
    if not means:
        return outcome([])
    if len(survivors_all) < min(cfg.min_train_nodes, len(nodes)):
        log.warning("round %d: %d nodes in the secure sums, fewer than min-train-nodes = %d; the model is unchanged",
                    rnd, len(survivors_all), cfg.min_train_nodes)
        return outcome([])
    fed.aggregate_sums(means, ratio_sum)
    return outcome(survivors_all)
