"""A federation's state as a checkpoint and back: what a killed run resumes from.

The checkpoint is the union of the components' states: the server rule's (models, observation
statistics, server optimizer, its own metadata), the downlink broadcasts, EF21's memories, the
privacy ledger, the model average (``strategy.ema``), the selection history, the counters, plus the run uid, the config it was made
with and the best evaluation so far (``fedrl.runfolder.best``); see ``fedrl.storage.checkpoint`` for the atomic
file format.
"""

from __future__ import annotations

import time

import numpy as np

from fedrl.config import LOCATION_KEYS, to_flat
from fedrl.errors import ConfigError, RunFileError
from fedrl.runfolder.best import Best
from fedrl.server.federation import Federation
from fedrl.server.snapshot_checks import check_fits
from fedrl.storage.checkpoint import Checkpoint


def snapshot(fed: Federation, started: float, best: Best | None = None) -> Checkpoint:
    """The federation's state after its last round (``started``: when this process's share of the run began)
    and ``best``, the evaluation ``best_model.npz`` holds (read back with ``best_of``): the union of
    its components' states (rule, downlink broadcasts, EF21, privacy, selection, counters)."""
    meta, arrays = fed.rule.state_dict()
    meta, arrays = dict(meta), dict(arrays)
    if fed.down.active:
        for s, cast in enumerate(fed.casts):
            arrays.update({f"bcast{s}/{i}": a for i, a in enumerate(cast.base)})
    if fed.ef21 is not None:
        arrays.update(fed.ef21.to_arrays())
    if fed.dp is not None:
        dp_meta, dp_arrays = fed.dp.to_checkpoint()
        meta.update(dp_meta)
        arrays.update(dp_arrays)
    if fed.average is not None:
        avg_meta, avg_arrays = fed.average.to_checkpoint()
        meta.update(avg_meta)
        arrays.update(avg_arrays)
    counters = fed.counters.state_dict()
    counters["wall_time_s"] += time.time() - started
    meta |= {"round": fed.round, **counters, "config": to_flat(fed.cfg),
             "holds": {str(k): v for k, v in fed.holds.items()}, "bcast_round": [c.round for c in fed.casts],
             "run_uid": fed.run_uid, "best": best.to_meta() if best is not None else None,
             "selection": fed.selector.to_meta()}
    return Checkpoint(meta, arrays)


def best_of(ck: Checkpoint, src: object = "checkpoint") -> Best | None:
    """The best evaluation recorded in ``ck`` (None: none yet, or a checkpoint from before fedrl kept one).

    ``restore``'s ``check_fits`` has already refused a malformed one before anything was restored.

    Raises:
        RunFileError: naming ``src`` and ``best`` when it is malformed or after the checkpoint's round.
    """
    rnd = ck.meta.get("round")
    return Best.from_meta(ck.meta.get("best"), src, rnd if type(rnd) is int else 0)


def restore(fed: Federation, ck: Checkpoint, src: object = "checkpoint") -> None:
    """Load ``ck`` (read from ``src``, named in errors) into a fresh ``fed`` of the same config.

    Raises:
        ConfigError: on ``resume`` when the experiment changed.
        RunFileError: naming ``src`` and the field when the contents do not fit the config
            (``fedrl.server.snapshot_checks``, which leaves ``fed`` unchanged when it refuses).
    """
    now, then = to_flat(fed.cfg), ck.meta.get("config")
    if not isinstance(then, dict):
        raise RunFileError(src, "config", "is missing or not an object (the config the run was made with)")
    # Where the run folder lives and how it is named may change; the experiment may not.
    changed = sorted(k for k in now.keys() | then.keys() if k not in LOCATION_KEYS and now.get(k) != then.get(k))
    if changed:
        raise ConfigError("resume", f"the run folder was made with a different config ({', '.join(changed)}); "
                                    "resume with the same settings")
    check_fits(fed, ck, src)
    try:
        _load(fed, ck)
    except (LookupError, ValueError, TypeError) as err:  # a component's own state that check_fits does not know
        raise RunFileError(src, "state", f"does not fit this run ({type(err).__name__}: {err})") from None


def _load(fed: Federation, ck: Checkpoint) -> None:
    fed.rule.load_state_dict(ck.meta, ck.arrays)
    if fed.down.active:
        for s, cast in enumerate(fed.casts):
            cast.load([ck.arrays[f"bcast{s}/{i}"].astype(np.float32) for i in range(len(fed.names))],
                      int(ck.meta["bcast_round"][s]))
    fed.holds = {int(k): int(v) for k, v in ck.meta.get("holds", {}).items()}
    if fed.ef21 is not None:
        fed.ef21.load_arrays(ck.arrays)
    if fed.dp is not None:
        fed.dp.load_checkpoint(ck.meta, ck.arrays)
    fed.counters.load_state_dict(ck.meta)
    fed.round = int(ck.meta["round"])  # not completed(): that would fold the model into the average again
    if fed.average is not None:
        fed.average.load_checkpoint(ck.meta, ck.arrays, len(fed.names))
    fed.run_uid = str(ck.meta.get("run_uid", fed.run_uid))
    if "selection" in ck.meta:
        fed.selector.load_meta(ck.meta["selection"])
