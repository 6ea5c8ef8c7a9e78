"""Compressor contracts: payload types, error bounds, registry, wire size, summability."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrl.compression import (
    COMPRESSORS,
    Compressed,
    Compressor,
    Quantize,
    RandK,
    make_compressor,
    unpack_bits,
)

F32_EPS = float(np.finfo(np.float32).eps)


def _x(n: int = 1000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def _roundtrip(comp: Compressor, x: np.ndarray, seed: int = 1) -> tuple[Compressed, np.ndarray]:
    c = comp.encode(x, np.random.default_rng(seed))
    return c, comp.decode(c)


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_payload_is_plain_arrays_and_decode_shape(name: str, n: int) -> None:
    comp = make_compressor(name, fraction=0.1, chunk=3)
    x = _x(n)
    c, d = _roundtrip(comp, x)
    assert c.name == name and c.n == n
    assert all(isinstance(a, np.ndarray) for a in c.arrays.values())
    assert c.nbytes == sum(a.nbytes for a in c.arrays.values())
    assert d.dtype == np.float32 and d.shape == (n,)
    # deterministic given the rng seed
    c2 = comp.encode(x, np.random.default_rng(1))
    assert c2.arrays.keys() == c.arrays.keys()
    for k in c.arrays:
        np.testing.assert_array_equal(c.arrays[k], c2.arrays[k])


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_rejects_bad_updates_and_foreign_payloads(name: str) -> None:
    comp = make_compressor(name)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="1-D"):
        comp.encode(np.zeros((2, 2), np.float32), rng)
    with pytest.raises(ValueError, match="NaN"):
        comp.encode(np.array([1.0, np.nan], np.float32), rng)
    other = "sign" if name != "sign" else "none"
    with pytest.raises(ValueError, match="cannot decode"):
        comp.decode(make_compressor(other).encode(_x(8), rng))


def test_flags() -> None:
    summable = {n for n in COMPRESSORS if make_compressor(n).summable}
    unbiased = {n for n in COMPRESSORS if make_compressor(n).unbiased}
    assert summable == {"none", "randk", "quantize"}
    assert unbiased == {"none", "quantize", "qsgd", "randk"}


def test_none_is_exact() -> None:
    x = _x()
    np.testing.assert_array_equal(_roundtrip(make_compressor("none"), x)[1], x)


def test_fp16_relative_error() -> None:
    rng = np.random.default_rng(3)
    mags = np.exp(rng.uniform(np.log(2.0**-14), np.log(65504.0), 5000))
    x = (rng.choice([-1.0, 1.0], 5000) * mags).astype(np.float32)
    d = _roundtrip(make_compressor("fp16"), x)[1]
    assert np.all(np.abs(d - x) <= 2.0**-11 * np.abs(x))
    tiny = np.array([1e-6, -3e-7, 0.0], np.float32)
    assert np.all(np.abs(_roundtrip(make_compressor("fp16"), tiny)[1] - tiny) <= 2.0**-25)
    big = np.array([1e6, -1e6], np.float32)
    np.testing.assert_array_equal(_roundtrip(make_compressor("fp16"), big)[1], [65504.0, -65504.0])


def test_bf16_relative_error_and_round_to_nearest_even() -> None:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(5000) * np.exp(rng.uniform(-30, 30, 5000))).astype(np.float32)
    c, d = _roundtrip(make_compressor("bf16"), x)
    assert c.arrays["values"].dtype == np.uint16
    assert np.all(np.abs(d.astype(np.float64) - x) <= 2.0**-8 * np.abs(x.astype(np.float64)))
    ref = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()  # torch rounds to nearest even
    np.testing.assert_array_equal(d, ref)
    # exact ties: 1 + 2**-8 sits halfway between 1 and 1 + 2**-7 -> even (1); 1 + 3 * 2**-8 -> 1 + 2**-6
    ties = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8], np.float32)
    np.testing.assert_array_equal(_roundtrip(make_compressor("bf16"), ties)[1], [1.0, 1 + 2.0**-6])


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("chunk", [0, 64, 333])
def test_quantize_error_within_one_step(bits: int, chunk: int) -> None:
    x = _x(1000) * np.repeat(np.array([0.01, 1.0, 100.0, 5.0]), 250).astype(np.float32)
    c, d = _roundtrip(make_compressor("quantize", bits=bits, chunk=chunk), x)
    cl = chunk or x.size
    scale = np.repeat(np.abs(np.pad(x, (0, -x.size % cl))).reshape(-1, cl).max(axis=1), cl)[: x.size]
    np.testing.assert_array_equal(np.repeat(c.arrays["scale"], cl)[: x.size], scale)
    step = 2.0 * scale.astype(np.float64) / (2**bits - 1)
    err = np.abs(d.astype(np.float64) - x)
    assert np.all(err <= step + 4 * F32_EPS * scale)


def test_quantize_fixed_scale_and_summability_of_codes() -> None:
    """With a shared scale, integer codes of m nodes sum to the sum of decodes (affine decode)."""
    bits, scale, m = 6, 3.0, 5
    comp = Quantize(bits=bits, scale=scale)
    xs = [np.clip(_x(200, s), -scale, scale) for s in range(m)]
    cs = [comp.encode(x, np.random.default_rng(10 + i)) for i, x in enumerate(xs)]
    q_sum = sum(unpack_bits(c.arrays["codes"], bits, 200).astype(np.int64) for c in cs)
    step = 2 * scale / (2**bits - 1)
    from_sum = -m * scale + step * np.asarray(q_sum, dtype=np.float64)
    np.testing.assert_allclose(from_sum, sum(comp.decode(c).astype(np.float64) for c in cs), atol=1e-5)


@pytest.mark.parametrize("levels", [1, 4, 16, 255])
def test_qsgd_error_bound(levels: int) -> None:
    x = _x(1000)
    _c, d = _roundtrip(make_compressor("qsgd", levels=levels), x)
    norm = float(np.linalg.norm(x.astype(np.float64)))
    assert np.all(np.abs(d.astype(np.float64) - x) <= norm / levels * (1 + 1e-6))
    assert np.all(np.sign(d)[d != 0] == np.sign(x)[d != 0])


def test_topk_keeps_exactly_the_largest() -> None:
    x = _x(1000)
    _c, d = _roundtrip(make_compressor("topk", fraction=0.05), x)
    kept = d != 0
    assert kept.sum() == 50
    np.testing.assert_array_equal(d[kept], x[kept])
    assert np.abs(x[kept]).min() >= np.abs(x[~kept]).max()


def test_randk_decode_and_shared_seed_summability() -> None:
    n, frac = 1000, 0.05
    comp = make_compressor("randk", fraction=frac)
    xs = [_x(n, s) for s in range(4)]
    cs = [comp.encode(x, np.random.default_rng(1234)) for x in xs]  # round-shared seed
    k = 50
    for x, c in zip(xs, cs, strict=True):
        d = comp.decode(c)
        idx = RandK.indices(int(c.arrays["seed"][0]), n, k)
        assert idx.size == k
        off = np.ones(n, bool)
        off[idx] = False
        assert np.all(d[off] == 0)
        np.testing.assert_allclose(d[idx], (n / k) * x[idx], rtol=1e-6)
    # every node used the same seed -> summing the values arrays decodes to the sum of decodes
    assert len({int(c.arrays["seed"][0]) for c in cs}) == 1
    values = np.sum([c.arrays["values"] for c in cs], axis=0)
    summed = Compressed("randk", {"seed": cs[0].arrays["seed"], "values": values}, n)
    np.testing.assert_allclose(comp.decode(summed), sum(comp.decode(c) for c in cs), rtol=1e-5, atol=1e-5)


def test_sign_decode() -> None:
    x = _x(1000)
    _c, d = _roundtrip(make_compressor("sign"), x)
    expect = np.float32(np.abs(x.astype(np.float64)).mean()) * np.sign(x)
    np.testing.assert_allclose(d, expect, rtol=1e-7)
    assert _roundtrip(make_compressor("sign"), np.zeros(3, np.float32))[1].tolist() == [0.0, 0.0, 0.0]


def test_wire_sizes() -> None:
    n = 1000
    x = _x(n)
    overhead = 16
    assert _roundtrip(make_compressor("quantize", bits=4), x)[0].nbytes <= n * 4 // 8 + overhead
    assert _roundtrip(make_compressor("sign"), x)[0].nbytes <= n // 8 + overhead
    assert _roundtrip(make_compressor("topk", fraction=0.01), x)[0].nbytes <= 0.05 * x.nbytes
    assert _roundtrip(make_compressor("randk", fraction=0.01), x)[0].nbytes <= 10 * 4 + 8
    assert _roundtrip(make_compressor("fp16"), x)[0].nbytes == 2 * n
    assert _roundtrip(make_compressor("bf16"), x)[0].nbytes == 2 * n
    assert _roundtrip(make_compressor("qsgd", levels=15), x)[0].nbytes <= n * 5 // 8 + 2 + overhead


def test_registry_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match=r"allowed: .*quantize.*topk"):
        make_compressor("gzip")
    with pytest.raises(ValueError, match=r"bits must be an int in \[1, 16\]"):
        make_compressor("quantize", bits=0)
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\]"):
        make_compressor("topk", fraction=0.0)
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\]"):
        make_compressor("randk", fraction=1.5)
    with pytest.raises(ValueError, match=r"levels must be an int in \[1, 65535\]"):
        make_compressor("qsgd", levels=0)
    with pytest.raises(ValueError, match="chunk must be an int"):
        make_compressor("quantize", chunk=-1)


def test_quantize_rejects_payload_from_another_chunking() -> None:
    c = make_compressor("quantize", chunk=10).encode(_x(100), np.random.default_rng(0))
    with pytest.raises(ValueError, match="scales"):
        make_compressor("quantize", chunk=0).decode(c)


def test_quantize_fixed_scale_clips() -> None:
    comp = Quantize(bits=8, scale=1.0)
    d = comp.decode(comp.encode(np.array([5.0, -5.0], np.float32), np.random.default_rng(0)))
    np.testing.assert_allclose(d, [1.0, -1.0], atol=1e-6)
