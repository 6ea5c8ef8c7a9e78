"""Lossless and float-cast compressors: none, fp16, bf16."""

from __future__ import annotations

import numpy as np

from fedrl.compression.base import Compressed, Compressor, _as_update

_FP16_MAX = float(np.finfo(np.float16).max)  # 65504: larger magnitudes saturate instead of becoming inf


class NoCompression(Compressor):
    """``none``: float32 as is. Exact (error 0), unbiased, summable (payload sums are update sums)."""

    name = "none"
    summable = True
    unbiased = True

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        a = _as_update(x)
        return Compressed(self.name, {"values": a.copy()}, int(a.size))

    def decode(self, c: Compressed) -> np.ndarray:
        self._check_payload(c, ("values",))
        return np.asarray(c.arrays["values"], dtype=np.float32).copy()


class FP16(Compressor):
    """``fp16``: IEEE half precision (round-to-nearest-even), 2 bytes per coordinate.

    Error bound: for ``|x| >= 2**-14`` (fp16 normal range) and ``|x| <= 65504``,
    ``|decode - x| <= 2**-11 * |x|``; for smaller ``|x|``, ``|decode - x| <= 2**-25`` (half the
    subnormal spacing). Values beyond ±65504 saturate to ±65504 (never inf). Biased (deterministic
    rounding); not summable (fp16 sums lose precision and may overflow).
    """

    name = "fp16"
    unmaskable = "floats cannot be masked in a ring; secure aggregation needs integer codes"

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        a = _as_update(x)
        h = np.clip(a, -_FP16_MAX, _FP16_MAX).astype(np.float16)
        return Compressed(self.name, {"values": h}, int(a.size))

    def decode(self, c: Compressed) -> np.ndarray:
        self._check_payload(c, ("values",))
        return np.asarray(c.arrays["values"], dtype=np.float16).astype(np.float32)


class BF16(Compressor):
    """``bf16``: the top 16 bits of float32 (bfloat16), round-to-nearest-even, stored as ``uint16``.

    Error bound: for float32-normal ``x`` (``|x| >= 2**-126``), ``|decode - x| <= 2**-8 * |x|``
    (half a unit in the last of 8 significand bits). Values within half a bf16 ULP of float32 max
    round to inf (standard RNE overflow). Biased; not summable.
    """

    name = "bf16"
    unmaskable = "floats cannot be masked in a ring; secure aggregation needs integer codes"

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        a = _as_update(x)
        u = a.view(np.uint32).astype(np.uint64)
        # Round to nearest even on the 16 dropped bits: add 0x7FFF plus the kept LSB, then truncate.
        rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
        return Compressed(self.name, {"values": rounded.astype(np.uint16)}, int(a.size))

    def decode(self, c: Compressed) -> np.ndarray:
        self._check_payload(c, ("values",))
        hi = np.asarray(c.arrays["values"], dtype=np.uint16).astype(np.uint32) << np.uint32(16)
        return hi.view(np.float32).copy()
