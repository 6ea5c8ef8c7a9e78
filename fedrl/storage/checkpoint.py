"""Atomic, pickle-free server checkpoints.

One ``.npz`` holds every array (``allow_pickle=False`` on load) plus a JSON document for the
scalars, stored as a unicode array. Writing goes through ``fedrl.storage.atomic`` (a random temporary
name in the same folder, mode 0600 from creation, fsync, ``os.replace``): a run killed
mid-write leaves the previous checkpoint intact, and a symlink planted beside it is not followed.

Reading checks every member's ``.npy`` header (no object dtype, the declared size within the
member's stored size) before numpy allocates, and any defect of the file (truncated, bit-flipped,
not a zip, a missing member, malformed JSON) is one ``RunFileError`` naming the file.
Whether the contents fit a run's config is ``fedrl.server.snapshot``'s check.
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.lib.format as npy

from fedrl.errors import RunFileError
from fedrl.storage.atomic import PRIVATE, write_with

FILE = "checkpoint.npz"
# Every way zipfile and numpy fail on a torn or bit-flipped file (a flipped compression method is
# NotImplementedError, a flipped encryption flag RuntimeError, a short header struct.error, ...).
UNREADABLE = (OSError, ValueError, LookupError, EOFError, TypeError, AttributeError, MemoryError, OverflowError,
               RuntimeError, struct.error, zipfile.BadZipFile, zlib.error)


@dataclass(frozen=True)
class Checkpoint:
    """``meta`` is JSON-serializable (round, counters, ...); ``arrays`` are named arrays."""

    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]


def save(folder: Path, ckpt: Checkpoint) -> Path:
    """Write ``folder/checkpoint.npz`` atomically, mode 0600; refuse object arrays before touching disk."""
    for k, v in ckpt.arrays.items():
        if np.asarray(v).dtype.hasobject:  # np.savez would pickle it; refuse before touching disk
            raise TypeError(f"checkpoint array '{k}' holds Python objects; only numeric arrays are saved")
    payload = {f"a/{k}": v for k, v in ckpt.arrays.items()}
    payload["meta"] = np.array(json.dumps(ckpt.meta))  # before the write: a TypeError leaves the old file
    folder.mkdir(parents=True, exist_ok=True)
    return write_with(folder / FILE, lambda fh: np.savez(fh, **payload), PRIVATE)  # type: ignore[arg-type]


def _check_members(zf: zipfile.ZipFile) -> None:
    """Each member's declared dtype and size, before numpy allocates anything for it."""
    for info in zf.infolist():
        with zf.open(info) as fh:
            major, _ = npy.read_magic(fh)
            read = npy.read_array_header_1_0 if major == 1 else npy.read_array_header_2_0
            shape, _, dtype = read(fh)
            if dtype.hasobject:
                raise ValueError(f"member {info.filename!r} is an object array, which needs pickle "
                                 "(checkpoints load with allow_pickle=False)")
            if math.prod(shape) * dtype.itemsize > info.file_size:
                raise ValueError(f"member {info.filename!r} declares shape {shape} of {dtype}, "
                                 f"more than its {info.file_size} stored bytes")


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``, each header checked before numpy allocates.

    Raises one of ``UNREADABLE`` when the file is not a sound, pickle-free ``.npz``."""
    with zipfile.ZipFile(path) as zf:
        _check_members(zf)
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k].copy() for k in data.files}


def load(folder: Path) -> Checkpoint | None:
    """The checkpoint in ``folder``, or None when there is none.

    Raises:
        RunFileError: the file cannot be read as a checkpoint (field ``file``) or its metadata is
            not a JSON object (field ``meta``).
    """
    path = folder / FILE
    if not path.exists():
        return None
    try:
        members = read_npz(path)
        meta_arr = members["meta"]
    except UNREADABLE as err:
        raise RunFileError(path, "file", f"not a readable checkpoint ({type(err).__name__}: {err}); "
                                         "restore it from a backup or start a new run") from None
    try:
        meta = json.loads(str(meta_arr)) if meta_arr.dtype.kind == "U" and meta_arr.ndim == 0 else None
    except ValueError as err:
        raise RunFileError(path, "meta", f"not the checkpoint's JSON metadata ({err})") from None
    if not isinstance(meta, dict):
        raise RunFileError(path, "meta", "not one JSON object (the checkpoint's metadata)")
    return Checkpoint(meta, {k[2:]: a for k, a in members.items() if k.startswith("a/")})
