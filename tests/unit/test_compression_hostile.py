"""Compressed payloads from a hostile node: every count and index is bounded by the model, checked
before anything of its claimed size is allocated, and refused with a reason."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fedrl.compression.base import Compressed
from fedrl.compression.compressors import make_compressor
from fedrl.compression.framing import Frame, frame, unframe
from fedrl.compression.packing import pack_indices, unpack_indices
from fedrl.compression.pipeline import Stage, decompress

N = 9155  # parameters of the default CartPole policy


def _topk_payload(values: int, idx: np.ndarray, n: int = N) -> Compressed:
    kind, data = pack_indices(idx, n)
    return Compressed("topk", {"values": np.ones(values, np.float32), f"idx_{kind}": data}, n)


def _delta(gaps: list[int], width: int) -> np.ndarray:
    """idx_delta bytes for raw gaps (what pack_indices would refuse to make)."""
    bits = np.concatenate([[(g >> b) & 1 for b in range(width)] for g in gaps]).astype(np.uint8)
    return np.concatenate([np.array([width], np.uint8), np.packbits(bits, bitorder="little")])


def test_topk_refuses_more_or_fewer_values_than_its_fraction_keeps() -> None:
    topk = make_compressor("topk", fraction=0.01)  # k = ceil(0.01 * 9155) = 92
    idx = np.arange(0, 92 * 7, 7)
    assert topk.decode(_topk_payload(92, idx)).sum() == np.float32(92.0)
    with pytest.raises(ValueError, match="topk payload has 93 values; its fraction keeps k=92 of n=9155"):
        topk.decode(_topk_payload(93, np.arange(93)))
    with pytest.raises(ValueError, match="topk payload has 91 values; its fraction keeps k=92 of n=9155"):
        topk.decode(_topk_payload(91, np.arange(91)))


def test_repeated_or_out_of_range_delta_indices_are_refused() -> None:
    with pytest.raises(ValueError, match=r"delta indices repeat \(a gap of 0 after the first\)"):
        unpack_indices("delta", _delta([3, 1, 0, 2], 2), 10, 4)
    assert unpack_indices("delta", _delta([0, 1, 1, 2], 2), 10, 4).tolist() == [0, 1, 2, 4]
    with pytest.raises(ValueError, match="decoded indices exceed n=10"):
        unpack_indices("delta", _delta([3, 3, 3, 3], 2), 10, 4)
    with pytest.raises(ValueError, match=r"k=11 indices cannot be unique in \[0, 10\)"):
        unpack_indices("delta", _delta([1] * 11, 1), 10, 11)
    with pytest.raises(ValueError, match=r"k=11 indices cannot be unique in \[0, 10\)"):
        unpack_indices("bitmap", np.zeros(2, np.uint8), 10, 11)


def test_a_gap_wider_than_the_model_needs_is_refused() -> None:
    # n = 10: no gap exceeds 9, so 4 bits; 63-bit gaps would make unpacking cost 63 bytes per index.
    assert unpack_indices("delta", _delta([9], 4), 10, 1).tolist() == [9]
    with pytest.raises(ValueError, match=r"bits must be an int in \[1, 4\], got 5"):
        unpack_indices("delta", _delta([9], 5), 10, 1)


def test_a_12_mb_topk_payload_for_a_9155_parameter_model_costs_no_memory() -> None:
    # Before: 3 M values and 3 M 32-bit gaps unpacked to ~1 GB. Now refused on its count.
    values = np.zeros(3_000_000, np.float32)
    gaps = np.zeros(3_000_000 * 4 + 1, np.uint8)
    gaps[0] = 32
    bad = Compressed("topk", {"values": values, "idx_delta": gaps}, N)
    st = Stage(make_compressor("topk", fraction=0.01), "on")
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="topk payload has 3000000 values"):
            decompress(bad, st, N)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_randk_refuses_a_wrong_value_count_and_a_negative_seed() -> None:
    randk = make_compressor("randk", fraction=0.5)
    ok = randk.encode(np.ones(10, np.float32), np.random.default_rng(0))
    assert randk.decode(ok).sum() == np.float32(10.0)
    with pytest.raises(ValueError, match="randk payload has 11 values; its fraction keeps k=5 of n=10"):
        randk.decode(Compressed("randk", {"seed": ok.arrays["seed"], "values": np.ones(11, np.float32)}, 10))
    with pytest.raises(ValueError, match="randk seed must be one integer >= 0"):
        randk.decode(Compressed("randk", {"seed": np.array([-1]), "values": ok.arrays["values"]}, 10))


@pytest.mark.parametrize(("name", "key"), [("qsgd", "norm"), ("sign", "scale")])
def test_scalar_fields_must_hold_one_value(name: str, key: str) -> None:
    comp = make_compressor(name)
    c = comp.encode(np.linspace(-1, 1, 16).astype(np.float32), np.random.default_rng(0))
    for bad in (np.zeros(0, np.float32), np.zeros(2, np.float32)):
        with pytest.raises(ValueError, match=rf"{name} payload's '{key}' must hold one value, got shape \({bad.size},\)"):
            comp.decode(Compressed(name, {**c.arrays, key: bad}, 16))


def test_quantize_checks_its_scales_before_unpacking_codes() -> None:
    q = make_compressor("quantize", bits=8)
    c = q.encode(np.linspace(-1, 1, 16).astype(np.float32), np.random.default_rng(0))
    with pytest.raises(ValueError, match="quantize payload has 2 scales; n=16, chunk=0 needs 1"):
        q.decode(Compressed("quantize", {**c.arrays, "scale": np.ones(2, np.float32)}, 16))


def test_unframe_checks_the_whole_table_before_copying() -> None:
    f = frame(Compressed("fp16", {"values": np.ones(4, np.float16)}, 4))
    assert unframe(f, 4).arrays["values"].tolist() == [1.0] * 4
    with pytest.raises(ValueError, match="payload decodes to 4 values; the model has 5"):
        unframe(f, 5)
    with pytest.raises(ValueError, match="payload decodes to -1 values"):
        unframe(Frame(f.name, -1, f.keys, f.dtypes, f.lengths, f.blob))
    with pytest.raises(ValueError, match="at most 8 arrays, each once; got 2"):
        unframe(Frame(f.name, 4, ["values", "values"], ["float16", "uint8"], [2, 4], f.blob))
    with pytest.raises(ValueError, match="at most 8 arrays, each once; got 9"):
        unframe(Frame(f.name, 4, [f"a{i}" for i in range(9)], ["uint8"] * 9, [1] * 8 + [0], f.blob))
    with pytest.raises(ValueError, match="payload array 'values' has length -4; must be an int >= 0"):
        unframe(Frame(f.name, 4, f.keys, f.dtypes, [-4], f.blob))
    with pytest.raises(ValueError, match=r"payload blob is 8 bytes, shorter than its table says \(2000000000000\)"):
        unframe(Frame(f.name, 4, f.keys, f.dtypes, [10**12], f.blob))
    with pytest.raises(ValueError, match="dtype '<M8'; allowed"):
        unframe(Frame(f.name, 4, f.keys, ["<M8"], f.lengths, f.blob))
