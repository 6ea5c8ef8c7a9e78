"""Quantizing compressors: uniform stochastic quantization, QSGD, scaled sign."""

from __future__ import annotations

import math

import numpy as np

from fedrl.compression.base import Compressed, Compressor, _as_update, _check_int
from fedrl.compression.packing import pack_bits, unpack_bits


def _one(c: Compressed, key: str) -> np.float32:
    """The payload's scalar ``key`` (an array of shape (1,)), as float32."""
    a = np.asarray(c.arrays[key])
    if a.shape != (1,):
        raise ValueError(f"{c.name} payload's {key!r} must hold one value, got shape {a.shape}")
    return np.float32(a.astype(np.float32)[0])


class Quantize(Compressor):
    """``quantize``: uniform ``bits``-bit quantization with stochastic rounding, packed at ``bits`` bits.

    Per chunk of ``chunk`` coordinates (``chunk=0``: one chunk for the whole tensor; the last chunk
    may be short) with ``scale = max|x|`` over the chunk (float32, one per chunk; or the fixed
    ``scale`` given at construction), the grid is ``-scale + q * step`` with
    ``q in {0, ..., L}``, ``L = 2**bits - 1`` and ``step = 2 * scale / L``. Each ``x`` is rounded
    to one of its two neighbouring grid points with probabilities that make the expectation exact
    (stochastic rounding; Gupta et al., ICML 2015; the scheme of QSGD's ``L``-level quantizer).

    Error bound: ``|decode - x| < step = 2 * scale / (2**bits - 1)`` per element (one grid step;
    plus float32 rounding of the reconstruction, ``<= 2**-23 * scale``).
    Unbiased: ``E[decode] = x`` (for ``|x| <= scale``; with a fixed ``scale`` values beyond it are
    clipped first, which biases them).

    Summable: with a scale shared by all nodes (construct with ``scale=``), the integer codes of
    ``m`` nodes sum linearly: ``sum_i decode_i = -m * scale + step * sum_i q_i``. With per-node
    ``max|x|`` scales (the default) the flag describes the scheme, not a given payload: a caller
    doing secure aggregation must agree a scale first.

    Payload: ``scale`` (float32, one per chunk) and ``codes`` (uint8, ``ceil(n * bits / 8)`` bytes).
    """

    name = "quantize"
    summable = True
    unbiased = True

    def __init__(self, bits: int = 8, chunk: int = 0, scale: float | None = None) -> None:
        self.bits = _check_int("bits", bits, 1, 16)
        self.chunk = _check_int("chunk", chunk, 0)
        if scale is not None and not (math.isfinite(float(scale)) and float(scale) >= 0.0):
            raise ValueError(f"scale must be a finite float >= 0, got {scale!r}")
        self.scale = None if scale is None else float(scale)

    def __repr__(self) -> str:
        return f"Quantize(bits={self.bits}, chunk={self.chunk}, scale={self.scale})"

    def _chunk_len(self, n: int) -> int:
        return self.chunk if self.chunk > 0 else max(n, 1)

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        a = _as_update(x)
        n = int(a.size)
        cl = self._chunk_len(n)
        n_chunks = -(-n // cl) if n else (0 if self.chunk > 0 else 1)
        padded = np.zeros(n_chunks * cl, dtype=np.float64)
        padded[:n] = a
        rows = padded.reshape(n_chunks, cl)
        if self.scale is None:
            scale = np.abs(rows).max(axis=1).astype(np.float32) if n_chunks and cl else np.zeros(n_chunks, np.float32)
        else:
            scale = np.full(n_chunks, self.scale, dtype=np.float32)
        s64 = scale.astype(np.float64)[:, None]
        levels = (1 << self.bits) - 1
        step = 2.0 * s64 / levels
        clipped = np.clip(rows, -s64, s64)
        u = np.divide(clipped + s64, step, out=np.zeros_like(rows), where=step > 0)
        q = np.floor(u + rng.random(u.shape))
        q = np.clip(q, 0, levels).astype(np.uint32).ravel()[:n]
        return Compressed(self.name, {"scale": scale, "codes": pack_bits(q, self.bits)}, n)

    def decode(self, c: Compressed) -> np.ndarray:
        self._check_payload(c, ("scale", "codes"))
        n = int(c.n)
        cl = self._chunk_len(n)
        scale = np.asarray(c.arrays["scale"], dtype=np.float32).astype(np.float64)
        expected = -(-n // cl) if n else (0 if self.chunk > 0 else 1)
        if scale.shape != (expected,):
            raise ValueError(f"quantize payload has {scale.size} scales; n={n}, chunk={self.chunk} needs {expected}")
        q = unpack_bits(np.asarray(c.arrays["codes"]), self.bits, n).astype(np.float64)
        per_elem = np.repeat(scale, cl)[:n]
        levels = (1 << self.bits) - 1
        out: np.ndarray = (-per_elem + q * (2.0 * per_elem / levels)).astype(np.float32)
        return out


class QSGD(Compressor):
    """``qsgd``: QSGD (Alistarh et al., NeurIPS 2017) with ``levels = s`` quantization levels.

    ``norm = ||x||_2`` (float32); each ``|x_i| / norm * s`` is stochastically rounded to an integer
    ``l_i in {0, ..., s}`` and ``decode_i = norm * sign(x_i) * l_i / s``. Codes are packed at
    ``ceil(log2(s + 1))`` bits plus one sign bit per coordinate (fixed width, not the paper's
    Elias coding).

    Error bound: ``|decode_i - x_i| < norm / s`` per element (plus float32 rounding).
    Unbiased (Lemma 3.1 of the paper). Not summable: each node has its own norm.
    """

    name = "qsgd"
    unmaskable = "each node scales by its own norm, so the sum of codes decodes to nothing (not summable)"
    unbiased = True

    def __init__(self, levels: int = 16) -> None:
        self.levels = _check_int("levels", levels, 1, (1 << 16) - 1)
        self.code_bits = max(1, int(self.levels).bit_length())

    def __repr__(self) -> str:
        return f"QSGD(levels={self.levels})"

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        a = _as_update(x)
        a64 = a.astype(np.float64)
        norm = np.float32(np.linalg.norm(a64)) if a.size else np.float32(0.0)
        r = np.abs(a64) / float(norm) * self.levels if float(norm) > 0 else np.zeros_like(a64)
        lvl = np.clip(np.floor(r + rng.random(r.shape)), 0, self.levels).astype(np.uint32)
        neg = (a < 0).astype(np.uint32)
        arrays = {
            "norm": np.array([norm], dtype=np.float32),
            "levels": pack_bits(lvl, self.code_bits),
            "signs": pack_bits(neg, 1),
        }
        return Compressed(self.name, arrays, int(a.size))

    def decode(self, c: Compressed) -> np.ndarray:
        self._check_payload(c, ("norm", "levels", "signs"))
        n = int(c.n)
        norm = float(_one(c, "norm"))
        lvl = unpack_bits(np.asarray(c.arrays["levels"]), self.code_bits, n).astype(np.float64)
        sign = 1.0 - 2.0 * unpack_bits(np.asarray(c.arrays["signs"]), 1, n).astype(np.float64)
        out: np.ndarray = (norm * sign * lvl / self.levels).astype(np.float32)
        return out


class SignCompressor(Compressor):
    """``sign``: scaled sign, ``decode = mean|x| * sign(x)``, 1 bit per coordinate (Bernstein et al., ICML 2018).

    ``sign(0)`` is taken as ``+1`` (one bit cannot encode zero). Error bound:
    ``|decode_i - x_i| = |mean|x| - |x_i||`` when the sign is right (always, except ``x_i == 0``
    which gives ``mean|x|``), so ``<= max(|x_i|, mean|x|)``. Biased; not summable.

    Payload: ``scale`` (float32, shape (1,)) and ``signs`` (uint8, ``ceil(n / 8)`` bytes).
    """

    name = "sign"
    unmaskable = "each node scales by its own mean magnitude, so the sum of signs is not summable"

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        a = _as_update(x)
        scale = np.float32(np.abs(a.astype(np.float64)).mean()) if a.size else np.float32(0.0)
        neg = (a < 0).astype(np.uint8)
        return Compressed(self.name, {"scale": np.array([scale], np.float32), "signs": pack_bits(neg, 1)}, int(a.size))

    def decode(self, c: Compressed) -> np.ndarray:
        self._check_payload(c, ("scale", "signs"))
        scale = _one(c, "scale")
        neg = unpack_bits(np.asarray(c.arrays["signs"]), 1, int(c.n))
        out: np.ndarray = np.where(neg == 1, -scale, scale).astype(np.float32)
        return out
