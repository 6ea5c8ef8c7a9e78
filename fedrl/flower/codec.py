"""Wire format: typed fedrl values <-> Flower records. The only module with message keys.

Weights travel as ``ArrayRecord``s (NumPy ``.npy`` bytes, loaded with
``allow_pickle=False`` by Flower), scalars as ``ConfigRecord``s, and a compressed payload as one uint8 blob. Nothing is
pickled. ``wire_bytes`` measures what actually crosses the wire: the deflated bytes of every
object in the message's object tree, the unit Flower 1.42 transfers.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fedrl.compression.base import Compressed
from fedrl.compression.downlink import Downlink
from fedrl.compression.framing import Frame, frame, unframe
from fedrl.federation import Reply
from fedrl.rl.normalize import Moments
from fedrl.rl.train import LocalPlan, NodeState
from fedrl.topology.gossip import Mix

TRAIN = "train"
QUERY = "query"
_PLAN, _WEIGHTS, _REPLY, _HELLO = "plan", "weights", "reply", "hello"
_MOMENTS = "mom"  # observation statistics (a ConfigRecord field)
# Short field prefixes: on a 9k-parameter policy every byte of framing shows in the ratios.
_UPDATE, _DELTA, _METRIC = "u", "d", "m."
_STATE_PREFIX = "fedrl.node"


# Per-node training metrics the server records (metrics.jsonl); the rest stay on the node.
# clip_below: DP adaptive clipping's bit; dpsgd_epsilon: the node's sample-level ε (a function of its step count)
REPORTED_METRICS = ("train_return", "train_seconds", "clip_below", "dpsgd_epsilon", "optimizer_steps")
PUBLIC_METRICS = ("dpsgd_epsilon",)  # sent even under secure aggregation: they say nothing about the data


class WireError(ValueError):
    """A message lacks a record or field fedrl expects, or has the wrong type."""


def wire_bytes(msg: Message) -> int:
    return content_bytes(msg.content)


def content_bytes(rec: RecordDict) -> int:
    """Serialized size of every object in a message content's tree (what Flower transfers)."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(rec).values())


def _arrays(rec: RecordDict, key: str) -> list[np.ndarray]:
    if key not in rec.array_records:
        raise WireError(f"missing array record '{key}'")
    return rec.array_records[key].to_numpy_ndarrays()


def _config(rec: RecordDict, key: str) -> ConfigRecord:
    if key not in rec.config_records:
        raise WireError(f"missing config record '{key}'")
    return rec.config_records[key]


def _int(cr: ConfigRecord, key: str) -> int:
    v = cr.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise WireError(f"field '{key}' must be an int, got {type(v).__name__}")
    return v


def _put_moments(cr: ConfigRecord, m: Moments | None) -> None:
    # A list of doubles in the ConfigRecord, not an ArrayRecord of its own: the record and array
    # framing cost ~600 bytes, a third of a 1% top-k update of a 9k-parameter policy.
    if m is not None:
        cr[_MOMENTS] = [float(x) for x in m.to_array()]


def _get_moments(cr: ConfigRecord) -> Moments | None:
    if _MOMENTS not in cr:
        return None
    v = cr[_MOMENTS]
    if not isinstance(v, list) or not all(isinstance(x, float) for x in v):
        raise WireError(f"field '{_MOMENTS}' must be a list of floats")
    try:
        return Moments.from_array(np.asarray(v, np.float64))
    except ValueError as err:
        raise WireError(f"field '{_MOMENTS}': {err}") from err


# --- compressed payloads: one uint8 blob + its table (fedrl.compression.framing) -------------
_RAW = "raw"  # a blob Array's stype: the bytes themselves, without an .npy header (~130 bytes saved)


def _put_payload(cr: ConfigRecord, prefix: str, c: Compressed) -> Array:
    f = frame(c)
    cr[f"{prefix}.name"], cr[f"{prefix}.n"] = f.name, f.n
    cr[f"{prefix}.keys"], cr[f"{prefix}.dtypes"], cr[f"{prefix}.lens"] = f.keys, f.dtypes, f.lengths
    return Array(dtype="uint8", shape=(int(f.blob.size),), stype=_RAW, data=f.blob.tobytes())


def _blob(rec: RecordDict) -> np.ndarray:
    if _WEIGHTS not in rec.array_records:
        raise WireError(f"missing array record '{_WEIGHTS}'")
    ar = rec.array_records[_WEIGHTS]
    if list(ar) != ["blob"]:
        raise WireError("a compressed payload travels as exactly one array named 'blob'")
    a = ar["blob"]
    if a.stype != _RAW or a.dtype != "uint8" or a.shape != (len(a.data),):
        raise WireError("the payload blob must be raw uint8 bytes")
    return np.frombuffer(a.data, dtype=np.uint8)


