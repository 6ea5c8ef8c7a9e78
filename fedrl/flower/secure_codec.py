"""Wire format of the secure-aggregation stages (the message keys live here and in ``codec``; the
typed field readers in ``record_fields``).

Stages (``fedrl.flower.secure_exchange``): ``keys`` (only to nodes that hold no keys for the
round), the training plan with the round's setup and the neighbours' public keys (answered with
encrypted shares), ``mask`` and ``unmask`` (answered with shares and the node's keys for its
next round).

Stage messages are one ``ConfigRecord`` each (ints, bytes and lists of them), plus the packed
masked vector as one uint8 array. Every message names its node, round and session; the
receiving side checks them (``SecAggServer`` on the server, ``check_session`` on the node), so
a message replayed from another round is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedrl.compression.ring_codes import pack_ring, ring_bytes, unpack_ring
from fedrl.flower.record_fields import array_record, bytes_field, bytes_list, config_record, int_field, int_list
from fedrl.flower.safe_arrays import WireError, decode_array
from fedrl.secagg import Keys, Masked

KEYS, MASK, UNMASK = "train.secagg_keys", "train.secagg_mask", "train.secagg_unmask"
_SA, _Y = "secagg", "masked"


@dataclass(frozen=True)
class Setup:
    """What a plan carries so the node can build the round's ``Params`` (``secagg.make_params``)."""

    session: bytes
    nodes: list[int]
    neighbors: int
    threshold: float
    bits: int
    length: int
    graph_seed: int


def put_setup(cr: ConfigRecord, s: Setup) -> None:
    cr.update({"sa.session": s.session, "sa.nodes": s.nodes, "sa.neighbors": s.neighbors,
               "sa.threshold": float(s.threshold), "sa.bits": s.bits, "sa.length": s.length,
               "sa.graph-seed": s.graph_seed})


def put_keys(cr: ConfigRecord, own: tuple[bytes, bytes], neighbours: dict[int, tuple[bytes, bytes]]) -> None:
    """Add to a plan the node's own public keys (as the server will route them) and its neighbours'."""
    ids = sorted(neighbours)
    cr.update({"sa.own-pks": list(own), "sa.ids": ids, "sa.c-pks": [neighbours[i][0] for i in ids],
               "sa.s-pks": [neighbours[i][1] for i in ids]})


def get_keys(cr: ConfigRecord) -> tuple[tuple[bytes, bytes], dict[int, tuple[bytes, bytes]]]:
    """Inverse of :func:`put_keys`."""
    own = bytes_list(cr, "sa.own-pks")
    ids, c, s = int_list(cr, "sa.ids"), bytes_list(cr, "sa.c-pks"), bytes_list(cr, "sa.s-pks")
    if len(own) != 2 or not len(ids) == len(c) == len(s) or len(set(ids)) != len(ids):
        raise WireError("malformed public keys in the plan")
    return (own[0], own[1]), {i: (a, b) for i, a, b in zip(ids, c, s, strict=True)}


def get_setup(cr: ConfigRecord) -> Setup | None:
    if "sa.session" not in cr:
        return None
    thr = cr.get("sa.threshold")
    if not isinstance(thr, float):
        raise WireError("field 'sa.threshold' must be a float")
    return Setup(bytes_field(cr, "sa.session"), int_list(cr, "sa.nodes"), int_field(cr, "sa.neighbors"), thr,
                 int_field(cr, "sa.bits"), int_field(cr, "sa.length"), int_field(cr, "sa.graph-seed"))


def _head(node: int, rnd: int, session: bytes) -> ConfigRecord:
    return ConfigRecord({"node": node, "round": rnd, "session": session})


def head(rec: RecordDict) -> tuple[int, int, bytes]:
    """(node, round, session) of any stage message."""
    cr = _body(rec)
    return int_field(cr, "node"), int_field(cr, "round"), bytes_field(cr, "session")


def _body(rec: RecordDict) -> ConfigRecord:
    return config_record(rec, _SA)


def _encode_map(node: int, rnd: int, session: bytes, m: dict[int, bytes], ids: str, values: str) -> RecordDict:
    """``{peer: bytes}`` as two parallel lists (sorted by peer) under ``ids`` and ``values``."""
    cr = _head(node, rnd, session)
    order = sorted(m)
    cr.update({ids: order, values: [m[i] for i in order]})
    return RecordDict({_SA: cr})


def _decode_map(rec: RecordDict, ids: str, values: str, what: str) -> dict[int, bytes]:
    head(rec)
    cr = _body(rec)
    keys, blobs = int_list(cr, ids), bytes_list(cr, values)
    if len(keys) != len(blobs) or len(set(keys)) != len(keys):
        raise WireError(f"malformed {what}: {len(keys)} ids, {len(blobs)} values")
    return dict(zip(keys, blobs, strict=True))


