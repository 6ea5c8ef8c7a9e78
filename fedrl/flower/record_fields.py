"""Typed fields of Flower records, read by checked rules: what ``codec`` and ``secure_codec`` build
their messages from.

The message keys are the callers' (``codec``, ``secure_codec``); this module knows types and
layouts, not names: an int that is not a bool, a list of ints or of bytes, observation moments
as a list of doubles, a compressed payload as a table of fields under one prefix plus one uint8
blob. Every refusal is a :class:`~fedrl.flower.safe_arrays.WireError` naming the field.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedrl.compression.base import Compressed
from fedrl.compression.framing import Frame, frame, unframe
from fedrl.flower.safe_arrays import RAW_STYPE, WireError
from fedrl.model.moments import Moments


def array_record(rec: RecordDict, key: str) -> ArrayRecord | None:
    """The ``ArrayRecord`` named ``key``, or None (absent, or a record of another type).

    Looked up directly: Flower's ``RecordDict.array_records`` rebuilds a view of every record on
    each access, which costs seconds per round for a SuperNode's ``context.state`` holding
    hundreds of logical nodes' records.
    """
    r = rec.get(key)
    return r if isinstance(r, ArrayRecord) else None


def config_record(rec: RecordDict, key: str) -> ConfigRecord:
    """The ``ConfigRecord`` named ``key``."""
    r = rec.get(key)
    if not isinstance(r, ConfigRecord):
        raise WireError(f"missing config record '{key}'")
    return r


def trusted_arrays(rec: RecordDict, key: str) -> list[np.ndarray]:
    """The arrays of the ``ArrayRecord`` named ``key``, decoded by Flower as they are.

    Only for the server -> node direction (plans, gossip models): the server is trusted with the
    weights. What a node sends goes through ``fedrl.flower.safe_arrays``.
    """
    ar = array_record(rec, key)
    if ar is None:
        raise WireError(f"missing array record '{key}'")
    return ar.to_numpy_ndarrays()


def int_field(cr: ConfigRecord, key: str) -> int:
    """Field ``key``: an int (a bool is refused)."""
    v = cr.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise WireError(f"field '{key}' must be an int, got {type(v).__name__}")
    return v


def bytes_field(cr: ConfigRecord, key: str) -> bytes:
    """Field ``key``: bytes."""
    v = cr.get(key)
    if not isinstance(v, bytes):
        raise WireError(f"field '{key}' must be bytes")
    return v


def int_list(cr: ConfigRecord, key: str) -> list[int]:
    """Field ``key``: a list of ints (bools refused); absent is ``[]``."""
    v = cr.get(key, [])
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        raise WireError(f"field '{key}' must be a list of ints")
    return cast(list[int], v)


def bytes_list(cr: ConfigRecord, key: str) -> list[bytes]:
    """Field ``key``: a list of bytes; absent is ``[]``."""
    v = cr.get(key, [])
    if not isinstance(v, list) or not all(isinstance(i, bytes) for i in v):
        raise WireError(f"field '{key}' must be a list of bytes")
    return cast(list[bytes], v)


# --- observation statistics ---------------------------------------------------------------
def put_moments(cr: ConfigRecord, key: str, m: Moments | None) -> None:
    """Write ``m`` (if any) as field ``key``.

    A list of doubles in the ConfigRecord, not an ArrayRecord of its own: the record and array
    framing cost ~600 bytes, a third of a 1% top-k update of a 9k-parameter policy.
    """
    if m is not None:
        cr[key] = [float(x) for x in m.to_array()]


def get_moments(cr: ConfigRecord, key: str, obs_dim: int | None = None) -> Moments | None:
    """Field ``key`` as moments (``None`` when absent); with ``obs_dim``, exactly ``2 * obs_dim + 1`` floats."""
    if key not in cr:
        return None
    v = cr[key]
    if not isinstance(v, list) or not all(isinstance(x, float) for x in v):
        raise WireError(f"field '{key}' must be a list of floats")
    if obs_dim is not None and len(v) != 2 * obs_dim + 1:
        raise WireError(f"field '{key}' has {len(v)} floats; observations of dimension {obs_dim} "
                        f"need {2 * obs_dim + 1} (count, means, second moments)")
    try:
        return Moments.from_array(np.asarray(v, np.float64))
    except ValueError as err:
        raise WireError(f"field '{key}': {err}") from err


# --- compressed payloads: one uint8 blob + its table (fedrl.compression.framing) -------------
def put_payload(cr: ConfigRecord, prefix: str, c: Compressed) -> Array:
    """Write ``c``'s table as fields ``prefix.name``, ``.n``, ``.keys``, ``.dtypes``, ``.lens``; return its blob.

    The blob is a ``RAW_STYPE`` Array: the bytes themselves, without an ``.npy`` header (~130
    bytes saved).
    """
    f = frame(c)
    cr[f"{prefix}.name"], cr[f"{prefix}.n"] = f.name, f.n
    cr[f"{prefix}.keys"], cr[f"{prefix}.dtypes"], cr[f"{prefix}.lens"] = f.keys, f.dtypes, f.lengths
    return Array(dtype="uint8", shape=(int(f.blob.size),), stype=RAW_STYPE, data=f.blob.tobytes())


def has_payload(cr: ConfigRecord, prefix: str) -> bool:
    """Whether ``cr`` carries a payload table under ``prefix``."""
    return f"{prefix}.name" in cr


def get_payload(cr: ConfigRecord, prefix: str, blob: np.ndarray, n: int | None = None) -> Compressed:
    """The payload whose table is under ``prefix`` and whose bytes are ``blob``; with ``n``, of ``n`` values."""
    name = cr.get(f"{prefix}.name")
    keys, dtypes, lengths = (cr.get(f"{prefix}.{k}", []) for k in ("keys", "dtypes", "lens"))
    if not isinstance(name, str) or not all(isinstance(x, list) for x in (keys, dtypes, lengths)):
        raise WireError(f"malformed '{prefix}' payload table")
    if not (all(isinstance(k, str) for k in cast(list, keys)) and all(isinstance(d, str) for d in cast(list, dtypes))
            and all(isinstance(n, int) for n in cast(list, lengths))):
        raise WireError(f"malformed '{prefix}' payload table")
    try:
        return unframe(Frame(name, int_field(cr, f"{prefix}.n"), cast(list, keys), cast(list, dtypes),
                             cast(list, lengths), np.asarray(blob)), n)
    except ValueError as err:
        raise WireError(f"'{prefix}' payload: {err}") from err
