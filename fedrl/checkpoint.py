"""Atomic, pickle-free server checkpoints.

One ``.npz`` holds every array (``allow_pickle=False`` on load) plus a JSON document for the
scalars, stored as a unicode array. Writing goes to a temporary file in the same folder,
fsync, then ``os.replace``: a run killed mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FILE = "checkpoint.npz"


@dataclass(frozen=True)
class Checkpoint:
    """``meta`` is JSON-serializable (round, counters, ...); ``arrays`` are named arrays."""

    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]


def save(folder: Path, ckpt: Checkpoint) -> Path:
    for k, v in ckpt.arrays.items():
        if np.asarray(v).dtype.hasobject:  # np.savez would pickle it; refuse before touching disk
            raise TypeError(f"checkpoint array '{k}' holds Python objects; only numeric arrays are saved")
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / FILE
    tmp = folder / (FILE + ".tmp")
    payload = {f"a/{k}": v for k, v in ckpt.arrays.items()}
    payload["meta"] = np.array(json.dumps(ckpt.meta))
    with open(tmp, "wb") as fh:
        np.savez(fh, **payload)  # type: ignore[arg-type]
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    return final


def load(folder: Path) -> Checkpoint | None:
    path = folder / FILE
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        arrays = {k[2:]: data[k].copy() for k in data.files if k.startswith("a/")}
    return Checkpoint(meta, arrays)
