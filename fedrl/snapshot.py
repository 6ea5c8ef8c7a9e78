"""A federation's state as a checkpoint and back: what a killed run resumes from.

Arrays (models, broadcast bases, observation statistics, EF21, DP and server-optimizer state) and
JSON metadata (counters, the run uid, selection history, the config it was made with, the best
evaluation so far: ``fedrl.best``); see
``fedrl.checkpoint`` for the atomic file format.
"""

from __future__ import annotations

import time

import numpy as np

from fedrl.best import Best
from fedrl.checkpoint import Checkpoint
from fedrl.config import LOCATION_KEYS, to_flat
from fedrl.errors import ConfigError, RunFileError
from fedrl.federation import Federation
from fedrl.rl.normalize import Moments
from fedrl.snapshot_checks import check_fits


def snapshot(fed: Federation, started: float, best: Best | None = None) -> Checkpoint:
    """The federation's state after its last round (``started``: when this process's share of the run began)
    and ``best``, the evaluation ``best_model.npz`` holds (read back with ``best_of``)."""
    arrays: dict[str, np.ndarray] = {}
    for s, (w, m) in enumerate(zip(fed.models, fed.moments, strict=True)):
        arrays.update({f"model{s}/{i}": a for i, a in enumerate(w)})
        if m is not None:
            arrays[f"moments{s}"] = m.to_array()
        if fed.down.active:
            arrays.update({f"bcast{s}/{i}": a for i, a in enumerate(fed.casts[s].base)})
    if fed.ef21 is not None:
        arrays.update(fed.ef21.to_arrays())
    dp_meta: dict[str, object] = {}
    if fed.dp is not None:
        dp_meta, dp_arrays = fed.dp.to_checkpoint()
        arrays.update(dp_arrays)
    arrays.update(fed.server_opt.to_arrays())
    meta = {"round": fed.round, "env_steps": fed.env_steps, "bytes_up": fed.bytes_up,
            "bytes_down": fed.bytes_down, "wall_time_s": fed.wall_time_s + (time.time() - started),
            "config": to_flat(fed.cfg), "holds": {str(k): v for k, v in fed.holds.items()},
            "bcast_round": [c.round for c in fed.casts],
            "bytes_cloud": fed.bytes_cloud, "run_uid": fed.run_uid, **dp_meta,
            "best": best.to_meta() if best is not None else None}
    meta["selection"] = fed.selector.to_meta()
    if fed.gossip is not None:
        meta["gossip_trained"] = list(fed.gossip.trained)
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
            (``fedrl.snapshot_checks``, which leaves ``fed`` unchanged when it refuses).
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
    for s in range(len(fed.models)):
        fed.models[s] = [ck.arrays[f"model{s}/{i}"].astype(np.float32) for i in range(len(fed.names))]
        if fed.moments[s] is not None:
            fed.moments[s] = Moments.from_array(ck.arrays[f"moments{s}"])
        if fed.down.active:
            fed.casts[s].base = [ck.arrays[f"bcast{s}/{i}"].astype(np.float32) for i in range(len(fed.names))]
            fed.casts[s].round = int(ck.meta["bcast_round"][s])
    fed.holds = {int(k): int(v) for k, v in ck.meta.get("holds", {}).items()}
    if fed.ef21 is not None:
        fed.ef21.load_arrays(ck.arrays)
    if fed.dp is not None:
        fed.dp.load_checkpoint(ck.meta, ck.arrays)
    fed.server_opt.load_arrays(ck.arrays)
    fed.round = int(ck.meta["round"])
    fed.run_uid = str(ck.meta.get("run_uid", fed.run_uid))
    fed.env_steps = int(ck.meta["env_steps"])
    fed.bytes_up = int(ck.meta["bytes_up"])
    fed.bytes_down = int(ck.meta["bytes_down"])
    fed.bytes_cloud = int(ck.meta.get("bytes_cloud", 0))
    if fed.gossip is not None:
        fed.gossip.trained = [int(x) for x in ck.meta["gossip_trained"]]
    if "selection" in ck.meta:
        fed.selector.load_meta(ck.meta["selection"])
    fed.wall_time_s = float(ck.meta["wall_time_s"])
