"""Durable node state: a logical node's cross-round state also on the node's disk.

Flower keeps ``context.state`` in the SuperNode's memory: a restarted SuperNode has lost it.
With ``--node-config "state-dir=DIR"`` a node also writes its state (optimizer moments,
error-feedback residuals, accountant history, normalizer statistics, its gossip model) to
``DIR/fedrl-node{i}.npz`` after every round, atomically and mode 0600 (``fedrl.storage.atomic``: a random
temporary name, fsync, rename; a symlink planted in the folder is never followed), and a node
whose in-memory state is empty reads it back.

The file is bound to the run: it stores a fingerprint of the run's identity (the uid the server
makes when a run starts and keeps in its checkpoint, so a resumed run is the same run) and of the
run config (less the keys that only say where the run folder is), and is only used by the same
run with the same config. A file that cannot be read, or that belongs to
another run or config, is reported and ignored (the node starts fresh and the next save
replaces it): never a crash, never another run's state. Every way a file can be corrupt (torn,
bit-flipped, not a zip, an object array, a header declaring more than is stored, a missing or
malformed round) counts as unreadable. Arrays only; loaded with ``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedrl.config import LOCATION_KEYS
from fedrl.storage.atomic import PRIVATE, write_with
from fedrl.storage.checkpoint import UNREADABLE, read_npz

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
    payload: dict[str, Any] = {_ID: np.frombuffer(ident.encode(), np.uint8), _ROUND: np.asarray([rnd], np.int64),
                               **arrays}
    # A crash between the two renames leaves the previous copy and no current file: load() takes it.
    write_with(path, lambda fh: np.savez(fh, **payload), PRIVATE, keep=previous_path(path))


def _read(path: Path, ident: str) -> tuple[dict[str, np.ndarray] | None, int, str | None]:
    try:
        arrays = read_npz(path)
        got = arrays.pop(_ID, np.zeros(0, np.uint8)).tobytes().decode(errors="replace")
        rnd_arr = arrays.pop(_ROUND, np.zeros(1, np.int64))
        if rnd_arr.shape != (1,) or rnd_arr.dtype.kind not in "iu" or int(rnd_arr[0]) < 0:
            raise ValueError(f"its round is {rnd_arr!r}, not one integer >= 0")
    except UNREADABLE as err:
        return None, 0, f"state file {path} is unreadable ({type(err).__name__}: {err}); starting fresh"
    if got != ident:
        return None, 0, f"state file {path} belongs to another run or config; starting fresh"
    return arrays, int(rnd_arr[0]), None


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
