"""Wire format: typed fedrl values <-> Flower records. The message keys live here (and the secure
stages' in ``secure_codec``).

Weights travel as ``ArrayRecord``s (NumPy ``.npy`` bytes), scalars as ``ConfigRecord``s, and a
compressed payload as one uint8 blob. Nothing is pickled. Fields are read by the typed readers of
``fedrl.flower.record_fields``; a node's reply is decoded by ``fedrl.flower.safe_arrays``' checked
rules against the server's ``Layout`` (allow-listed dtypes, the expected shapes before any
allocation, a payload size bounded by the model). ``wire_bytes`` measures what actually crosses
the wire: the deflated bytes of every object in the message's object tree, the unit Flower 1.42
transfers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import safetensors.numpy
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fedrl.compression.downlink import Downlink
from fedrl.flower.record_fields import (
    array_record,
    config_record,
    get_moments,
    get_payload,
    has_payload,
    int_field,
    put_moments,
    put_payload,
    trusted_arrays,
)
from fedrl.flower.safe_arrays import WireError, decode_arrays, decode_blob  # callers use codec.WireError
from fedrl.topology.gossip import Mix
from fedrl.wire import LocalPlan, NodeState, Reply

TRAIN = "train"
QUERY = "query"
_PLAN, _WEIGHTS, _REPLY, _HELLO = "plan", "weights", "reply", "hello"
_MOMENTS = "mom"  # observation statistics (a ConfigRecord field)
# Short field prefixes: on a 9k-parameter policy every byte of framing shows in the ratios.
_UPDATE, _DELTA = "u", "d"
# The reported metrics as one list of floats in REPORTED_METRICS order, NaN where a metric is not
# reported: one field costs ~70 bytes less than five named ones (5% of a 1% top-k reply).
_METRICS = "m"
_STATE_PREFIX = "fedrl.node"
_PACKED, _ORDER = "safetensors", "fedrl.order"


# Per-node training metrics the server records (metrics.jsonl); the rest stay on the node.
# clip_below: DP adaptive clipping's bit; dpsgd_epsilon: the node's sample-level ε (a function of its step count)
REPORTED_METRICS = ("train_return", "train_seconds", "clip_below", "dpsgd_epsilon", "optimizer_steps")
PUBLIC_METRICS = ("dpsgd_epsilon",)  # sent even under secure aggregation: they say nothing about the data


@dataclass(frozen=True)
class Layout:
    """What the server expects in a reply: the model's array shapes (float32) and the observation
    dimension (its moments are ``2 * obs_dim + 1`` floats)."""

    shapes: tuple[tuple[int, ...], ...]
    obs_dim: int

    @property
    def n(self) -> int:
        """Number of model parameters."""
        return sum(math.prod(s) for s in self.shapes)

    @property
    def max_payload_bytes(self) -> int:
        """The largest compressed-payload blob a reply may carry.

        The largest payload a fedrl compressor makes is ``quantize`` with ``compression.chunk = 1``:
        a float32 scale and up to 16 bits of code per parameter (6 bytes); topk at fraction 1 is
        4 bytes plus a bitmap. 8 bytes per parameter plus 4 KiB covers every one with room.
        """
        return 8 * self.n + 4096


def wire_bytes(msg: Message) -> int:
    return content_bytes(msg.content)


def content_bytes(rec: RecordDict) -> int:
    """Serialized size of every object in a message content's tree (what Flower transfers)."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(rec).values())


def _blob(rec: RecordDict, max_bytes: int | None = None) -> np.ndarray:
    ar = array_record(rec, _WEIGHTS)
    if ar is None:
        raise WireError(f"missing array record '{_WEIGHTS}'")
    if list(ar) != ["blob"]:
        raise WireError("a compressed payload travels as exactly one array named 'blob'")
    return decode_blob(ar["blob"], max_bytes)


# --- plan: server -> client ------------------------------------------------------------
def encode_plan(plan: LocalPlan, dl: Downlink | Mix) -> RecordDict:
    cr = ConfigRecord({"node": plan.node, "round": plan.round, "total-rounds": plan.total_rounds,
                       "seed": plan.seed, "prox-mu": float(plan.prox_mu),
                       "base-round": dl.base_round if isinstance(dl, Downlink) else -1,
                       "ef-base": plan.ef_base, "clip": float(plan.clip_norm), "run": plan.run_uid})
    rec = RecordDict({_PLAN: cr})
    if isinstance(dl, Mix):
        _put_mix(rec, cr, dl)
    elif dl.delta is not None:
        rec[_WEIGHTS] = ArrayRecord({"blob": put_payload(cr, _DELTA, dl.delta)})
    else:
        rec[_WEIGHTS] = ArrayRecord(list(dl.weights or []))
    put_moments(cr, _MOMENTS, plan.obs_moments)
    return rec


