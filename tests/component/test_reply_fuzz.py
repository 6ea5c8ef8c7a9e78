"""Thousands of random and malicious replies against the server's reply handling (issue 15).

Each example starts from an honest reply (plain float32 weights, a quantize or a top-k payload,
or a secure round's masked vector or trained reply), applies a few drawn mutations (random bytes,
swapped stypes and dtypes, lying and huge declared shapes, NaN/inf/3.4e38 values, wrong array
counts and names, top-k payloads with too many values and repeated indices, lying frame tables,
mistyped or missing fields and records, error replies), wraps it in a real Flower ``Message`` and
hands it to what the ServerApp calls: ``transport.check_reply`` with a real ``Federation``, or
``transport.decode_reply_safely`` with the secure stage's decoder. Whatever comes in:

- no exception escapes;
- the reply is either accepted, with finite float32 arrays of the model's shapes, or excluded
  with a non-empty reason;
- the memory handling one reply costs (tracemalloc peak) stays within 8x the model's float32
  size plus a fixed allowance.
"""

from __future__ import annotations

import functools
import io
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrl.compression.base import Compressed
from fedrl.compression.pipeline import compress, rng_for, uplink_scale
from fedrl.config import from_run_config
from fedrl.flower import codec
from fedrl.flower import secure_codec as sc
from fedrl.flower.hostile import npy_bytes as _npy
from fedrl.flower.transport import Answer, check_reply, decode_reply_safely
from fedrl.model.layout import flatten
from fedrl.secagg import Masked
from fedrl.server.federation import Federation
from fedrl.wire import Reply

