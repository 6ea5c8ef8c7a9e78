"""Arrays from a possibly hostile node, decoded by checked rules before numpy allocates anything.

Flower's ``Array.numpy()`` hands a node's bytes to ``np.load``: an unknown ``stype`` raises
``TypeError``, empty data ``EOFError``, and a 100-byte ``.npy`` header declaring 10^10 elements
makes numpy allocate 40 GB before it notices the data is short. Here the header is parsed by
hand from a bounded prefix (a Python literal, read with ``ast.literal_eval``, never unpickled),
the dtype must be one of the few fedrl sends (``ALLOWED``), the declared shape must be the shape
the caller expects, and the byte length must be exactly header + elements x itemsize. Only then
are the bytes copied into an array, so the memory one array can cost is bounded by its
expected size (and by the bytes already received).

Every refusal is a :class:`WireError` saying what was wrong.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.common.constant import SType
from numpy.typing import DTypeLike

NPY_STYPE: str = SType.NUMPY  # what Array(ndarray) writes: .npy bytes
RAW_STYPE = "raw"  # fedrl's payload blobs: the bytes themselves, no header
ALLOWED: dict[str, np.dtype] = {"<f4": np.dtype("<f4"), "|u1": np.dtype("|u1")}  # .npy descr -> dtype
MAX_HEADER = 1024  # bytes; np.save writes 118 for any array fedrl sends (padded to 64-byte alignment)
NPY_MAGIC = b"\x93NUMPY\x01\x00"  # format version 1.0: np.save writes it for every header under 64 KiB
_PREFIX = len(NPY_MAGIC) + 2  # magic, version, uint16 header length


class WireError(ValueError):
    """A message lacks a record or field fedrl expects, or has the wrong type, size or content."""


@dataclass(frozen=True)
class NpyHeader:
    """What an ``.npy`` header declares: element type, shape, and where the elements start."""

    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int


def read_npy_header(data: object) -> NpyHeader:
    """Parse the ``.npy`` (version 1.0) header at the start of ``data``, allocating nothing big.

    Accepts only ``descr`` in ``ALLOWED``, ``fortran_order`` False and a shape of ints >= 0.

    Raises:
        WireError: not bytes, bad magic or version, a header longer than ``MAX_HEADER`` or cut
            short, not a literal dict of exactly those three keys, or a value outside the rules.
    """
    if not isinstance(data, bytes):
        raise WireError(f"array data must be bytes, got {type(data).__name__}")
    if len(data) < _PREFIX:
        raise WireError(f"array data is {len(data)} bytes, shorter than an .npy header")
    if data[:len(NPY_MAGIC)] != NPY_MAGIC:
        raise WireError("array data is not .npy version 1.0 (bad magic or version)")
    hlen = int.from_bytes(data[len(NPY_MAGIC):_PREFIX], "little")
    if hlen > MAX_HEADER:
        raise WireError(f".npy header declares {hlen} bytes; at most {MAX_HEADER} allowed")
    if len(data) < _PREFIX + hlen:
        raise WireError(".npy header is cut short")
    try:
        # A bounded literal: ast.literal_eval builds only str/int/tuple/dict/... values, never calls code.
        d = ast.literal_eval(data[_PREFIX:_PREFIX + hlen].decode("latin1"))
    except Exception as err:  # SyntaxError, ValueError, RecursionError...: any of them means "unreadable"
        raise WireError(f".npy header is not a Python literal ({type(err).__name__})") from err
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise WireError(".npy header must be a dict of exactly 'descr', 'fortran_order' and 'shape'")
    descr, fortran, shape = d["descr"], d["fortran_order"], d["shape"]
    if not isinstance(descr, str) or descr not in ALLOWED:
        raise WireError(f".npy dtype {descr!r} is not allowed; allowed: {', '.join(ALLOWED)}")
    if fortran is not False:
        raise WireError(".npy data in Fortran order is not allowed")
    if not isinstance(shape, tuple) or not all(type(x) is int and x >= 0 for x in shape):
        raise WireError(f".npy shape must be a tuple of ints >= 0, got {shape!r}")
    return NpyHeader(ALLOWED[descr], shape, _PREFIX + hlen)


def decode_array(a: object, dtype: DTypeLike, shape: tuple[int, ...] | None) -> np.ndarray:
    """The ``.npy`` array in a Flower ``Array``, as a new native-order array of ``dtype``.

    ``shape`` is the shape the receiver expects (None: any shape, still bounded by the bytes
    received). The declared shape is compared before anything is allocated.

    Raises:
        WireError: not an ``Array``, a ``stype`` other than ``NPY_STYPE``, a header refused by
            :func:`read_npy_header`, another dtype or shape, metadata that disagrees with the
            header, or a byte length other than header + elements x itemsize.
    """
    if not isinstance(a, Array):
        raise WireError(f"expected a Flower Array, got {type(a).__name__}")
    if not isinstance(a.stype, str) or a.stype != NPY_STYPE:
        raise WireError(f"array stype {a.stype!r} is not allowed; expected {NPY_STYPE!r}")
    want = np.dtype(dtype)
    h = read_npy_header(a.data)
    if h.dtype != want:
        raise WireError(f"array dtype {h.dtype} is not allowed here; expected {want}")
    if shape is not None and h.shape != tuple(shape):
        raise WireError(f"array has shape {h.shape}, expected {tuple(shape)}")
    if a.dtype != want.name or a.shape != h.shape:
        raise WireError(f"array metadata ({a.dtype!r}, {a.shape!r}) disagrees with its data ({want.name}, {h.shape})")
    count = math.prod(h.shape)
    size = h.offset + count * want.itemsize
    if len(a.data) != size:
        raise WireError(f"array data is {len(a.data)} bytes; its header declares {size}")
    flat = np.frombuffer(a.data, dtype=h.dtype, count=count, offset=h.offset)
    return flat.astype(want.newbyteorder("="), copy=True).reshape(h.shape)


def decode_arrays(ar: object, dtype: DTypeLike, shapes: Sequence[tuple[int, ...]] | None) -> list[np.ndarray]:
    """Every array of an ``ArrayRecord`` (in its order), each decoded by :func:`decode_array`.

    With ``shapes``, the record must hold exactly ``len(shapes)`` arrays, one per shape, in order.

    Raises:
        WireError: not an ``ArrayRecord``, the wrong number of arrays, or an array refused
            (the message names its index).
    """
    if not isinstance(ar, ArrayRecord):
        raise WireError(f"expected an ArrayRecord, got {type(ar).__name__}")
    if shapes is not None and len(ar) != len(shapes):
        raise WireError(f"expected {len(shapes)} arrays, got {len(ar)}")
    out = []
    for i, a in enumerate(ar.values()):
        try:
            out.append(decode_array(a, dtype, None if shapes is None else shapes[i]))
        except WireError as err:
            raise WireError(f"array {i}: {err}") from err
    return out


def decode_blob(a: object, max_bytes: int | None) -> np.ndarray:
    """A raw byte blob (``stype`` ``RAW_STYPE``, uint8, shape ``(len(data),)``) as a read-only uint8 view.

    Raises:
        WireError: another stype, dtype or shape, data that is not bytes, or more than ``max_bytes``.
    """
    if not isinstance(a, Array):
        raise WireError(f"expected a Flower Array, got {type(a).__name__}")
    if not isinstance(a.data, bytes):
        raise WireError(f"blob data must be bytes, got {type(a.data).__name__}")
    if max_bytes is not None and len(a.data) > max_bytes:
        raise WireError(f"blob is {len(a.data)} bytes; at most {max_bytes} allowed for this model")
    if a.stype != RAW_STYPE or a.dtype != "uint8" or a.shape != (len(a.data),):
        raise WireError("the payload blob must be raw uint8 bytes")
    return np.frombuffer(a.data, dtype=np.uint8)