# --- keys: the request (head only) and the reply (two public keys) -------------------------
def encode_keys_request(node: int, rnd: int, session: bytes) -> RecordDict:
    return RecordDict({_SA: _head(node, rnd, session)})


def encode_keys(k: Keys) -> RecordDict:
    cr = _head(k.node, k.round, k.session)
    cr.update({"c-pk": k.c_pk, "s-pk": k.s_pk})
    return RecordDict({_SA: cr})


def decode_keys(rec: RecordDict) -> Keys:
    node, rnd, session = head(rec)
    cr = _body(rec)
    return Keys(node, rnd, session, bytes_field(cr, "c-pk"), bytes_field(cr, "s-pk"))


# --- ciphertexts: the reply to the plan (with optional clear metrics), and the mask request -
def encode_ciphertexts(node: int, rnd: int, session: bytes, cts: dict[int, bytes],
                       metrics: dict[str, float] | None = None) -> RecordDict:
    """Both directions: ``{peer: ciphertext}`` (from this sender, or to this receiver)."""
    rec = _encode_map(node, rnd, session, cts, "peers", "cts")
    cr = _body(rec)
    for name, v in (metrics or {}).items():
        if np.isfinite(v):
            cr[f"metric.{name}"] = float(v)
    return rec


def decode_ciphertexts(rec: RecordDict) -> dict[int, bytes]:
    return _decode_map(rec, "peers", "cts", "ciphertexts")


def decode_trained(rec: RecordDict) -> tuple[dict[int, bytes], dict[str, float]]:
    """The reply to a secure plan: ``({peer: ciphertext}, metrics sent in the clear)``.

    Raises:
        WireError: malformed ciphertexts, or a metric that is not a finite float.
    """
    m = {}
    for k, v in _body(rec).items():
        if k.startswith("metric."):
            if not isinstance(v, float) or not np.isfinite(v):
                raise WireError(f"field '{k}' must be a finite float")
            m[k[len("metric."):]] = v
    return decode_ciphertexts(rec), m


# --- stage 3 reply: the masked vector, packed at the ring's bit width -----------------------
def encode_masked(m: Masked, bits: int) -> RecordDict:
    cr = _head(m.node, m.round, m.session)
    cr["rejected"] = list(m.rejected)
    return RecordDict({_SA: cr, _Y: ArrayRecord({"y": Array(pack_ring(m.y, bits))})})


def decode_masked(rec: RecordDict, bits: int, length: int) -> Masked:
    """The masked vector of ``length`` ring elements of ``bits`` bits, checked as ``safe_arrays`` does
    (uint8 ``.npy`` of exactly ``ring_bytes(length, bits)`` bytes) before anything is allocated.

    Raises:
        WireError: a missing or malformed head or vector (the message says which and the size wanted).
    """
    node, rnd, session = head(rec)
    ar = array_record(rec, _Y)
    if ar is None or list(ar) != ["y"]:
        raise WireError("the masked vector must travel as one array named 'y'")
    need = ring_bytes(length, bits)
    try:
        packed = decode_array(ar["y"], np.uint8, (need,))
    except WireError as err:
        raise WireError(f"masked vector: {err} ({length} elements of {bits} bits need {need} bytes)") from err
    y = unpack_ring(packed, bits, length)
    return Masked(node, rnd, session, y, tuple(int_list(_body(rec), "rejected")))


# --- stage 4: who survived out, shares back --------------------------------------------------
def encode_unmask_request(node: int, rnd: int, session: bytes, survivors: list[int], dropped: list[int]) -> RecordDict:
    cr = _head(node, rnd, session)
    cr.update({"survivors": list(survivors), "dropped": list(dropped)})
    return RecordDict({_SA: cr})


def decode_unmask_request(rec: RecordDict) -> tuple[list[int], list[int]]:
    head(rec)
    cr = _body(rec)
    return int_list(cr, "survivors"), int_list(cr, "dropped")


def encode_shares(node: int, rnd: int, session: bytes, shares: dict[int, bytes],
                  next_keys: tuple[bytes, bytes] | None = None) -> RecordDict:
    """The unmask reply: the shares, and the public keys of the node's next session if it made them."""
    rec = _encode_map(node, rnd, session, shares, "owners", "shares")
    if next_keys is not None:
        _body(rec)["next-pks"] = list(next_keys)
    return rec


def decode_shares(rec: RecordDict) -> tuple[dict[int, bytes], tuple[bytes, bytes] | None]:
    shares = _decode_map(rec, "owners", "shares", "shares")
    cr = _body(rec)
    if "next-pks" not in cr:
        return shares, None
    nxt = bytes_list(cr, "next-pks")
    if len(nxt) != 2:
        raise WireError("field 'next-pks' must hold two public keys")
    return shares, (nxt[0], nxt[1])