# Pinned: these tests check exact aggregation formulas on replies without observation statistics
# (the defaults turn normalization on and anneal the server step, issue 13).
SMALL = {"nodes.count": 3, "algo.local-steps": 256, "eval.episodes": 1, "algo.norm-obs": "off", "strategy.server-lr-end": -1}
ALLOWANCE = 256 * 1024  # bytes: Python objects, Flower records, reason strings
SID = bytes(range(16))
SPECIAL = [np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, 0.0]
STATS = {"accepted": 0, "excluded": 0, "peak": 0}  # the last run's counts and largest peak (bytes)
HYPOTHESIS = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    # Flower stamps a reply Message with the run it belongs to; outside a run there is none.
    for attr, value in (("_run_id", 5), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


@functools.cache
def _fed(up: str) -> Federation:
    fed = Federation(from_run_config({**SMALL, "compression.up": up, "compression.fraction": 0.01}))
    fed.begin_round(1)
    return fed


@functools.cache
def _honest(up: str, node: int) -> Reply:
    """What node ``node`` sends after training (small random movement), as the node would encode it."""
    fed = _fed(up)
    base = fed.sent(node)
    rng = np.random.default_rng(node)
    trained = [(w + rng.normal(0.0, 0.01, w.shape)).astype(np.float32) for w in base]
    metrics = {"train_return": 21.0, "train_seconds": 0.5}
    if not fed.up.active:
        return Reply(node, trained, 256, None, metrics)
    vec = (flatten(trained) - flatten(base)) / uplink_scale(fed.cfg, fed.up, 1)
    c, _ = compress(vec, fed.up, rng_for(fed.up.name, fed.cfg.seed, 1, node), None)
    return Reply(node, [], 256, None, metrics, c)


def _message(content: RecordDict | Error) -> Message:
    request = Message(RecordDict(), dst_node_id=7, message_type=codec.TRAIN, group_id="1")
    return Message(content, reply_to=request)


def _saved(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


# --- mutations: each takes the Hypothesis data object and changes the content in place -------
def _pick_array(data: st.DataObject, rec: RecordDict) -> tuple[ArrayRecord, str] | None:
    names = [(r, k) for r in sorted(rec.array_records) for k in rec.array_records[r]]
    if not names:
        return None
    r, k = data.draw(st.sampled_from(names))
    return rec.array_records[r], k


def m_bytes(data: st.DataObject, rec: RecordDict) -> None:
    """Random bytes: replaced, flipped, cut or extended."""
    picked = _pick_array(data, rec)
    if picked is None:
        return
    ar, k = picked
    a = ar[k]
    raw = bytearray(a.data)
    how = data.draw(st.sampled_from(["replace", "flip", "cut", "extend", "empty"]))
    if how == "replace":
        raw = bytearray(data.draw(st.binary(max_size=400)))
    elif how == "flip" and raw:
        for at in data.draw(st.lists(st.integers(0, len(raw) - 1), min_size=1, max_size=8)):
            raw[at] = data.draw(st.integers(0, 255))
    elif how == "cut":
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    elif how == "extend":
        raw += data.draw(st.binary(min_size=1, max_size=64))
    else:
        raw = bytearray()
    a.data = bytes(raw)


def m_stype(data: st.DataObject, rec: RecordDict) -> None:
    picked = _pick_array(data, rec)
    if picked is not None:
        ar, k = picked
        ar[k].stype = data.draw(st.sampled_from(["raw", "numpy.ndarray", "torch.Tensor", "", "numpy.ndarray "])
                                | st.text(max_size=12))


DTYPES = ["float64", "float16", "int32", "int64", "uint8", "bool", "complex64", "<U3", "V4", "datetime64[s]",
          ">f4", "[('a', '<f4')]"]


def m_dtype(data: st.DataObject, rec: RecordDict) -> None:
    """The same values re-saved in another dtype (metadata updated to match, as a careful liar would)."""
    picked = _pick_array(data, rec)
    if picked is None:
        return
    ar, k = picked
    name = data.draw(st.sampled_from(DTYPES))
    n = data.draw(st.integers(0, 64))
    dt = np.dtype([("a", "<f4")]) if name.startswith("[") else np.dtype(name)
    ar[k] = Array(dtype=str(dt), shape=(n,), stype="numpy.ndarray", data=_saved(np.zeros(n, dt)))


def m_header(data: st.DataObject, rec: RecordDict) -> None:
    """A hand-written header over the same body: lying or huge shapes, Fortran order, forbidden descrs."""
    picked = _pick_array(data, rec)
    if picked is None:
        return
    ar, k = picked
    a = ar[k]
    body = a.data[128:] if a.data[:6] == b"\x93NUMPY" else a.data
    shape = data.draw(st.sampled_from([(10**10,), (2**62,), (2**31, 2**31), (), (0,), (1,), (-1,), (3, 3)])
                      | st.tuples(st.integers(0, 10**6), st.integers(0, 100)))
    descr = data.draw(st.sampled_from(["<f4", "<f4", "|u1", "|O", "<f8", "<M8[s]", "|V4", "<U1"]))
    fortran = data.draw(st.booleans())
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}"
    meta = shape if data.draw(st.booleans()) and all(x >= 0 for x in shape) else a.shape
    ar[k] = Array(dtype=a.dtype, shape=meta, stype=a.stype, data=_npy(header, body))


def m_layout(data: st.DataObject, rec: RecordDict) -> None:
    """Wrong array counts, names and orders; whole records missing, emptied or renamed."""
    how = data.draw(st.sampled_from(["drop", "extra", "rename", "swap", "empty", "no-weights", "no-config",
                                     "rename-config", "stray", "metric-record"]))
    names = sorted(rec.array_records)
    if how in ("drop", "extra", "rename", "swap") and names:
        ar = rec.array_records[data.draw(st.sampled_from(names))]
        keys = list(ar)
        if how == "drop" and keys:
            del ar[data.draw(st.sampled_from(keys))]
        elif how == "extra":
            ar[data.draw(st.sampled_from(["extra", "99", "blob", "y"]))] = Array(np.ones(3, np.float32))
        elif how == "rename" and keys:
            k = data.draw(st.sampled_from(keys))
            ar[data.draw(st.text(min_size=1, max_size=5))] = ar.pop(k)
        elif how == "swap" and len(keys) >= 2:
            i, j = data.draw(st.lists(st.sampled_from(keys), min_size=2, max_size=2, unique=True))
            ar[i], ar[j] = ar[j], ar[i]
    elif how == "empty" and names:
        rec[names[0]] = ArrayRecord()
    elif how == "no-weights" and names:
        del rec[names[0]]
    elif how in ("no-config", "rename-config") and rec.config_records:
        name = min(rec.config_records)
        cr = rec.config_records[name]
        del rec[name]
        if how == "rename-config":
            rec["x" + name] = cr
    elif how in ("stray", "metric-record"):
        name = data.draw(st.sampled_from(["weights", "reply", "masked", "secagg", "z"]))
        if name in rec:
            del rec[name]  # replaced, not overwritten: Flower logs a warning for that
        rec[name] = ConfigRecord({"a": 1}) if how == "stray" else MetricRecord({"x": 1.0})


VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 1, 2**62, 10**12]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.binary(max_size=24), st.booleans(),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=12), st.lists(st.floats(), max_size=12),
    st.lists(st.text(max_size=6), max_size=12), st.lists(st.binary(max_size=8), max_size=4),
)
KEYS = ["node", "env-steps", "ef-base", "mom", "u.name", "u.n", "u.keys", "u.dtypes", "u.lens", "m", "round", "session", "rejected", "peers", "cts", "metric.train_return"]


