"""Does a checkpoint fit the federation it is about to be restored into?

A checkpoint is a file on disk: torn, edited or from another version, it must not be restored
silently. ``check_fits`` refuses, before anything is restored, a checkpoint whose contents do not
fit the run: a round outside ``[0, num-server-rounds]``, a negative or non-integral counter, a
model or broadcast array of another shape than the model's (transposed weights included), a
non-finite value in any float array, a model average (``strategy.ema``) missing or misshapen,
observation statistics with a negative count or second moment, per-node records for nodes the
federation does not have, a best evaluation (``fedrl.runfolder.best``) that is malformed or after the
checkpoint's round. Each is one ``RunFileError`` naming the file and the field. Whether the
experiment is the same (the config) is ``fedrl.server.snapshot.restore``'s check, which runs first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedrl.errors import RunFileError
from fedrl.rules.per_node import Gossip
from fedrl.runfolder.best import Best
from fedrl.server.federation import Federation
from fedrl.storage.checkpoint import Checkpoint


def _count(src: object, meta: Mapping[str, Any], key: str, hi: float = math.inf, required: bool = True) -> None:
    """``meta[key]`` is an integer (an integral JSON number) in ``[0, hi]``."""
    if key not in meta and not required:
        return
    v = meta.get(key)
    ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and float(v).is_integer()
          and 0 <= v <= hi)
    if not ok:
        bound = f"[0, {int(hi)}]" if math.isfinite(hi) else ">= 0"
        raise RunFileError(src, key, f"is {v!r}; an integer {bound}")


def _counts(src: object, field: str, values: object, length: int, hi: float) -> None:
    """A list of ``length`` integers in ``[0, hi]``."""
    if not isinstance(values, list) or len(values) != length:
        raise RunFileError(src, field, f"is {values!r:.80}; a list of {length} integers")
    for j, v in enumerate(values):
        _count(src, {f"{field}[{j}]": v}, f"{field}[{j}]", hi)


def _array(src: object, ck: Checkpoint, name: str, shape: tuple[int, ...]) -> np.ndarray:
    a = ck.arrays.get(name)
    if a is None:
        raise RunFileError(src, name, "is missing")
    if a.dtype.kind != "f" or a.shape != shape:
        raise RunFileError(src, name, f"is {a.dtype} of shape {a.shape}; float of shape {shape} (the model's)")
    return a


def _meta(fed: Federation, ck: Checkpoint, src: object) -> None:
    cfg, meta = fed.cfg, ck.meta
    last = cfg.num_server_rounds
    _count(src, meta, "round", last)
    for key in ("env_steps", "bytes_up", "bytes_down"):
        _count(src, meta, key)
    _count(src, meta, "bytes_cloud", required=False)
    wall = meta.get("wall_time_s")
    if not (isinstance(wall, (int, float)) and not isinstance(wall, bool) and math.isfinite(wall) and wall >= 0):
        raise RunFileError(src, "wall_time_s", f"is {wall!r}; seconds >= 0")
    if not isinstance(meta.get("run_uid", ""), str):
        raise RunFileError(src, "run_uid", f"is {meta['run_uid']!r}; a string")
    holds = meta.get("holds", {})
    if not isinstance(holds, dict):
        raise RunFileError(src, "holds", f"is {holds!r:.80}; an object node -> round")
    for k, v in holds.items():
        if not (k.isdigit() and int(k) < cfg.nodes.count):
            raise RunFileError(src, "holds", f"names node {k!r}; the federation has nodes 0..{cfg.nodes.count - 1}")
        _count(src, {f"holds.{k}": v}, f"holds.{k}", last)
    if fed.down.active:
        _counts(src, "bcast_round", meta.get("bcast_round"), len(fed.models), last)
    if isinstance(fed.rule, Gossip):
        _counts(src, "gossip_trained", meta.get("gossip_trained"), len(fed.rule.relay.trained), last)
    sel = meta.get("selection")
    if sel is not None:
        if not isinstance(sel, dict):
            raise RunFileError(src, "selection", f"is {sel!r:.80}; an object with asked and missed")
        for key in ("asked", "missed"):
            _counts(src, f"selection.{key}", sel.get(key), len(fed.selector.asked), math.inf)
    clip = meta.get("clip_norm", 1.0)
    if not (isinstance(clip, (int, float)) and math.isfinite(clip) and clip > 0):
        raise RunFileError(src, "clip_norm", f"is {clip!r}; a finite number > 0")
    Best.from_meta(meta.get("best"), src, int(meta["round"]))  # raises naming best (None: none yet)


def check_fits(fed: Federation, ck: Checkpoint, src: object) -> None:
    """Raise ``RunFileError`` (naming ``src`` and the field) unless ``ck`` fits ``fed``'s config.

    ``fed`` is not modified."""
    _meta(fed, ck, src)
    last = fed.cfg.num_server_rounds
    for name, a in ck.arrays.items():  # models, optimizer moments, EF21 memories, audit scores
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            raise RunFileError(src, name, f"holds {int(np.size(a) - np.isfinite(a).sum())} non-finite values")
    for s, w in enumerate(fed.models):
        for i, ref in enumerate(w):
            _array(src, ck, f"model{s}/{i}", ref.shape)
            if fed.down.active:
                _array(src, ck, f"bcast{s}/{i}", ref.shape)
        m = fed.moments[s]
        if m is not None:
            a = _array(src, ck, f"moments{s}", m.to_array().shape)
            d = len(m.mean)
            if a[0] < 0 or (a[1 + d:] < 0).any():
                raise RunFileError(src, f"moments{s}", "has a negative count or second moment")
    if fed.average is not None and int(ck.meta["round"]) > 0:  # strategy.ema: the average of rounds 1..round
        norm = ck.meta.get("ema_weight")
        if not (isinstance(norm, (int, float)) and not isinstance(norm, bool) and math.isfinite(norm) and norm >= 1):
            raise RunFileError(src, "ema_weight", f"is {norm!r}; a number >= 1 (the average's normalizer)")
        for i, ref in enumerate(fed.models[0]):
            _array(src, ck, f"ema/{i}", ref.shape)
    opt = fed.rule.optimizer
    if "serveropt/m" in ck.arrays:
        for key in ("serveropt/m", "serveropt/v"):
            _array(src, ck, key, np.shape(opt.m))
        steps = ck.arrays.get("serveropt/steps")
        if steps is None or steps.shape != (1,) or steps.dtype.kind not in "iu" or steps[0] < 0:
            raise RunFileError(src, "serveropt/steps", f"is {steps!r}; one integer >= 0")
    versions = ck.arrays.get("ef21/versions")
    if versions is not None:
        if versions.ndim != 2 or versions.shape[1] != 2 or versions.dtype.kind not in "iu":
            raise RunFileError(src, "ef21/versions", f"is {versions.dtype} of shape {versions.shape}; (k, 2) integers")
        for node, ver in versions.tolist():
            if not (0 <= node < fed.cfg.nodes.count and 0 <= ver <= last):
                raise RunFileError(src, "ef21/versions", f"has node {node} at round {ver}; nodes "
                                                         f"0..{fed.cfg.nodes.count - 1}, rounds 0..{last}")
            _array(src, ck, f"ef21/{node}", (fed.n_params,))
