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
from typing import Any

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


def secure_round(grid: Grid, fed: Federation, nm: NodeMap, rnd: int, ahead: KeysAhead | None = None) -> dict[str, Any]:
    """Run round ``rnd`` with secure aggregation; return its fields for metrics.jsonl."""
    cfg = fed.cfg
    ahead = ahead if ahead is not None else KeysAhead()
    reap_late(grid, fed, nm)
    rejoin(grid, nm)
    nodes = fed.select(rnd)
    fed.begin_round(rnd)
    if not nodes:  # poisson selection drew nobody
        log.warning("round %d: no node was selected; the model is unchanged", rnd)
        return {"nodes_trained": [], "nodes_failed": {}, "secagg_aborted": None}
    bits = secure_sum.ring_bits(fed, len(nodes))
    setup = sc.Setup(os.urandom(16), nodes, cfg.secagg.neighbors, cfg.secagg.threshold, bits, fed.n_params + 1,
                     derive(cfg.seed, SECAGG, rnd))
    params = make_params(rnd, setup.session, nodes, setup.neighbors, setup.threshold, bits, setup.length,
                         setup.graph_seed)
    server = SecAggServer(params)
    bad: dict[int, str] = {}
    sid = setup.session
    clock: dict[str, float] = {}
    fields: dict[str, Any] = {"secagg_threshold": params.threshold, "secagg_bits": bits, "secagg_seconds": clock}

    def outcome(trained: list[int], aborted: str | None) -> dict[str, Any]:
        fed.selector.note(nodes, bad)  # deadline selection learns who missed round.deadline-s
        return {**fields, "nodes_trained": trained, "nodes_failed": {str(k): v for k, v in bad.items()},
                "secagg_aborted": aborted}

    for n in nodes:  # a dropout from the start: its SuperNode still runs a plan that missed a deadline
        if nm.busy(n):
            bad[n] = "still busy with an earlier round's plan (missed round.deadline-s)"
    keys = {n: Keys(n, rnd, sid, *pair) for n, pair in ahead.take(nodes).items() if n not in bad}
    missing = [n for n in nodes if n not in keys and n not in bad]
    if missing:
        keys.update(_replies(grid, fed, nm, {n: sc.encode_keys_request(n, rnd, sid) for n in missing}, sc.KEYS, rnd,
                             sc.decode_keys, bad, "keys", clock))
    try:
        routed_keys = server.collect_keys(keys)
        for n in nodes:
            if n not in routed_keys and n not in bad:
                bad[n] = "keys: refused by the secure-aggregation protocol (see the log)"
        plans = {}
        for node in routed_keys:
            rec = codec.encode_plan(*fed.plan(node, rnd))
            cr = codec.plan_record(rec)
            sc.put_setup(cr, setup)
            sc.put_keys(cr, (keys[node].c_pk, keys[node].s_pk), routed_keys[node])
            plans[node] = rec
        trained: dict[int, tuple[dict[int, bytes], dict[str, float]]] = _replies(
            grid, fed, nm, plans, codec.TRAIN, rnd, sc.decode_trained, bad, "train+share", clock, cfg.round.deadline_s)
        if cfg.secagg.send_metrics:
            fields["train_returns"] = {str(n): m.get("train_return") for n, (_, m) in trained.items()}
        fields |= dpsgd_field(m for _, m in trained.values())
        routed = server.collect_shares({n: c for n, (c, _) in trained.items()})
        masked: dict[int, Masked] = _replies(
            grid, fed, nm, {n: sc.encode_ciphertexts(n, rnd, sid, c) for n, c in routed.items()}, sc.MASK, rnd,
            lambda rec: sc.decode_masked(rec, bits, setup.length), bad, "mask", clock)
        survivors, dropped = server.collect_masked(masked)
        replies = _replies(grid, fed, nm, {n: sc.encode_unmask_request(n, rnd, sid, survivors, dropped)
                                           for n in survivors}, sc.UNMASK, rnd, sc.decode_shares, bad, "unmask", clock)
        # Keys for the nodes' next sessions; a node that failed anywhere this round gets asked afresh.
        ahead.keys.update({n: nxt for n, (_, nxt) in replies.items() if nxt is not None and n not in bad})
        t0 = time.perf_counter()
        total = server.unmask({n: sh for n, (sh, _) in replies.items()})
        mean, ratio_sum = secure_sum.mean_update(fed, total, len(survivors), rnd)  # with DP: noised, accounted
        clock["server-unmask"] = time.perf_counter() - t0
    except (SecAggAbort, ValueError) as err:
        log.warning("round %d: secure aggregation aborted (%s); nothing was unmasked and the model is unchanged",
                    rnd, err)
        fed.note_delivery(rnd, [], nodes)
        return outcome([], str(err))
    for n in dropped:
        bad.setdefault(n, "excluded by the secure-aggregation protocol")
    fed.note_delivery(rnd, survivors, [n for n in nodes if n not in survivors])
    if len(survivors) < min(cfg.min_train_nodes, len(nodes)):
        log.warning("round %d: %d nodes in the secure sum, fewer than min-train-nodes = %d; the model is unchanged",
                    rnd, len(survivors), cfg.min_train_nodes)
        return outcome([], None)
    fed.aggregate_mean(mean, ratio_sum)
    return outcome(survivors, None)
