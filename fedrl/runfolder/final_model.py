"""A run folder's policy read back and checked: ``config.json``'s description, the arrays of
``model.npz`` (the final model) or ``best_model.npz`` (the best by evaluation, ``fedrl.runfolder.best``).

A run folder is a file a user may have copied, truncated or edited. Nothing in it is trusted:
``config.json`` must describe a policy fedrl can build (kinds, positive sizes, the weight names
that network has), the model file must be a pickle-free ``.npz`` whose ``.npy`` headers are checked
before numpy allocates (``fedrl.storage.checkpoint.read_npz``), holding every named array in float32 with
the network's shape and only finite values, and, when observation normalization was on, the
run's statistics (float64 ``[count, mean..., m2...]`` with ``count > 0`` and ``m2 >= 0``).
Anything else is one ``RunFileError`` naming the file and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fedrl.config import norm_on
from fedrl.errors import ConfigError, RunFileError
from fedrl.model.moments import Moments
from fedrl.rl.networks import LOG_STD, MAX_POLICY_PARAMS, ActorCritic, PolicySpec, check_policy_size
from fedrl.runfolder.results import BEST_MODEL, CONFIG, MODEL
from fedrl.storage.checkpoint import UNREADABLE, read_npz

RENAMED = "log_std"  # the Gaussian log-std's weight name in run folders written before LOG_STD

MOMENTS = "obs_moments"
WHICH = {"best": BEST_MODEL, "final": MODEL}  # fedrl export --which


@dataclass(frozen=True)
class FinalModel:
    """What ``fedrl export`` needs from a finished run: the network, its weights in ``state_dict``
    order, the run's observation statistics (None when normalization was off) and the env."""

    spec: PolicySpec
    weights: list[np.ndarray]
    moments: Moments | None
    env_id: str
    env_kwargs: str
    make_model: Callable[[PolicySpec], nn.Module] = ActorCritic  # the run's algorithm's network


def read_final_model(run_dir: Path, which: str = "final") -> FinalModel:
    """The ``which`` policy (``final``: ``model.npz``, ``best``: ``best_model.npz``) of the run in
    ``run_dir``, every field checked.

    Raises:
        ConfigError: ``RUN_DIR`` when ``run_dir`` is not a folder; ``--which`` for an unknown
            ``which``, or ``best`` in a finished run folder without ``best_model.npz``.
        RunFileError: naming ``config.json`` or the model file and the field that is missing,
            unreadable or does not fit (see the module docstring).
    """
    if which not in WHICH:
        raise ConfigError("--which", f"got {which!r}; one of {', '.join(WHICH)}")
    if not run_dir.is_dir():
        raise ConfigError("RUN_DIR", f"{run_dir} is not a folder (give a run folder, e.g. runs/<run-name>)")
    cfg_file, model_file = run_dir / CONFIG, run_dir / WHICH[which]
    if which == "best" and not model_file.exists() and (run_dir / MODEL).is_file():
        raise ConfigError("--which", f"best: {model_file} is missing (no evaluation of this run had finite returns, "
                                     f"or fedrl was older than issue 13); --which final exports {MODEL}")
    for f in (cfg_file, model_file):
        if not f.is_file():
            raise RunFileError(f, "file", "missing: not a finished fedrl run (the run writes it when it ends)")
    resolved = _read_json(cfg_file)
    policy, rc = _section(cfg_file, resolved, "policy"), _section(cfg_file, resolved, "run_config")
    spec = _spec(cfg_file, policy)
    make_model = _model_factory(cfg_file, rc)
    expected = _shapes(cfg_file, spec, make_model)
    names = policy.get("weight_names")
    if isinstance(names, list):  # folders written before the log-std became a layer named it "log_std"
        names = [LOG_STD if n == RENAMED else n for n in names]
    if names != list(expected):
        raise RunFileError(cfg_file, "policy.weight_names", f"must be {list(expected)} for the network the policy "
                                                            f"fields describe, got {_short(names)}")
    env_id, env_kwargs, norm = (_field(cfg_file, rc, k, str, "run_config.") for k in
                                ("env.id", "env.kwargs", "algo.norm-obs"))
    if norm not in ("auto", "on", "off", "server"):
        raise RunFileError(cfg_file, "run_config.algo.norm-obs", f"must be auto, on, off or server, got {norm!r}")
    try:
        arrays = read_npz(model_file)
    except UNREADABLE as err:
        raise RunFileError(model_file, "file", f"not a readable .npz ({type(err).__name__}: "
                                               f"{' '.join(str(err).split())})") from None
    if f"policy/{RENAMED}" in arrays and f"policy/{LOG_STD}" not in arrays:
        arrays[f"policy/{LOG_STD}"] = arrays.pop(f"policy/{RENAMED}")
    weights = [_array(model_file, arrays, f"policy/{n}", shape, np.float32) for n, shape in expected.items()]
    moments = None
    if norm_on(norm, spec.action_kind == "continuous"):
        m = _array(model_file, arrays, MOMENTS, (2 * spec.obs_dim + 1,), np.float64)
        moments = Moments.from_array(m)
        if not moments.count > 0:
            raise RunFileError(model_file, MOMENTS, f"count must be > 0 (algo.norm-obs = {norm}), got {moments.count}")
        if np.any(moments.m2 < 0):
            raise RunFileError(model_file, MOMENTS, "second moments must be >= 0")
    return FinalModel(spec, weights, moments, env_id, env_kwargs, make_model)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RunFileError(path, "file", f"not readable JSON ({type(err).__name__}: {err})") from None
    if not isinstance(obj, dict):
        raise RunFileError(path, "file", f"must be a JSON object, got {type(obj).__name__}")
    return obj


