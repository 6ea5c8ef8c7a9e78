"""One round of training with secure aggregation, on the Message API (SecAgg / SecAgg+).

Four message exchanges per round, each to the nodes still in the protocol:

1. ``train`` — the plan plus the round's secure-aggregation setup; the node trains, encodes its
   weighted update as ring codes, opens its session and answers with two public keys;
2. ``train.secagg_share`` — each node gets its neighbours' keys and answers with encrypted shares;
3. ``train.secagg_mask`` — each node gets the shares addressed to it and answers with its masked
   input (packed at the ring's bit width);
4. ``train.secagg_unmask`` — each survivor learns who survived and answers with the shares that
   let the server remove the masks.

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

from fedrl.compression.ring_codes import RingCoding, required_ring_bits
from fedrl.federation import Federation
from fedrl.flower import codec
from fedrl.flower import secure_codec as sc
from fedrl.flower.transport import NodeMap, exchange, failure
from fedrl.secagg import Keys, Masked, SecAggAbort, SecAggServer, make_params
from fedrl.seeding import SECAGG, derive

log = logging.getLogger("fedrl")


def _replies(grid: Grid, fed: Federation, nm: NodeMap, contents: dict[int, RecordDict], mtype: str, rnd: int,
             decode: Any, bad: dict[int, str], stage: str, clock: dict[str, float]) -> dict[int, Any]:
    """Exchange one stage; decoded replies of the nodes that answered well, the rest into ``bad``.

    ``clock[stage]`` gets the stage's wall seconds (messages out, node work, replies back).
    """
    t0 = time.perf_counter()
    out: dict[int, Any] = {}
    for node, r in exchange(grid, fed, nm, contents, mtype, rnd).items():
        why = failure(r)
        if why is None and r is not None:
            try:
                out[node] = decode(r.content)
                continue
            except (codec.WireError, ValueError) as err:
                why = f"malformed reply: {err}"
        bad[node] = f"{stage}: {why}"
        log.warning("round %d: node %d dropped at secagg stage %s: %s", rnd, node, stage, why)
    clock[stage] = time.perf_counter() - t0
    return out


def secure_round(grid: Grid, fed: Federation, nm: NodeMap, rnd: int) -> dict[str, Any]:
    """Run round ``rnd`` with secure aggregation; return its fields for metrics.jsonl."""
    cfg = fed.cfg
    nodes = fed.select(rnd)
    fed.begin_round(rnd)
    bits = cfg.secagg.bits or required_ring_bits(cfg.compression.bits, len(nodes))
    setup = sc.Setup(os.urandom(16), nodes, cfg.secagg.neighbors, cfg.secagg.threshold, bits, fed.n_params + 1,
                     derive(cfg.seed, SECAGG, rnd))
    params = make_params(rnd, setup.session, nodes, setup.neighbors, setup.threshold, bits, setup.length,
                         setup.graph_seed)
    server = SecAggServer(params)
    bad: dict[int, str] = {}
    sid = setup.session
    clock: dict[str, float] = {}

    plans = {}
    for node in nodes:
        rec = codec.encode_plan(*fed.plan(node, rnd))
        sc.put_setup(codec.plan_record(rec), setup)
        plans[node] = rec
    keyed: dict[int, tuple[Keys, dict[str, float]]] = _replies(
        grid, fed, nm, plans, codec.TRAIN, rnd, sc.decode_keys, bad, "advertise", clock)
    fields: dict[str, Any] = {"secagg_threshold": params.threshold, "secagg_bits": bits, "secagg_seconds": clock}
    if cfg.secagg.send_metrics:
        fields["train_returns"] = {str(n): m.get("train_return") for n, (_, m) in keyed.items()}

    def outcome(trained: list[int], aborted: str | None) -> dict[str, Any]:
        return {**fields, "nodes_trained": trained, "nodes_failed": {str(k): v for k, v in bad.items()},
                "secagg_aborted": aborted}

    try:
        routed_keys = server.collect_keys({n: k for n, (k, _) in keyed.items()})
        cts = _replies(grid, fed, nm, {n: sc.encode_share_request(n, rnd, sid, ks) for n, ks in routed_keys.items()},
                       sc.SHARE, rnd, sc.decode_ciphertexts, bad, "share", clock)
        routed = server.collect_shares(cts)
        masked: dict[int, Masked] = _replies(
            grid, fed, nm, {n: sc.encode_ciphertexts(n, rnd, sid, c) for n, c in routed.items()}, sc.MASK, rnd,
            lambda rec: sc.decode_masked(rec, bits, setup.length), bad, "mask", clock)
        survivors, dropped = server.collect_masked(masked)
        shares = _replies(grid, fed, nm, {n: sc.encode_unmask_request(n, rnd, sid, survivors, dropped)
                                          for n in survivors}, sc.UNMASK, rnd, sc.decode_shares, bad, "unmask", clock)
        t0 = time.perf_counter()
        total = server.unmask(shares)
        mean, ratio_sum = RingCoding.for_config(cfg).decode_sum(total, len(survivors))
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