def decode_plan(rec: RecordDict) -> tuple[LocalPlan, Downlink | Mix]:
    cr = config_record(rec, _PLAN)
    mu = cr.get("prox-mu")
    if not isinstance(mu, float):
        raise WireError("field 'prox-mu' must be a float")
    moments = get_moments(cr, _MOMENTS)
    clip = cr.get("clip", 0.0)
    if not isinstance(clip, float) or not (np.isfinite(clip) and clip >= 0):
        raise WireError("field 'clip' must be a finite float >= 0")
    run = cr.get("run", "")
    if not isinstance(run, str):
        raise WireError("field 'run' must be a string")
    node, rnd, total, seed = (int_field(cr, k) for k in ("node", "round", "total-rounds", "seed"))
    plan = LocalPlan(node, rnd, total, seed, mu, moments, int_field(cr, "ef-base"), clip, run)
    if _MIX_SELF in cr:
        return plan, _get_mix(rec, cr)
    if has_payload(cr, _DELTA):
        return plan, Downlink(None, get_payload(cr, _DELTA, _blob(rec)), int_field(cr, "base-round"))
    return plan, Downlink(trusted_arrays(rec, _WEIGHTS))


# --- gossip: the neighbours' models a node mixes with (fedrl.topology.gossip) ----------------
_MIX_SELF, _MIX_OWN_ROUND, _MIX_PEERS, _MIX_W, _OWN = "mix.self", "mix.own-round", "mix.peers", "mix.w", "own"


def _put_mix(rec: RecordDict, cr: ConfigRecord, m: Mix) -> None:
    cr[_MIX_SELF], cr[_MIX_OWN_ROUND] = float(m.self_weight), m.own_round
    cr[_MIX_PEERS], cr[_MIX_W] = [j for j, _, _ in m.peers], [float(w) for _, w, _ in m.peers]
    if m.own is not None:
        rec[_OWN] = ArrayRecord(list(m.own))
    for j, _, model in m.peers:
        rec[f"peer{j}"] = ArrayRecord(list(model))


def _get_mix(rec: RecordDict, cr: ConfigRecord) -> Mix:
    w_self, peers, ws = cr.get(_MIX_SELF), cr.get(_MIX_PEERS, []), cr.get(_MIX_W, [])
    if not isinstance(w_self, float) or not isinstance(peers, list) or not isinstance(ws, list):
        raise WireError("malformed gossip mix")
    if len(peers) != len(ws) or not all(isinstance(j, int) and not isinstance(j, bool) for j in peers) or not all(
            isinstance(w, float) for w in ws):
        raise WireError("gossip mix: one int node and one float weight per neighbour")
    own = trusted_arrays(rec, _OWN) if array_record(rec, _OWN) is not None else None
    models = [(cast(int, j), cast(float, w), trusted_arrays(rec, f"peer{j}")) for j, w in zip(peers, ws, strict=True)]
    return Mix(w_self, int_field(cr, _MIX_OWN_ROUND), own, models)


# --- reply: client -> server -----------------------------------------------------------
def encode_reply(reply: Reply) -> RecordDict:
    cr = ConfigRecord({"node": reply.node, "env-steps": reply.env_steps})
    values = [float(reply.metrics.get(k, math.nan)) for k in REPORTED_METRICS]
    if any(math.isfinite(v) for v in values):
        cr[_METRICS] = [v if math.isfinite(v) else math.nan for v in values]
    rec = RecordDict({_REPLY: cr})
    if reply.update is not None:
        rec[_WEIGHTS] = ArrayRecord({"blob": put_payload(cr, _UPDATE, reply.update)})
        if reply.ef_base >= 0:
            cr["ef-base"] = reply.ef_base
    else:
        rec[_WEIGHTS] = ArrayRecord(list(reply.weights))
    put_moments(cr, _MOMENTS, reply.obs_moments)
    return rec


