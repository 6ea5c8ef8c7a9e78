"""Durable node state: a logical node's cross-round state also on the node's disk.

Flower keeps ``context.state`` in the SuperNode's memory: a restarted SuperNode has lost it.
With ``--node-config "state-dir=DIR"`` a node also writes its state (optimizer moments,
error-feedback residuals, accountant history, normalizer statistics, its gossip model) to
``DIR/fedrl-node{i}.npz`` after every round, atomically (a temporary file, fsync, rename), and a
node whose in-memory state is empty reads it back.

The file is bound to the run: it stores a fingerprint of the run's identity (the uid the server
makes when a run starts and keeps in its checkpoint, so a resumed run is the same run) and of the
run config (less the keys that only say where the run folder is), and is only used by the same
run with the same config. A file that cannot be read, or that belongs to
another run or config, is reported and ignored (the node starts fresh and the next save
replaces it): never a crash, never another run's state. Arrays only; loaded with
``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedrl.config import LOCATION_KEYS

_ID, _ROUND = "__fedrl.identity", "__fedrl.round"


def fingerprint(run: str | int, run_config: Mapping[str, object]) -> str:
    """What binds a state file to one run and config."""
    config = {k: v for k, v in run_config.items() if k not in LOCATION_KEYS}
    text = json.dumps({"run": str(run), "config": config}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def state_path(state_dir: str | Path, node: int) -> Path:
    return Path(state_dir).expanduser() / f"fedrl-node{node}.npz"


def previous_path(path: Path) -> Path:
    """The copy a save keeps of the state before it (``fedrl-node{i}.prev.npz``)."""
    return path.with_name(path.stem + ".prev.npz")


def save(path: Path, ident: str, rnd: int, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` atomically: readers see the old file or the new one, never half of one.

    The state it replaces is kept as ``previous_path(path)``: a server that resumes from a
    checkpoint one round back asks again for a round the node already saved after."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    payload: dict[str, Any] = {_ID: np.frombuffer(ident.encode(), np.uint8), _ROUND: np.asarray([rnd], np.int64),
                               **arrays}
    with open(tmp, "wb") as fh:
        np.savez(fh, **payload)
        fh.flush()
        os.fsync(fh.fileno())
    if path.exists():
        os.replace(path, previous_path(path))  # a crash here leaves the previous copy: load() takes it
    os.replace(tmp, path)


def _read(path: Path, ident: str) -> tuple[dict[str, np.ndarray] | None, int, str | None]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        return None, 0, f"state file {path} is unreadable ({type(err).__name__}: {err}); starting fresh"
    got = arrays.pop(_ID, np.zeros(0, np.uint8)).tobytes().decode(errors="replace")
    rnd = arrays.pop(_ROUND, np.zeros(1, np.int64))
    if got != ident:
        return None, 0, f"state file {path} belongs to another run or config; starting fresh"
    return arrays, int(rnd[0]) if rnd.size else 0, None


def load(path: Path, ident: str, before: int | None = None) -> tuple[dict[str, np.ndarray] | None, int, str | None]:
    """(state arrays, the round they were saved after, why the file was not used).

    ``(None, 0, None)`` when there is no file; ``(None, 0, reason)`` when it is unreadable or
    belongs to another run or config. With ``before`` (the round about to be trained), a state
    saved after that round or later is not used: the previous copy is, if it is older, else none
    (with a reason)."""
    prev = previous_path(path)
    cur = path if path.exists() else prev
    if not cur.exists():
        return None, 0, None
    arrays, rnd, why = _read(cur, ident)
    if arrays is None or before is None or rnd < before:
        return arrays, rnd, why
    if cur != prev and prev.exists():
        older, r, _ = _read(prev, ident)
        if older is not None and r < before:
            return older, r, None
    return None, 0, (f"state file {path} was saved after round {rnd}, not before round {before} (the server "
                     "resumed from an earlier checkpoint), and no earlier copy is usable; starting fresh")
