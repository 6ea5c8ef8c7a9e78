"""The safe decoder of node arrays (fedrl.flower.safe_arrays): exact round trips, one reason per refusal."""

from __future__ import annotations

import io
import re
import tracemalloc
from collections.abc import Callable

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, RecordDict

from fedrl.compression.base import Compressed
from fedrl.flower import codec
from fedrl.flower.codec import Layout
from fedrl.flower.hostile import npy_bytes as _npy
from fedrl.flower.safe_arrays import WireError, decode_array, decode_arrays, decode_blob, read_npy_header
from fedrl.wire import Reply


def _array(data: bytes, dtype: str = "float32", shape: tuple[int, ...] = (2, 3), stype: str = "numpy.ndarray") -> Array:
    return Array(dtype=dtype, shape=shape, stype=stype, data=data)


GOOD = np.arange(6, dtype=np.float32).reshape(2, 3) * np.float32(1.5) - np.float32(2.25)


def _saved(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _peak(fn: Callable[[], object]) -> int:
    """Peak bytes traced while ``fn`` runs (it must raise WireError)."""
    tracemalloc.start()
    try:
        with pytest.raises(WireError):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_good_array_round_trips_bit_exactly_as_a_new_native_float32_array() -> None:
    a = Array(GOOD)
    back = decode_array(a, np.float32, (2, 3))
    assert back.dtype == np.dtype("float32") and back.dtype.isnative and back.shape == (2, 3)
    assert back.tobytes() == GOOD.tobytes()
    back[0, 0] = 99.0  # writable: not a view on the received bytes
    assert decode_array(a, np.float32, (2, 3))[0, 0] == np.float32(-2.25)


def test_special_float_values_survive_decoding_bit_exactly() -> None:
    # Decoding is not checking: NaN, inf and 3.4e38 decode as sent; Federation.validate judges them.
    x = np.array([np.nan, np.inf, -np.inf, 3.4e38, -0.0], np.float32)
    back = decode_array(Array(x), np.float32, (5,))
    assert back.tobytes() == x.tobytes()


def test_an_array_record_decodes_in_order_with_the_expected_shapes() -> None:
    ws = [GOOD, np.array([7.0, 8.0], np.float32)]
    back = decode_arrays(ArrayRecord(ws), np.float32, [(2, 3), (2,)])
    assert [b.tobytes() for b in back] == [w.tobytes() for w in ws]
    assert [b.shape for b in decode_arrays(ArrayRecord(ws), np.float32, None)] == [(2, 3), (2,)]


def test_the_header_is_read_without_numpy() -> None:
    h = read_npy_header(_saved(GOOD))
    assert (h.dtype, h.shape, h.offset) == (np.dtype("<f4"), (2, 3), 128)
    h = read_npy_header(_saved(np.zeros(5, np.uint8)))
    assert (h.dtype, h.shape, h.offset) == (np.dtype("|u1"), (5,), 128)


BODY = GOOD.tobytes()
HEADER = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"


@pytest.mark.parametrize(("array", "reason"), [
    (_array(_saved(GOOD), stype="torch.Tensor"), "stype 'torch.Tensor' is not allowed; expected 'numpy.ndarray'"),
    (_array(b""), "array data is 0 bytes, shorter than an .npy header"),
    (_array(_saved(GOOD)[:-1]), "array data is 151 bytes; its header declares 152"),
    (_array(_saved(GOOD)[:100]), ".npy header is cut short"),
    (_array(_saved(GOOD) + b"\x00"), "array data is 153 bytes; its header declares 152"),
    (_array(b"PK\x03\x04" + bytes(60)), "not .npy version 1.0 (bad magic or version)"),
    (_array(b"\x93NUMPY\x02\x00" + bytes(60)), "not .npy version 1.0 (bad magic or version)"),
    (_array(b"\x93NUMPY\x01\x00\xff\xff" + bytes(60)), ".npy header declares 65535 bytes; at most 1024 allowed"),
    (_array(_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", BODY)),
     ".npy data in Fortran order is not allowed"),
    (_array(_npy("{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }", BODY)),
     ".npy dtype '|O' is not allowed; allowed: <f4, |u1"),
    (_array(_npy("{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", BODY[:24])),
     ".npy dtype '<U3' is not allowed; allowed: <f4, |u1"),
    (_array(_npy("{'descr': '|V4', 'fortran_order': False, 'shape': (2, 3), }", BODY)),
     ".npy dtype '|V4' is not allowed; allowed: <f4, |u1"),
    (_array(_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", BODY)),
     ".npy dtype [('a', '<f4')] is not allowed; allowed: <f4, |u1"),
    (_array(_npy("{'descr': '<M8[s]', 'fortran_order': False, 'shape': (3,), }", BODY)),
     ".npy dtype '<M8[s]' is not allowed; allowed: <f4, |u1"),
    (_array(_npy("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", BODY)),
     ".npy dtype '<c8' is not allowed; allowed: <f4, |u1"),
    (_array(_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", BODY)),
     ".npy dtype '>f4' is not allowed; allowed: <f4, |u1"),
    (_array(_saved(GOOD.astype(np.float64))), ".npy dtype '<f8' is not allowed; allowed: <f4, |u1"),
    (_array(_saved(np.zeros(6, np.uint8)), dtype="uint8", shape=(6,)),
     "array dtype uint8 is not allowed here; expected float32"),
    (_array(_saved(GOOD.reshape(3, 2)), shape=(3, 2)), "array has shape (3, 2), expected (2, 3)"),
    (_array(_saved(GOOD.ravel()), shape=(6,)), "array has shape (6,), expected (2, 3)"),
    (_array(_saved(GOOD), dtype="float64"), "array metadata ('float64', (2, 3)) disagrees with its data"),
    (_array(_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", BODY)),
     ".npy shape must be a tuple of ints >= 0, got (2, -3)"),
    (_array(_npy("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", BODY)),
     ".npy shape must be a tuple of ints >= 0, got [2, 3]"),
    (_array(_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (True, 3), }", BODY)),
     ".npy shape must be a tuple of ints >= 0"),
    (_array(_npy("{'descr': '<f4', 'shape': (2, 3), }", BODY)),
     ".npy header must be a dict of exactly 'descr', 'fortran_order' and 'shape'"),
    (_array(_npy("__import__('os').system('true')", BODY)), ".npy header is not a Python literal (ValueError)"),
    (_array(_npy("{'descr': " + "(" * 300 + ")" * 300 + "}", BODY)), ".npy header is not a Python literal"),
])
def test_bad_arrays_are_refused_with_a_reason(array: Array, reason: str) -> None:
    with pytest.raises(WireError) as err:
        decode_array(array, np.float32, (2, 3))
    assert reason in str(err.value)


def test_data_that_is_not_bytes_is_refused() -> None:
    a = Array(GOOD)
    a.data = None  # type: ignore[assignment]  # what a broken or hostile in-process peer could leave
    with pytest.raises(WireError, match="array data must be bytes, got NoneType"):
        decode_array(a, np.float32, (2, 3))
    with pytest.raises(WireError, match="expected a Flower Array, got ndarray"):
        decode_array(GOOD, np.float32, (2, 3))


def test_a_header_declaring_ten_billion_elements_allocates_nothing_big() -> None:
    # 100 bytes that make np.load allocate 40 GB before it reads.
    huge = _array(_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000,), }".ljust(74), bytes(16)),
                  shape=(10_000_000_000,))
    assert len(huge.data) == 100
    assert _peak(lambda: decode_array(huge, np.float32, (2, 3))) < 64 * 1024
    with pytest.raises(WireError, match=r"array has shape \(10000000000,\), expected \(2, 3\)"):
        decode_array(huge, np.float32, (2, 3))
    # With no expected shape the byte length is the bound.
    assert _peak(lambda: decode_array(huge, np.float32, None)) < 64 * 1024
    with pytest.raises(WireError, match="array data is 100 bytes; its header declares 40000000084"):
        decode_array(huge, np.float32, None)


def test_an_array_record_with_the_wrong_count_or_a_bad_member_is_refused() -> None:
    with pytest.raises(WireError, match="expected 2 arrays, got 1"):
        decode_arrays(ArrayRecord([GOOD]), np.float32, [(2, 3), (2,)])
    rec = ArrayRecord([GOOD, GOOD])
    with pytest.raises(WireError, match=r"array 1: array has shape \(2, 3\), expected \(2,\)"):
        decode_arrays(rec, np.float32, [(2, 3), (2,)])
    with pytest.raises(WireError, match="expected an ArrayRecord, got list"):
        decode_arrays([GOOD], np.float32, [(2, 3)])


def test_payload_blobs_are_raw_bytes_bounded_by_the_caller() -> None:
    blob = Array(dtype="uint8", shape=(5,), stype="raw", data=b"\x01\x02\x03\x04\x05")
    assert decode_blob(blob, 5).tolist() == [1, 2, 3, 4, 5]
    with pytest.raises(WireError, match="blob is 5 bytes; at most 4 allowed for this model"):
        decode_blob(blob, 4)
    with pytest.raises(WireError, match="raw uint8 bytes"):
        decode_blob(Array(dtype="uint8", shape=(4,), stype="raw", data=b"\x01\x02\x03\x04\x05"), None)
    with pytest.raises(WireError, match="raw uint8 bytes"):
        decode_blob(Array(np.zeros(5, np.uint8)), None)


# --- a whole reply, against the server's Layout ---------------------------------------------
def _layout() -> Layout:
    return Layout(((2, 3), (2,)), obs_dim=2)


def _plain(**metrics: float) -> RecordDict:
    return codec.encode_reply(Reply(0, [GOOD, np.array([7.0, 8.0], np.float32)], 64, None,
                                    {"train_return": 1.5, **metrics}))


def test_a_reply_decodes_against_the_layout() -> None:
    r = codec.decode_reply(_plain(), _layout())
    assert [w.tobytes() for w in r.weights] == [GOOD.tobytes(), np.array([7.0, 8.0], np.float32).tobytes()]
    assert (r.node, r.env_steps, r.metrics) == (0, 64, {"train_return": 1.5})
    assert _layout().n == 8 and _layout().max_payload_bytes == 8 * 8 + 4096


def test_a_reply_with_the_wrong_arrays_moments_or_metrics_is_refused() -> None:
    with pytest.raises(WireError, match=r"array 1: array has shape \(2,\), expected \(3,\)"):
        codec.decode_reply(_plain(), Layout(((2, 3), (3,)), obs_dim=2))
    rec = _plain()
    rec.config_records["reply"]["mom"] = [1.0, 0.0, 0.0]
    with pytest.raises(WireError, match=r"field 'mom' has 3 floats; observations of dimension 2 need 5"):
        codec.decode_reply(rec, _layout())
    rec = _plain()
    nan = float("nan")
    for bad, shown in (([1.5, float("inf"), nan, nan, nan], "inf"), ([1, 2, 3, 4, 5], "[1, 2, 3, 4, 5]"),
                       ([1.5, 3.0], "1.5, 3.0"), (1.5, "1.5")):
        rec.config_records["reply"]["m"] = bad
        with pytest.raises(WireError, match=rf"field 'm' must be 5 floats \(train_return, .*optimizer_steps\), "
                                            rf"each finite or NaN \(not reported\), got .*{re.escape(shown)}"):
            codec.decode_reply(rec, _layout())
    rec.config_records["reply"]["m"] = [1.5, 3.0, nan, nan, nan]
    rec.config_records["reply"]["m.made_up"] = 2.0  # not the metrics field: ignored
    assert codec.decode_reply(rec, _layout()).metrics == {"train_return": 1.5, "train_seconds": 3.0}
    del rec.config_records["reply"]["m"]
    assert codec.decode_reply(rec, _layout()).metrics == {}


def test_reported_metrics_travel_as_one_list_and_the_rest_stay_on_the_node() -> None:
    c = Compressed("fp16", {"values": np.ones(8, np.float16)}, 8)
    metrics = {"train_return": 12.5, "optimizer_steps": 40.0, "clip_below": float("nan"), "private_thing": 1.0}
    rec = codec.encode_reply(Reply(0, [], 64, None, metrics, c))
    assert [k for k in rec.config_records["reply"] if k.startswith("m")] == ["m"]
    assert codec.decode_reply(rec, _layout()).metrics == {"train_return": 12.5, "optimizer_steps": 40.0}
    assert "m" not in codec.encode_reply(Reply(0, [], 64, None, {"private_thing": 1.0}, c)).config_records["reply"]


def test_a_payload_blob_larger_than_the_model_allows_is_refused_before_decoding() -> None:
    c = Compressed("fp16", {"values": np.ones(8, np.float16)}, 8)
    rec = codec.encode_reply(Reply(0, [], 64, None, {}, c))
    assert codec.decode_reply(rec, _layout()).update is not None
    big = Compressed("fp16", {"values": np.ones(2100, np.float16)}, 8)
    with pytest.raises(WireError, match="blob is 4200 bytes; at most 4160 allowed for this model"):
        codec.decode_reply(codec.encode_reply(Reply(0, [], 64, None, {}, big)), _layout())
    lying = Compressed("fp16", {"values": np.ones(9, np.float16)}, 9)
    with pytest.raises(WireError, match="payload decodes to 9 values; the model has 8"):
        codec.decode_reply(codec.encode_reply(Reply(0, [], 64, None, {}, lying)), _layout())