def m_field(data: st.DataObject, rec: RecordDict) -> None:
    """A config field set to a value of a random type, or deleted."""
    if not rec.config_records:
        return
    cr = rec.config_records[data.draw(st.sampled_from(sorted(rec.config_records)))]
    key = data.draw(st.sampled_from(sorted(set(cr) | set(KEYS))))
    if data.draw(st.booleans()) and key in cr:
        del cr[key]
    else:
        cr[key] = data.draw(VALUES)


def m_table(data: st.DataObject, rec: RecordDict) -> None:
    """A lying frame table: lengths, dtypes, keys, n."""
    if "reply" not in rec.config_records or not isinstance(rec.config_records["reply"].get("u.lens"), list):
        return
    cr = rec.config_records["reply"]
    lens = list(cr["u.lens"])  # type: ignore[arg-type]  # a list, checked above
    what = data.draw(st.sampled_from(["lens", "dtypes", "keys", "n"]))
    if what == "lens":
        cr["u.lens"] = [data.draw(st.sampled_from([-1, 0, 1, 2**40, 10**12]) | st.integers(0, 20000)) for _ in lens]
    elif what == "dtypes":
        cr["u.dtypes"] = [data.draw(st.sampled_from(["uint8", "float32", "uint64", "object", "<M8", "float64", ""]))
                          for _ in lens]
    elif what == "keys":
        cr["u.keys"] = data.draw(st.lists(st.sampled_from(["values", "idx_delta", "idx_bitmap", "scale", "codes"]),
                                          min_size=len(lens), max_size=len(lens)))
    else:
        cr["u.n"] = data.draw(st.sampled_from([0, 1, 9154, 9156, 10**9, -5]))


MUTATIONS: list[Callable[[st.DataObject, RecordDict], None]] = [m_bytes, m_stype, m_dtype, m_header, m_layout,
                                                                  m_field, m_table]


def _mutate(data: st.DataObject, rec: RecordDict) -> None:
    for m in data.draw(st.lists(st.sampled_from(MUTATIONS), max_size=3)):
        m(data, rec)


# --- hostile replies that are well-formed on the wire -------------------------------------
def _special_weights(data: st.DataObject, up: str, node: int) -> Reply:
    """Honest encoding of weights (or a payload) holding NaN, inf or 3.4e38."""
    r = _honest(up, node)
    v = data.draw(st.sampled_from(SPECIAL))
    if r.update is None:
        ws = [w.copy() for w in r.weights]
        i = data.draw(st.integers(0, len(ws) - 1))
        ws[i].ravel()[data.draw(st.integers(0, ws[i].size - 1))] = v
        return Reply(node, ws, r.env_steps, None, r.metrics)
    key = "values" if "values" in r.update.arrays else "scale"
    arrays = {**r.update.arrays, key: r.update.arrays[key].copy()}
    arrays[key].ravel()[0] = v
    return Reply(node, [], r.env_steps, None, r.metrics, Compressed(r.update.name, arrays, r.update.n))