def decode_reply(rec: RecordDict, layout: Layout | None = None) -> Reply:
    """A node's reply, decoded by checked rules (``fedrl.flower.safe_arrays``).

    With ``layout`` (the server always passes it) weights must be float32 arrays of exactly its
    shapes, a payload blob at most ``layout.max_payload_bytes`` and decoding to ``layout.n``
    values, moments ``2 * obs_dim + 1`` floats. Without it shapes come from the headers (still
    allow-listed and bounded by the bytes received). Reported metrics must be finite floats;
    other ``m.`` fields are dropped.

    Raises:
        WireError: a missing or mistyped record or field, or an array or payload outside the rules.
    """
    cr = config_record(rec, _REPLY)
    m = _get_metrics(cr)
    moments = get_moments(cr, _MOMENTS, None if layout is None else layout.obs_dim)
    if has_payload(cr, _UPDATE):
        n = None if layout is None else layout.n
        update = get_payload(cr, _UPDATE, _blob(rec, None if layout is None else layout.max_payload_bytes), n)
        ef_base = int_field(cr, "ef-base") if "ef-base" in cr else -1
        return Reply(int_field(cr, "node"), [], int_field(cr, "env-steps"), moments, m, update, ef_base)
    ar = array_record(rec, _WEIGHTS)
    if ar is None:
        raise WireError(f"missing array record '{_WEIGHTS}'")
    weights = decode_arrays(ar, np.float32, None if layout is None else layout.shapes)
    return Reply(int_field(cr, "node"), weights, int_field(cr, "env-steps"), moments, m)


def _get_metrics(cr: ConfigRecord) -> dict[str, float]:
    """Field ``m``: exactly one float per reported metric, each finite or NaN (not reported)."""
    v = cr.get(_METRICS)
    if v is None:
        return {}
    if (not isinstance(v, list) or len(v) != len(REPORTED_METRICS)
            or not all(isinstance(x, float) and not math.isinf(x) for x in v)):
        raise WireError(f"field '{_METRICS}' must be {len(REPORTED_METRICS)} floats ({', '.join(REPORTED_METRICS)}), "
                        f"each finite or NaN (not reported), got {v!r:.60}")
    floats = cast(list[float], v)  # checked above
    return {k: x for k, x in zip(REPORTED_METRICS, floats, strict=True) if math.isfinite(x)}


# --- hello: which partition does a SuperNode serve? ---------------------------------------
def encode_hello() -> RecordDict:
    return RecordDict({_HELLO: ConfigRecord({"fedrl": 1})})


def encode_hello_reply(partition_id: int, num_partitions: int) -> RecordDict:
    return RecordDict({_HELLO: ConfigRecord({"partition-id": partition_id, "num-partitions": num_partitions})})


def decode_hello_reply(rec: RecordDict) -> tuple[int, int]:
    cr = config_record(rec, _HELLO)
    return int_field(cr, "partition-id"), int_field(cr, "num-partitions")


# --- client state in context.state ---------------------------------------------------------
def load_node_state(state: RecordDict, node: int) -> NodeState:
    """The state of logical node ``node`` (a SuperNode may serve several)."""
    rec = array_record(state, f"{_STATE_PREFIX}{node}")
    if rec is None:
        return NodeState.empty()
    if list(rec) == [_PACKED]:
        blob = rec[_PACKED].numpy().tobytes()
        arrays = safetensors.numpy.load(blob)  # validates the header and every array's extent
        order = json.loads(blob[8 : 8 + int.from_bytes(blob[:8], "little")])["__metadata__"][_ORDER]
        return NodeState({k: arrays[k] for k in json.loads(order)})
    return NodeState({k: rec[k].numpy() for k in rec})


def store_node_state(state: RecordDict, node: int, ns: NodeState) -> None:
    """Keep ``ns`` as one array: the safetensors bytes of its arrays (a JSON header and the raw
    data, read back without pickle).

    One array per node rather than one per state entry: the Simulation Engine pickles a
    SuperNode's whole ``context.state`` to and from its Ray actor with every message, and with
    hundreds of logical nodes' states the cost is per object (measured: see the closing note of
    issue 16), not per byte. safetensors rather than ``np.savez``: for a cohort of 50 CartPole
    nodes' states (41 arrays each) storing and loading took 10 + 5 ms against 41 + 100 ms
    (measured 2026-12-04), out of a ~1.7 s round.
    """
    arrays = {k: np.asarray(v) for k, v in ns.arrays.items()}
    blob = safetensors.numpy.save({k: v if v.flags.c_contiguous else np.ascontiguousarray(v)
                                   for k, v in arrays.items()},
                                  metadata={_ORDER: json.dumps(list(arrays))})  # safetensors sorts the names
    state[f"{_STATE_PREFIX}{node}"] = ArrayRecord({_PACKED: Array(np.frombuffer(blob, np.uint8))})


def plan_record(rec: RecordDict) -> ConfigRecord:
    """The plan's ConfigRecord (where stage setups such as secure aggregation's are added)."""
    return config_record(rec, _PLAN)
