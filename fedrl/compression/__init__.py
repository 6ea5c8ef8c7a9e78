"""Update compression: pure-numpy compressors, bit packing and error feedback (Flower-free).

Payloads are :class:`Compressed` objects holding only plain numpy arrays, so they map one-to-one
onto a Flower ``ArrayRecord`` in ``fedrl.flower``.
"""

from __future__ import annotations

from fedrl.compression.compressors import (
    BF16,
    COMPRESSORS,
    FP16,
    QSGD,
    Compressed,
    Compressor,
    NoCompression,
    Quantize,
    RandK,
    SignCompressor,
    TopK,
    make_compressor,
)
from fedrl.compression.error_feedback import ErrorFeedback
from fedrl.compression.packing import pack_bits, pack_indices, unpack_bits, unpack_indices

__all__ = [
    "BF16",
    "COMPRESSORS",
    "FP16",
    "QSGD",
    "Compressed",
    "Compressor",
    "ErrorFeedback",
    "NoCompression",
    "Quantize",
    "RandK",
    "SignCompressor",
    "TopK",
    "make_compressor",
    "pack_bits",
    "pack_indices",
    "unpack_bits",
    "unpack_indices",
]
