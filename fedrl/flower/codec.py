"""Wire format: typed fedrl values <-> Flower records. The only module with message keys.

Weights travel as ``ArrayRecord``s (NumPy ``.npy`` bytes, loaded with
``allow_pickle=False`` by Flower), scalars as ``ConfigRecord``/``MetricRecord``. Nothing is
pickled. ``wire_bytes`` measures what actually crosses the wire: the deflated bytes of every
object in the message's object tree, the unit Flower 1.42 transfers.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fedrl.federation import Reply
from fedrl.rl.normalize import Moments
from fedrl.rl.train import LocalPlan, NodeState

TRAIN = "train"
QUERY = "query"
_PLAN, _WEIGHTS, _MOMENTS, _REPLY, _METRICS, _HELLO = "plan", "weights", "moments", "reply", "metrics", "hello"
_STATE_PREFIX = "fedrl.node"


class WireError(ValueError):
    """A message lacks a record or field fedrl expects, or has the wrong type."""


def wire_bytes(msg: Message) -> int:
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(msg.content).values())


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


def _moments_record(m: Moments | None) -> ArrayRecord:
    return ArrayRecord([m.to_array()] if m is not None else [])


def _moments_from(rec: RecordDict) -> Moments | None:
    arrs = _arrays(rec, _MOMENTS)
    return Moments.from_array(arrs[0]) if arrs else None


# --- plan: server -> client ------------------------------------------------------------
def encode_plan(plan: LocalPlan, weights: list[np.ndarray]) -> RecordDict:
    return RecordDict({
        _PLAN: ConfigRecord({"node": plan.node, "round": plan.round, "total-rounds": plan.total_rounds,
                             "seed": plan.seed, "prox-mu": float(plan.prox_mu)}),
        _WEIGHTS: ArrayRecord(list(weights)),
        _MOMENTS: _moments_record(plan.obs_moments),
    })


def decode_plan(rec: RecordDict) -> tuple[LocalPlan, list[np.ndarray]]:
    cr = _config(rec, _PLAN)
    mu = cr.get("prox-mu")
    if not isinstance(mu, float):
        raise WireError("field 'prox-mu' must be a float")
    plan = LocalPlan(_int(cr, "node"), _int(cr, "round"), _int(cr, "total-rounds"), _int(cr, "seed"),
                     mu, _moments_from(rec))
    return plan, _arrays(rec, _WEIGHTS)


# --- reply: client -> server -----------------------------------------------------------
def encode_reply(reply: Reply) -> RecordDict:
    return RecordDict({
        _REPLY: ConfigRecord({"node": reply.node, "env-steps": reply.env_steps}),
        _WEIGHTS: ArrayRecord(list(reply.weights)),
        _MOMENTS: _moments_record(reply.obs_moments),
        _METRICS: MetricRecord({k: float(v) for k, v in reply.metrics.items() if np.isfinite(v)}),
    })


def decode_reply(rec: RecordDict) -> Reply:
    cr = _config(rec, _REPLY)
    metrics = rec.metric_records.get(_METRICS)
    m = {k: float(cast(float, v)) for k, v in (metrics or {}).items() if isinstance(v, (int, float))}
    return Reply(_int(cr, "node"), _arrays(rec, _WEIGHTS), _int(cr, "env-steps"), _moments_from(rec), m)


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