def _hostile_topk(data: st.DataObject, node: int) -> Reply:
    """Top-k payloads with too many values, repeated, unsorted or out-of-range indices, wide gaps."""
    n = _fed("topk").n_params
    k = data.draw(st.sampled_from([92, 93, 91, 0, n, n + 1, 3 * n]))
    values = np.full(k, data.draw(st.sampled_from([0.01, *SPECIAL])), np.float32)
    how = data.draw(st.sampled_from(["dup", "range", "wide", "bitmap", "random"]))
    arrays: dict[str, np.ndarray]
    if how in ("dup", "range", "wide"):
        width = {"dup": 14, "range": 14, "wide": 63}[how]
        gap = {"dup": 0, "range": 200, "wide": 2**40}[how]
        gaps = np.full(k, gap, np.uint64)
        if k:
            gaps[0] = 5
        bits = ((gaps[:, None] >> np.arange(width, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
        idx = np.concatenate([[width], np.packbits(bits.ravel(), bitorder="little")]).astype(np.uint8)
        arrays = {"values": values, "idx_delta": idx}
    elif how == "bitmap":
        arrays = {"values": values, "idx_bitmap": np.full(data.draw(st.sampled_from([0, 1145, 1146, 5000])), 255,
                                                           np.uint8)}
    else:
        arrays = {"values": values, "idx_delta": np.frombuffer(data.draw(st.binary(max_size=600)), np.uint8)}
    return Reply(node, [], 256, None, {}, Compressed("topk", arrays, data.draw(st.sampled_from([n, n, n + 1]))))


def _hostile_quantize(data: st.DataObject, node: int) -> Reply:
    n = _fed("quantize").n_params
    scales = data.draw(st.sampled_from([0, 1, 2, n]))
    codes = data.draw(st.sampled_from([n, n - 1, n + 1, 0, 4 * n]))
    arrays: dict[str, np.ndarray] = {"scale": np.full(scales, data.draw(st.sampled_from([0.01, *SPECIAL])), np.float32),
              "codes": np.zeros(codes, np.uint8)}
    return Reply(node, [], 256, None, {}, Compressed("quantize", arrays, n))


# --- checks --------------------------------------------------------------------------------
def _measure(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and the peak bytes it allocated (traced only while it runs: tracing Hypothesis
    itself would make the test 5x slower)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _check_outcome(fed: Federation, checked: Reply | str, node: int, peak: int) -> None:
    assert peak <= 8 * 4 * fed.n_params + ALLOWANCE, peak
    STATS["peak"] = max(STATS["peak"], peak)
    if isinstance(checked, str):
        assert checked.strip(), "an exclusion must say why"
        STATS["excluded"] += 1
        return
    assert isinstance(checked, Reply) and checked.node == node
    arrays = fed.delta(checked) if checked.update is not None else checked.weights
    shapes = [w.shape for w in fed.models[0]]
    assert [a.shape for a in arrays] == shapes
    assert all(a.dtype == np.float32 and bool(np.all(np.isfinite(a))) for a in arrays)
    assert all(isinstance(v, float) and np.isfinite(v) for v in checked.metrics.values())
    STATS["accepted"] += 1


def _run(up: str, examples: int, hostile: Callable[[st.DataObject, int], Reply] | None) -> dict[str, int]:
    fed = _fed(up)
    for node in range(3):
        _honest(up, node)  # built before tracing: they are the node's work, not the server's

    @settings(HYPOTHESIS, max_examples=examples)
    @given(st.data())
    def one(data: st.DataObject) -> None:
        node = data.draw(st.integers(0, 2))
        kind = data.draw(st.sampled_from(["honest", "mutated", "mutated", "special", "hostile", "error"]))
        if kind == "special":
            reply = _special_weights(data, up, node)
        elif kind == "hostile" and hostile is not None:
            reply = hostile(data, node)
        else:
            reply = _honest(up, node)
        rec = codec.encode_reply(reply)
        if kind == "mutated":
            _mutate(data, rec)
        msg = _message(Error(code=0, reason=data.draw(st.text(max_size=30))) if kind == "error" else rec)
        expected = data.draw(st.sampled_from([node, node, (node + 1) % 3]))
        checked, peak = _measure(lambda: check_reply(fed, Answer.of(msg), expected))
        _check_outcome(fed, checked, expected, peak)

    return _counted(one)


def _counted(run: Callable[[], None]) -> dict[str, int]:
    """Run the examples; the counts of accepted and excluded replies."""
    STATS.update(accepted=0, excluded=0, peak=0)
    run()
    return dict(STATS)


@pytest.mark.parametrize(("up", "examples", "hostile"), [
    ("none", 900, None), ("quantize", 600, _hostile_quantize), ("topk", 700, _hostile_topk),
])
def test_no_reply_escapes_or_poisons_the_server(up: str, examples: int,
                                                 hostile: Callable[[st.DataObject, int], Reply] | None) -> None:
    counts = _run(up, examples, hostile)
    # Not vacuous: honest replies get in, and most mutated ones are refused.
    assert counts["accepted"] >= examples // 20 and counts["excluded"] >= examples // 3, counts


# --- secure aggregation: the masked vector and the trained reply ------------------------------
SECURE_EXAMPLES = 700


def _masked(node: int, bits: int, length: int) -> RecordDict:
    y = np.random.default_rng(node).integers(0, 1 << bits, length, dtype=np.uint64)
    return sc.encode_masked(Masked(node, 1, SID, y, (2,)), bits)


def test_no_secure_stage_reply_escapes() -> None:
    fed = _fed("quantize")
    length = fed.n_params + 1

    @settings(HYPOTHESIS, max_examples=SECURE_EXAMPLES)
    @given(st.data())
    def one(data: st.DataObject) -> None:
        node, bits = data.draw(st.integers(0, 2)), data.draw(st.sampled_from([10, 16, 24]))
        stage = data.draw(st.sampled_from(["mask", "mask", "train"]))
        if stage == "mask":
            rec = _masked(node, bits, length)
        else:
            metrics = {"train_return": data.draw(st.sampled_from([21.0, *SPECIAL]))}
            rec = sc.encode_ciphertexts(node, 1, SID, {1: b"x" * 80, 2: b"y" * 80}, metrics)
        kind = data.draw(st.sampled_from(["honest", "mutated", "mutated", "mutated", "error"]))
        if kind == "mutated":
            _mutate(data, rec)
        msg = _message(Error(code=0, reason="boom") if kind == "error" else rec)
        decode = (lambda rec: sc.decode_masked(rec, bits, length)) if stage == "mask" else sc.decode_trained
        (value, why), peak = _measure(lambda: decode_reply_safely(Answer.of(msg), decode))
        assert peak <= 8 * 4 * fed.n_params + ALLOWANCE, peak
        STATS["peak"] = max(STATS["peak"], peak)
        if why is not None:
            assert value is None and why.strip()
            STATS["excluded"] += 1
            return
        if stage == "mask":
            assert isinstance(value, Masked) and value.y.shape == (length,) and value.y.dtype == np.uint64
            assert int(value.y.max()) < (1 << bits)
            assert all(isinstance(x, int) for x in value.rejected)
        else:
            cts, metrics = value
            assert all(isinstance(k, int) and isinstance(v, bytes) for k, v in cts.items())
            assert all(isinstance(v, float) and np.isfinite(v) for v in metrics.values())
        STATS["accepted"] += 1

    counts = _counted(one)
    assert counts["accepted"] >= SECURE_EXAMPLES // 20 and counts["excluded"] >= SECURE_EXAMPLES // 3, counts
