"""One payload, one byte array: the compact wire framing of a ``Compressed``.

Every array a transport carries has its own header (Flower 1.42 frames each ``Array`` with an
``.npy`` header and an object id, ~300 bytes), which on a 9k-parameter policy would eat most of
what 8-bit quantization saves. So a payload travels as the concatenation of its arrays' raw
little-endian bytes (keys in sorted order) plus a small table of (key, dtype, length). The table
is plain strings and ints; nothing is pickled, and ``unframe`` accepts only the dtypes compressors
produce.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrl.compression.base import Compressed

_DTYPES = ("uint8", "uint16", "uint32", "int64", "float16", "float32", "uint64")


@dataclass(frozen=True)
class Frame:
    """``Compressed`` as one uint8 ``blob`` and its table."""

    name: str
    n: int
    keys: list[str]
    dtypes: list[str]
    lengths: list[int]
    blob: np.ndarray


def frame(c: Compressed) -> Frame:
    keys = sorted(c.arrays)
    parts, dtypes, lengths = [], [], []
    for k in keys:
        a = np.ascontiguousarray(c.arrays[k]).ravel()
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        if dt.name not in _DTYPES:
            raise ValueError(f"payload array {k!r} has dtype {a.dtype}; allowed: {', '.join(_DTYPES)}")
        parts.append(a.astype(dt.newbyteorder("<"), copy=False).view(np.uint8))
        dtypes.append(dt.name)
        lengths.append(int(a.size))
    blob = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    return Frame(c.name, c.n, keys, dtypes, lengths, blob)


MAX_ARRAYS = 8  # no compressor's payload has more than 3 arrays


def unframe(f: Frame, n: int | None = None) -> Compressed:
    """The ``Compressed`` a ``Frame`` describes; with ``n``, its decoded length must be ``n``.

    The whole table is checked against the blob before any array is copied out of it, so a
    lying table costs nothing: at most ``MAX_ARRAYS`` arrays of unique names, allow-listed
    dtypes, lengths >= 0 whose bytes add up to exactly the blob's size.

    Raises:
        ValueError: unknown dtype, inconsistent table, or a blob of the wrong size.
    """
    if not (len(f.keys) == len(f.dtypes) == len(f.lengths)):
        raise ValueError("payload table columns differ in length")
    if len(f.keys) > MAX_ARRAYS or len(set(f.keys)) != len(f.keys):
        raise ValueError(f"payload table must name at most {MAX_ARRAYS} arrays, each once; got {len(f.keys)}")
    if f.blob.dtype != np.uint8 or f.blob.ndim != 1:
        raise ValueError("payload blob must be a 1-D uint8 array")
    if not isinstance(f.n, int) or f.n < 0 or (n is not None and f.n != n):
        raise ValueError(f"payload decodes to {f.n!r} values; the model has {'any' if n is None else n}")
    total = 0
    for k, d, length in zip(f.keys, f.dtypes, f.lengths, strict=True):
        if d not in _DTYPES:
            raise ValueError(f"payload array {k!r} has dtype {d!r}; allowed: {', '.join(_DTYPES)}")
        if not isinstance(length, int) or length < 0:
            raise ValueError(f"payload array {k!r} has length {length!r}; must be an int >= 0")
        total += length * np.dtype(d).itemsize
    if total != f.blob.size:
        side = "shorter" if f.blob.size < total else "longer"
        raise ValueError(f"payload blob is {f.blob.size} bytes, {side} than its table says ({total})")
    arrays: dict[str, np.ndarray] = {}
    at = 0
    for k, d, length in zip(f.keys, f.dtypes, f.lengths, strict=True):
        size = length * np.dtype(d).itemsize
        arrays[k] = f.blob[at:at + size].view(np.dtype(d).newbyteorder("<")).astype(d)
        at += size
    return Compressed(f.name, arrays, int(f.n))