def _get_payload(cr: ConfigRecord, prefix: str, blob: np.ndarray) -> Compressed:
    name = cr.get(f"{prefix}.name")
    keys, dtypes, lengths = (cr.get(f"{prefix}.{k}", []) for k in ("keys", "dtypes", "lens"))
    if not isinstance(name, str) or not all(isinstance(x, list) for x in (keys, dtypes, lengths)):
        raise WireError(f"malformed '{prefix}' payload table")
    if not (all(isinstance(k, str) for k in cast(list, keys)) and all(isinstance(d, str) for d in cast(list, dtypes))
            and all(isinstance(n, int) for n in cast(list, lengths))):
        raise WireError(f"malformed '{prefix}' payload table")
    try:
        return unframe(Frame(name, _int(cr, f"{prefix}.n"), cast(list, keys), cast(list, dtypes),
                             cast(list, lengths), np.asarray(blob)))
    except ValueError as err:
        raise WireError(f"'{prefix}' payload: {err}") from err


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
        rec[_WEIGHTS] = ArrayRecord({"blob": _put_payload(cr, _DELTA, dl.delta)})
    else:
        rec[_WEIGHTS] = ArrayRecord(list(dl.weights or []))
    _put_moments(cr, plan.obs_moments)
    return rec


def decode_plan(rec: RecordDict) -> tuple[LocalPlan, Downlink | Mix]:
    cr = _config(rec, _PLAN)
    mu = cr.get("prox-mu")
    if not isinstance(mu, float):
        raise WireError("field 'prox-mu' must be a float")
    moments = _get_moments(cr)
    clip = cr.get("clip", 0.0)
    if not isinstance(clip, float) or not (np.isfinite(clip) and clip >= 0):
        raise WireError("field 'clip' must be a finite float >= 0")
    run = cr.get("run", "")
    if not isinstance(run, str):
        raise WireError("field 'run' must be a string")
    plan = LocalPlan(_int(cr, "node"), _int(cr, "round"), _int(cr, "total-rounds"), _int(cr, "seed"), mu, moments,
                     _int(cr, "ef-base"), clip, run)
    if _MIX_SELF in cr:
        return plan, _get_mix(rec, cr)
    if f"{_DELTA}.name" in cr:
        return plan, Downlink(None, _get_payload(cr, _DELTA, _blob(rec)), _int(cr, "base-round"))
    return plan, Downlink(_arrays(rec, _WEIGHTS))


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
    own = _arrays(rec, _OWN) if _OWN in rec.array_records else None
    return Mix(w_self, _int(cr, _MIX_OWN_ROUND), own,
               [(cast(int, j), cast(float, w), _arrays(rec, f"peer{j}")) for j, w in zip(peers, ws, strict=True)])


# --- reply: client -> server -----------------------------------------------------------
def encode_reply(reply: Reply) -> RecordDict:
    cr = ConfigRecord({"node": reply.node, "env-steps": reply.env_steps})
    for k, v in reply.metrics.items():
        if k in REPORTED_METRICS and np.isfinite(v):
            cr[f"{_METRIC}{k}"] = float(v)
    rec = RecordDict({_REPLY: cr})
    if reply.update is not None:
        rec[_WEIGHTS] = ArrayRecord({"blob": _put_payload(cr, _UPDATE, reply.update)})
        if reply.ef_base >= 0:
            cr["ef-base"] = reply.ef_base
    else:
        rec[_WEIGHTS] = ArrayRecord(list(reply.weights))
    _put_moments(cr, reply.obs_moments)
    return rec


def decode_reply(rec: RecordDict) -> Reply:
    cr = _config(rec, _REPLY)
    m = {k[len(_METRIC):]: float(cast(float, v)) for k, v in cr.items()
         if k.startswith(_METRIC) and isinstance(v, (int, float)) and not isinstance(v, bool)}
    moments = _get_moments(cr)
    if f"{_UPDATE}.name" in cr:
        update = _get_payload(cr, _UPDATE, _blob(rec))
        ef_base = _int(cr, "ef-base") if "ef-base" in cr else -1
        return Reply(_int(cr, "node"), [], _int(cr, "env-steps"), moments, m, update, ef_base)
    return Reply(_int(cr, "node"), _arrays(rec, _WEIGHTS), _int(cr, "env-steps"), moments, m)


# --- hello: which partition does a SuperNode serve? ---------------------------------------
def encode_hello() -> RecordDict:
    return RecordDict({_HELLO: ConfigRecord({"fedrl": 1})})


def encode_hello_reply(partition_id: int, num_partitions: int) -> RecordDict:
    return RecordDict({_HELLO: ConfigRecord({"partition-id": partition_id, "num-partitions": num_partitions})})


def decode_hello_reply(rec: RecordDict) -> tuple[int, int]:
    cr = _config(rec, _HELLO)
    return _int(cr, "partition-id"), _int(cr, "num-partitions")


# --- client state in context.state ---------------------------------------------------------
def load_node_state(state: RecordDict, node: int) -> NodeState:
    """The state of logical node ``node`` (a SuperNode may serve several)."""
    key = f"{_STATE_PREFIX}{node}"
    if key not in state.array_records:
        return NodeState.empty()
    rec = state.array_records[key]
    return NodeState({k: rec[k].numpy() for k in rec})


def store_node_state(state: RecordDict, node: int, ns: NodeState) -> None:
    state[f"{_STATE_PREFIX}{node}"] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in ns.arrays.items()})


def plan_record(rec: RecordDict) -> ConfigRecord:
    """The plan's ConfigRecord (where stage setups such as secure aggregation's are added)."""
    return _config(rec, _PLAN)
