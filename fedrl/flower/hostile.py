"""Hostile replies for experiments and tests (``attack.name``; the kinds are documented in
``fedrl.inject.attacks``): what a hostile node sends instead of its honest reply.

Poisoned replies (``REPLY_ATTACKS``) change the typed ``Reply`` before it is encoded, so they
arrive well-formed; malformed records (``RECORD_ATTACKS``) rewrite the encoded record's first
array after encoding, as a hostile ClientApp could. Nothing here runs on the server.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from fedrl.compression.base import Compressed
from fedrl.config import Config
from fedrl.flower import codec
from fedrl.flower.safe_arrays import NPY_MAGIC, NPY_STYPE
from fedrl.inject.attacks import RECORD_ATTACKS, REPLY_ATTACKS
from fedrl.model.moments import Moments
from fedrl.wire import Reply

HUGE = 3.4e38  # finite in float32 (max 3.4028235e38)
BOMB_SHAPE = (100_000, 100_000)  # 1e10 float32 elements: 40 GB if a decoder allocates before reading


def hostile_content(kind: str, reply: Reply, cfg: Config, rnd: int, obs_dim: int) -> RecordDict:
    """The reply content a node of attack ``kind`` sends in round ``rnd`` instead of ``reply``'s."""
    if kind in REPLY_ATTACKS:
        return codec.encode_reply(poison(kind, reply, cfg, rnd, obs_dim))
    if kind == "topk-overflow":
        if reply.update is None:
            raise ValueError("topk-overflow needs compression.up = topk")
        return codec.encode_reply(dataclasses.replace(reply, update=overflow_topk(reply.update.n)))
    if kind in RECORD_ATTACKS:
        return malform(kind, codec.encode_reply(reply))
    raise ValueError(f"unknown hostile reply kind {kind!r}")


def poison(kind: str, reply: Reply, cfg: Config, rnd: int, obs_dim: int) -> Reply:
    """A well-formed reply that lies (see ``fedrl.inject.attacks``)."""
    if kind in ("huge-weights", "nan-weights"):
        value = HUGE if kind == "huge-weights" else np.nan
        update = None if reply.update is None else _fill(reply.update, value)
        return dataclasses.replace(reply, weights=[np.full_like(w, value) for w in reply.weights], update=update)
    if kind == "lie-steps":
        return dataclasses.replace(reply, env_steps=100 * cfg.algo.local_steps)
    if kind == "bad-moments":
        m = reply.obs_moments or Moments(float(reply.env_steps), np.zeros(obs_dim), np.ones(obs_dim))
        # odd rounds: an infinite count; even rounds: the right count but a negative second moment
        bad = (dataclasses.replace(m, count=float("inf")) if rnd % 2 else dataclasses.replace(m, m2=-np.ones_like(m.m2)))
        return dataclasses.replace(reply, obs_moments=bad)
    if kind == "wrong-node":
        return dataclasses.replace(reply, node=(reply.node + 1) % cfg.nodes.count)
    raise ValueError(f"unknown poisoned reply kind {kind!r}")


def _fill(c: Compressed, value: float) -> Compressed:
    """Every float array of a payload filled with ``value`` (at its dtype's largest finite value)."""
    out = {}
    for k, a in c.arrays.items():
        if np.issubdtype(a.dtype, np.floating):
            v = min(value, float(np.finfo(a.dtype).max)) if np.isfinite(value) else value
            out[k] = np.full_like(a, v)
        else:
            out[k] = a
    return Compressed(c.name, out, c.n)


def overflow_topk(n: int) -> Compressed:
    """A top-k payload for an ``n``-parameter model with ``2n`` values, all at index 0: the indices
    travel as gaps of width 1 bit (``fedrl.compression.packing``), every gap 0."""
    k = 2 * n
    idx = np.concatenate([np.array([1], np.uint8), np.zeros((k + 7) // 8, np.uint8)])
    return Compressed("topk", {"values": np.full(k, 0.01, np.float32), "idx_delta": idx}, n)


def npy_bytes(header: str, body: bytes = b"") -> bytes:
    """``.npy`` (format 1.0) bytes with the header text as given (it may be any text) and ``body`` after it."""
    h = header.encode("latin1")
    return NPY_MAGIC + len(h).to_bytes(2, "little") + h + body


def npy_bomb(dtype: str = "<f4", shape: tuple[int, ...] = BOMB_SHAPE) -> bytes:
    """A complete ``.npy`` header (format 1.0) declaring ``shape`` of ``dtype``, with no data after it."""
    header = repr({"descr": dtype, "fortran_order": False, "shape": shape})
    pad = 64 - (len(NPY_MAGIC) + 2 + len(header) + 1) % 64  # numpy aligns the data to 64 bytes
    return npy_bytes(header + " " * pad + "\n")


def malform(kind: str, rec: RecordDict) -> RecordDict:
    """``rec`` (an encoded reply) with its first array rewritten (see ``fedrl.inject.attacks``;
    ``topk-overflow`` is a payload, made by ``hostile_content``)."""
    name, ar = next(iter(rec.array_records.items()))
    keys = list(ar)
    first = ar[keys[0]]
    arrays = {k: ar[k] for k in keys}
    raw = first.stype != NPY_STYPE  # a compressed payload's blob
    if kind == "wrong-shape":
        if raw:  # the blob 8 bytes longer than its table says
            arrays[keys[0]] = Array(dtype=first.dtype, shape=(len(first.data) + 8,), stype=first.stype,
                                    data=first.data + bytes(8))
        else:
            w = first.numpy()
            arrays[keys[0]] = Array(np.zeros((w.shape[0] + 1, *w.shape[1:]), w.dtype))
    elif kind == "bad-dtype":
        if raw:
            arrays[keys[0]] = Array(dtype="<U4", shape=(len(first.data) // 4,), stype=first.stype, data=first.data)
        else:  # a string array (np.isfinite raises on it), then a datetime64 one (np.isfinite passes it)
            arrays[keys[0]] = Array(np.full(first.shape, "x", dtype="<U1"))
            if len(keys) > 1:
                arrays[keys[1]] = Array(np.zeros(ar[keys[1]].shape, dtype="datetime64[s]"))
    elif kind == "bad-stype":
        arrays[keys[0]] = Array(dtype=first.dtype, shape=first.shape, stype="bogus.stype", data=first.data)
    elif kind == "npy-bomb":  # the declared shape is the honest one; the header inside claims 1e10 elements
        arrays[keys[0]] = Array(dtype=first.dtype, shape=first.shape, stype=NPY_STYPE, data=npy_bomb())
    else:
        raise ValueError(f"unknown malformed record kind {kind!r}")
    rec[name] = ArrayRecord(arrays)
    return rec
