"""Secure-aggregation stage messages survive Flower records unchanged; malformed ones are refused."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedrl.flower import secure_codec as sc
from fedrl.flower.codec import WireError
from fedrl.flower.hostile import npy_bomb
from fedrl.secagg import Keys, Masked

SID = bytes(range(16))


def test_setup_round_trips_through_the_plan_record() -> None:
    cr = ConfigRecord({"node": 1})
    assert sc.get_setup(cr) is None
    s = sc.Setup(SID, [0, 2, 5], 2, 0.6, 11, 9156, 77)
    sc.put_setup(cr, s)
    assert sc.get_setup(cr) == s


def test_keys_round_trip_in_the_plan_and_the_keys_reply() -> None:
    k = Keys(3, 7, SID, b"c" * 32, b"s" * 32)
    assert sc.decode_keys(sc.encode_keys(k)) == k
    assert sc.head(sc.encode_keys_request(3, 7, SID)) == (3, 7, SID)
    cr = ConfigRecord({"node": 3})
    neighbours = {1: (b"a" * 32, b"b" * 32), 4: (b"c" * 32, b"d" * 32)}
    sc.put_keys(cr, (k.c_pk, k.s_pk), neighbours)
    assert sc.get_keys(cr) == ((k.c_pk, k.s_pk), neighbours)
    cr["sa.own-pks"] = [b"c" * 32]
    with pytest.raises(WireError, match="public keys"):
        sc.get_keys(cr)


def test_ciphertext_and_unmask_messages_round_trip() -> None:
    cts = {1: b"x" * 80, 4: b"y" * 80}
    rec = sc.encode_ciphertexts(0, 7, SID, cts, {"train_return": 12.5, "train_seconds": float("nan")})
    assert sc.head(rec) == (0, 7, SID) and sc.decode_ciphertexts(rec) == cts
    assert sc.decode_trained(rec) == (cts, {"train_return": 12.5})
    assert sc.decode_trained(sc.encode_ciphertexts(0, 7, SID, cts)) == (cts, {})
    assert sc.decode_unmask_request(sc.encode_unmask_request(0, 7, SID, [0, 1], [4])) == ([0, 1], [4])
    shares = {0: b"s" * 32, 1: b"t" * 32}
    assert sc.decode_shares(sc.encode_shares(0, 7, SID, shares)) == (shares, None)
    nxt = (b"n" * 32, b"m" * 32)
    assert sc.decode_shares(sc.encode_shares(0, 7, SID, shares, nxt)) == (shares, nxt)


@pytest.mark.parametrize("bits", [10, 15, 24])
def test_masked_vector_travels_at_its_bit_width(bits: int) -> None:
    y = np.random.default_rng(bits).integers(0, 1 << bits, 1000, dtype=np.uint64)
    rec = sc.encode_masked(Masked(2, 7, SID, y, (4,)), bits)
    back = sc.decode_masked(rec, bits, 1000)
    np.testing.assert_array_equal(back.y, y)
    assert back.rejected == (4,) and (back.node, back.round, back.session) == (2, 7, SID)
    assert rec.array_records["masked"]["y"].numpy().nbytes == (1000 * min(bits, 16) + 7) // 8 + (
        (1000 * (bits - 16) + 7) // 8 if bits > 16 else 0)
    with pytest.raises(WireError, match="bytes"):
        sc.decode_masked(rec, bits, 999)


def test_malformed_stage_messages_are_refused() -> None:
    with pytest.raises(WireError, match="secagg"):
        sc.head(RecordDict())
    bad = RecordDict({"secagg": ConfigRecord({"node": 1, "round": 2, "session": SID, "peers": [1, 2],
                                              "cts": [b"x"]})})
    with pytest.raises(WireError, match="ciphertexts"):
        sc.decode_ciphertexts(bad)
    bad = RecordDict({"secagg": ConfigRecord({"node": 1, "round": 2, "session": "not bytes"})})
    with pytest.raises(WireError, match="session"):
        sc.head(bad)


def test_a_hostile_masked_vector_is_refused_before_anything_is_allocated() -> None:
    y = np.arange(100, dtype=np.uint64)
    good = sc.encode_masked(Masked(2, 7, SID, y, ()), 10)  # 100 elements of 10 bits: 125 bytes
    cases = {
        "stype": Array(dtype="uint8", shape=(125,), stype="raw", data=bytes(125)),
        "dtype": Array(np.zeros(125, np.float32)),
        "size": Array(np.zeros(1000, np.uint8)),
        "huge": Array(dtype="uint8", shape=(10**10,), stype="numpy.ndarray",
                      data=npy_bomb("|u1", (10**10,))),
    }
    reasons = {"stype": "array stype 'raw' is not allowed", "dtype": "array dtype float32 is not allowed here; expected uint8",
               "size": r"array has shape \(1000,\), expected \(125,\)",
               "huge": r"array has shape \(10000000000,\), expected \(125,\)"}
    for what, arr in cases.items():
        rec = sc.encode_masked(Masked(2, 7, SID, y, ()), 10)
        rec.array_records["masked"] = ArrayRecord({"y": arr})
        with pytest.raises(WireError, match=rf"masked vector: {reasons[what]}.*100 elements of 10 bits need 125 bytes"):
            sc.decode_masked(rec, 10, 100)
    np.testing.assert_array_equal(sc.decode_masked(good, 10, 100).y, y)
    good.array_records["masked"] = ArrayRecord({"y": Array(np.zeros(125, np.uint8)), "z": Array(np.zeros(1, np.uint8))})
    with pytest.raises(WireError, match="one array named 'y'"):
        sc.decode_masked(good, 10, 100)


def test_clear_metrics_of_a_secure_reply_must_be_finite_floats() -> None:
    rec = sc.encode_ciphertexts(0, 7, SID, {1: b"x"})
    rec.config_records["secagg"]["metric.train_return"] = float("inf")
    with pytest.raises(WireError, match="field 'metric.train_return' must be a finite float"):
        sc.decode_trained(rec)
