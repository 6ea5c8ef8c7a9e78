"""The compressor registry: config names -> compressor objects."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fedrl.compression.base import Compressed, Compressor
from fedrl.compression.floats import BF16, FP16, NoCompression
from fedrl.compression.low_rank import PowerSGD
from fedrl.compression.quantizers import QSGD, Quantize, SignCompressor
from fedrl.compression.sparsifiers import RandK, TopK

__all__ = ["BF16", "COMPRESSORS", "FP16", "QSGD", "SHAPED", "Compressed", "Compressor", "NoCompression", "PowerSGD",
           "Quantize", "RandK", "SignCompressor", "TopK", "make_compressor"]

_Factory = Callable[[int, float, int, int], Compressor]

COMPRESSORS: dict[str, _Factory] = {
    "none": lambda bits, fraction, levels, chunk: NoCompression(),
    "fp16": lambda bits, fraction, levels, chunk: FP16(),
    "bf16": lambda bits, fraction, levels, chunk: BF16(),
    "quantize": lambda bits, fraction, levels, chunk: Quantize(bits=bits, chunk=chunk),
    "qsgd": lambda bits, fraction, levels, chunk: QSGD(levels=levels),
    "topk": lambda bits, fraction, levels, chunk: TopK(fraction=fraction),
    "randk": lambda bits, fraction, levels, chunk: RandK(fraction=fraction),
    "sign": lambda bits, fraction, levels, chunk: SignCompressor(),
}
"""Registry: name -> factory(bits, fraction, levels, chunk). Knobs a compressor does not use are ignored."""

SHAPED = ("powersgd",)
"""Compressors that need the model's tensor shapes (``make_compressor(..., shapes=)``), kept out of
``COMPRESSORS`` whose members compress any 1-D vector."""


def make_compressor(
    name: str, *, bits: int = 8, fraction: float = 0.01, levels: int = 16, chunk: int = 0, rank: int = 2,
    factor_bits: int = 0, shapes: Sequence[tuple[int, ...]] | None = None,
) -> Compressor:
    """Build a compressor by registry name; ``powersgd`` also takes ``rank``, ``factor_bits``
    (0: float32 factors) and the model's tensor ``shapes``.

    Raises:
        ValueError: naming the allowed names for an unknown ``name``, or naming the bad knob and
            its allowed range (``bits`` in [1, 16], ``fraction`` in (0, 1], ``levels`` in
            [1, 65535], ``chunk`` >= 0, ``rank`` >= 1, ``factor_bits`` in [0, 16]); ``powersgd``
            without ``shapes``.
    """
    if name == "powersgd":
        if shapes is None:
            raise ValueError("powersgd compresses each weight matrix, so it needs the model's tensor shapes")
        return PowerSGD(shapes, rank=rank, bits=factor_bits)
    if name not in COMPRESSORS:
        raise ValueError(f"unknown compressor {name!r}; allowed: {', '.join(sorted([*COMPRESSORS, *SHAPED]))}")
    return COMPRESSORS[name](bits, fraction, levels, chunk)