def _section(path: Path, obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    if not isinstance(value, dict):
        raise RunFileError(path, key, "missing" if value is None else f"must be an object, got {type(value).__name__}")
    return value


def _field(path: Path, obj: dict[str, Any], key: str, typ: type, prefix: str) -> Any:
    value = obj.get(key)
    if type(value) is not typ:  # not isinstance: a bool is no int here
        raise RunFileError(path, prefix + key, "missing" if value is None else
                           f"must be {typ.__name__}, got {_short(value)}")
    return value


def _spec(path: Path, p: dict[str, Any]) -> PolicySpec:
    obs_dim, action_dim = (_field(path, p, k, int, "policy.") for k in ("obs_dim", "action_dim"))
    kind = _field(path, p, "action_kind", str, "policy.")
    hidden = _field(path, p, "hidden", list, "policy.")
    for key, value in (("obs_dim", obs_dim), ("action_dim", action_dim)):
        if not 1 <= value <= MAX_POLICY_PARAMS:
            raise RunFileError(path, f"policy.{key}", f"must be in [1, {MAX_POLICY_PARAMS}], got {value}")
    if kind not in ("discrete", "continuous"):
        raise RunFileError(path, "policy.action_kind", f"must be discrete or continuous, got {kind!r}")
    if not hidden or not all(type(h) is int and h >= 1 for h in hidden):
        raise RunFileError(path, "policy.hidden", f"must be a non-empty list of ints >= 1, got {_short(hidden)}")
    low, high = (_bounds(path, p, k, action_dim if kind == "continuous" else 0) for k in ("action_low", "action_high"))
    if any(lo >= hi for lo, hi in zip(low, high, strict=True)):
        raise RunFileError(path, "policy.action_low", f"must be below policy.action_high, got {low} and {high}")
    obs_mirror, action_mirror = _mirror(path, p, obs_dim, kind, action_dim)
    return PolicySpec(obs_dim, kind, action_dim, tuple(hidden), low, high,  # type: ignore[arg-type]  # kind checked
                      obs_mirror, action_mirror)


def _mirror(path: Path, p: dict[str, Any], obs_dim: int, kind: str, action_dim: int,
            ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``policy.obs_mirror``/``action_mirror`` (``algo.mirror``): both ``[]`` (no mirror, or a folder
    written before they were recorded), or ``obs_dim`` signs and, for discrete actions, a permutation
    of the action indices that is its own inverse, for continuous ones ``action_dim`` signs."""
    obs, action = p.get("obs_mirror", []), p.get("action_mirror", [])
    if obs == [] and action == []:
        return (), ()
    if not (isinstance(obs, list) and len(obs) == obs_dim and all(type(v) is int and v in (-1, 1) for v in obs)):
        raise RunFileError(path, "policy.obs_mirror", f"must be a list of {obs_dim} signs (1 or -1), got {_short(obs)}")
    ints = isinstance(action, list) and len(action) == action_dim and all(type(v) is int for v in action)
    if kind == "discrete":
        if not (ints and sorted(action) == list(range(action_dim)) and all(action[a] == i for i, a in enumerate(action))):
            raise RunFileError(path, "policy.action_mirror", f"must be a permutation of 0..{action_dim - 1} that is its "
                                                              f"own inverse, got {_short(action)}")
    elif not (ints and all(v in (-1, 1) for v in action)):
        raise RunFileError(path, "policy.action_mirror", f"must be a list of {action_dim} signs (1 or -1), "
                                                          f"got {_short(action)}")
    return tuple(obs), tuple(action)


def _bounds(path: Path, p: dict[str, Any], key: str, n: int) -> tuple[float, ...]:
    """``policy.action_low``/``action_high``: ``n`` finite numbers, or ``()`` (discrete actions, or a
    folder written before they were recorded: the network's default bounds of -1 and 1)."""
    value = p.get(key, [])
    if value == []:
        return ()
    if not (isinstance(value, list) and len(value) == n and all(type(v) in (int, float) and math.isfinite(v)
                                                                for v in value)):
        raise RunFileError(path, f"policy.{key}", f"must be a list of {n} finite numbers, got {_short(value)}")
    return tuple(float(v) for v in value)


def _model_factory(path: Path, rc: dict[str, Any]) -> Callable[[PolicySpec], nn.Module]:
    """The network of the run's algorithm (``algo.name`` and its settings, e.g. DQN's dueling head)."""
    from fedrl.config import from_run_config
    from fedrl.registry.algorithms import get as algorithm

    try:
        cfg = from_run_config({k: v for k, v in rc.items() if k not in ("resume",)})
        return algorithm(cfg.algo.name).model_for(cfg)
    except ConfigError as err:
        raise RunFileError(path, f"run_config.{err.key}", err.reason) from None
    except KeyError as err:
        raise RunFileError(path, "run_config.algo.name", str(err.args[0])) from None


def _shapes(path: Path, spec: PolicySpec, make_model: Callable[[PolicySpec], nn.Module]) -> dict[str, tuple[int, ...]]:
    """Name -> shape of the network ``spec`` describes, without allocating it (torch's meta device)."""
    try:
        check_policy_size(spec, make_model)
    except ConfigError as err:
        raise RunFileError(path, "policy", err.reason) from None
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in make_model(spec).state_dict().items()}


def _array(path: Path, arrays: dict[str, np.ndarray], key: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    if key not in arrays:
        raise RunFileError(path, key, "missing")
    a = arrays[key]
    if a.dtype != np.dtype(dtype):
        raise RunFileError(path, key, f"dtype {a.dtype}; fedrl writes {np.dtype(dtype)}")
    if a.shape != shape:
        raise RunFileError(path, key, f"shape {a.shape}; the policy in config.json needs {shape}")
    if not np.all(np.isfinite(a)):
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        raise RunFileError(path, key, f"{bad} non-finite values (NaN or inf); such a policy is not exported")
    return a


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
