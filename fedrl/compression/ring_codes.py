"""Weighted updates as integers for secure aggregation, and the mean back from their sum.

Masking works on integers in Z_(2^ring_bits), and the server only ever sees the sum, so
everything the aggregate needs is folded in on the node before masking (DESIGN.md, "summable"):

- the node's weight: ``ratio = min(env_steps / weight_bound, 1)`` multiplies its update, and
  ``ratio`` itself is sent as one more code, so the server learns only ``sum(ratio)``;
- clipping: each coordinate of ``ratio * delta`` is clipped to ``[-clip, clip]``;
- quantization: the ``quantize`` compressor with that *shared* scale (``Quantize(bits,
  scale=clip)``, stochastic rounding, unbiased inside the range) gives codes in ``[0, L]``,
  ``L = 2**bits - 1``, and the ratio is coded as ``floor(ratio * L + U)``, also unbiased.

The sum over ``m`` nodes of codes ``q_i`` decodes linearly: ``sum_i x_i = -m * clip + step *
sum_i q_i`` with ``step = 2 * clip / L``. The ring must hold ``m * L`` without wrapping:
``ring_bits >= bits_for(m * L)`` (``required_ring_bits``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fedrl.compression.packing import pack_bits, unpack_bits
from fedrl.compression.quantizers import Quantize
from fedrl.secagg.ring import required_bits

if TYPE_CHECKING:
    from fedrl.config import Config


def required_ring_bits(code_bits: int, nodes: int) -> int:
    """Smallest ring width whose values hold the sum of ``nodes`` codes of ``code_bits`` bits.

    Raises:
        ValueError: if that is more than 32 bits (``fedrl.secagg.ring.required_bits``).
    """
    return required_bits((1 << code_bits) - 1, nodes)


@dataclass(frozen=True)
class RingCoding:
    bits: int  # code bits per coordinate (compression.bits)
    clip: float  # shared quantization range (secagg.clip-range)
    weight_bound: float  # env steps that count as weight 1 (algo.local-steps)

    @classmethod
    def for_config(cls, cfg: Config) -> RingCoding:
        """``compression.bits`` codes over ``[-secagg.clip-range, secagg.clip-range]``, weight 1 at ``algo.local-steps``."""
        return cls(cfg.compression.bits, cfg.secagg.clip_range, float(cfg.algo.local_steps))

    @property
    def levels(self) -> int:
        return (1 << self.bits) - 1

    @property
    def step(self) -> float:
        """One quantization step: codes ``0..L`` span ``[-clip, clip]``."""
        return 2.0 * self.clip / self.levels

    def encode(self, delta: np.ndarray, env_steps: int, rng: np.random.Generator) -> np.ndarray:
        """Codes of ``[ratio * delta, ratio]`` as uint64, length ``delta.size + 1``, each in ``[0, L]``."""
        ratio = min(max(env_steps, 0) / self.weight_bound, 1.0)
        v = np.clip(np.asarray(delta, np.float64) * ratio, -self.clip, self.clip).astype(np.float32)
        c = Quantize(self.bits, scale=self.clip).encode(v, rng)
        codes = unpack_bits(c.arrays["codes"], self.bits, v.size).astype(np.uint64)
        w = min(int(np.floor(ratio * self.levels + rng.random())), self.levels)
        return np.concatenate([codes, np.asarray([w], np.uint64)])

    def decode_total(self, total: np.ndarray, m: int) -> tuple[np.ndarray, float]:
        """From the ring sum of ``m`` nodes' codes: (sum of weighted updates, float64; sum of weight ratios)."""
        codes = np.asarray(total[:-1], np.float64)
        return -m * self.clip + self.step * codes, float(total[-1]) / self.levels

    def decode_sum(self, total: np.ndarray, m: int) -> tuple[np.ndarray, float]:
        """From the ring sum of ``m`` nodes' codes: (weighted mean update, sum of weight ratios).

        Raises:
            ValueError: if the weights sum to zero (no usable update).
        """
        weighted_sum, ratio_sum = self.decode_total(total, m)
        if ratio_sum <= 0:
            raise ValueError("the securely summed weights are zero")
        return (weighted_sum / ratio_sum).astype(np.float32), ratio_sum


def pack_ring(values: np.ndarray, bits: int) -> np.ndarray:
    """Ring elements (uint64, each < 2**bits, 1 <= bits <= 32) as ``ceil(n * bits / 8)``-ish bytes:
    the low 16 bits and, for ``bits > 16``, the high ``bits - 16`` bits, each bit-packed."""
    v = np.asarray(values, np.uint64)
    if bits <= 16:
        return pack_bits(v, bits)
    lo = pack_bits(v & np.uint64(0xFFFF), 16)
    return np.concatenate([lo, pack_bits(v >> np.uint64(16), bits - 16)])


def ring_bytes(n: int, bits: int) -> int:
    """The size of ``pack_ring`` of ``n`` elements of ``bits`` bits."""
    return (n * min(bits, 16) + 7) // 8 + ((n * (bits - 16) + 7) // 8 if bits > 16 else 0)


def unpack_ring(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Inverse of ``pack_ring``.

    Raises:
        ValueError: if ``packed`` has the wrong size for ``n`` elements of ``bits`` bits.
    """
    p = np.asarray(packed, np.uint8)
    lo_len = (n * min(bits, 16) + 7) // 8
    if p.shape != (ring_bytes(n, bits),):
        raise ValueError(f"masked vector has {p.size} bytes; {n} elements of {bits} bits need {ring_bytes(n, bits)}")
    lo = unpack_bits(p[:lo_len], min(bits, 16), n).astype(np.uint64)
    if bits <= 16:
        return lo
    return lo | (unpack_bits(p[lo_len:], bits - 16, n).astype(np.uint64) << np.uint64(16))
