"""Exact round trips for bit packing and index encodings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrl.compression.packing import pack_bits, pack_indices, unpack_bits, unpack_indices


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_pack_bits_round_trip(data: st.DataObject) -> None:
    bits = data.draw(st.integers(1, 16))
    vals = data.draw(st.lists(st.integers(0, (1 << bits) - 1), max_size=300))
    v = np.array(vals, dtype=np.uint32)
    packed = pack_bits(v, bits)
    assert packed.dtype == np.uint8
    assert packed.size == (v.size * bits + 7) // 8  # true bit width
    out = unpack_bits(packed, bits, v.size)
    assert out.dtype == np.uint32
    np.testing.assert_array_equal(out, v)


def test_pack_bits_layout_is_lsb_first() -> None:
    # values 1 (bits 1,0,0) and 6 (bits 0,1,1) at 3 bits -> stream 100 011 -> byte 0b00110001
    np.testing.assert_array_equal(pack_bits(np.array([1, 6]), 3), np.array([0b00110001], dtype=np.uint8))


@pytest.mark.parametrize(
    ("values", "bits"),
    [(np.array([4]), 2), (np.array([-1]), 4), (np.array([1.0]), 4), (np.array([1]), 0), (np.array([1]), 17)],
)
def test_pack_bits_rejects_bad_input(values: np.ndarray, bits: int) -> None:
    with pytest.raises(ValueError):
        pack_bits(values, bits)


def test_unpack_bits_rejects_wrong_length() -> None:
    with pytest.raises(ValueError, match="bytes"):
        unpack_bits(np.zeros(3, dtype=np.uint8), 4, 3)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_pack_indices_round_trip(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 200_000))
    k = data.draw(st.integers(0, min(n, 300)))
    seed = data.draw(st.integers(0, 2**32 - 1))
    idx = np.sort(np.random.default_rng(seed).choice(n, k, replace=False)).astype(np.int64)
    kind, packed = pack_indices(idx, n)
    assert kind in ("bitmap", "delta")
    assert packed.dtype == np.uint8
    assert packed.nbytes <= (n + 7) // 8 + 1  # never worse than the bitmap (+ the width byte on a tie)
    out = unpack_indices(kind, packed, n, k)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, idx)


def test_pack_indices_picks_the_smaller_form() -> None:
    n = 10_000
    dense = np.arange(0, n, 2, dtype=np.int64)
    assert pack_indices(dense, n)[0] == "bitmap"
    sparse = np.array([5, 900, 7000], dtype=np.int64)
    kind, data = pack_indices(sparse, n)
    assert kind == "delta"
    assert data.nbytes < (n + 7) // 8


def test_pack_indices_rejects_unsorted_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="sorted"):
        pack_indices(np.array([3, 1]), 10)
    with pytest.raises(ValueError, match="sorted"):
        pack_indices(np.array([1, 1]), 10)
    with pytest.raises(ValueError, match="lie in"):
        pack_indices(np.array([10]), 10)
    with pytest.raises(ValueError, match="unknown index kind"):
        unpack_indices("rle", np.zeros(1, np.uint8), 10, 0)
