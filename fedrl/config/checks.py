"""Range checks of run-config values: each returns None when the value is allowed, else what is
allowed ("must be > 0"), which ``fedrl.config`` reports with the key's name."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import field
from typing import Any

Check = Callable[[Any], str | None]


def opt(key: str, default: Any, help: str, check: Check | None = None, *, auto: bool = False) -> Any:
    """A config field: its run-config key, default, one-line help and range check (metadata);
    ``auto``: the number may also be ``"auto"``, which ``fedrl.config.from_run_config`` resolves
    from the rest of the config before anyone reads it."""
    return field(default=default, metadata={"key": key, "help": help, "check": check, "auto": auto})


def positive(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


def non_negative(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0"


def off_or_non_negative(v: Any) -> str | None:
    return None if v == -1 or v >= 0 else "must be >= 0, or -1 (off)"


def off_or_positive(v: Any) -> str | None:
    return None if v == -1 or v > 0 else "must be > 0, or -1 (off)"


def unit_open_closed(v: Any) -> str | None:
    return None if 0 < v <= 1 else "must be in (0, 1]"


def step_or_auto(v: Any) -> str | None:
    if str(v).strip().lower() == "auto":
        return None
    try:
        x = float(v)
    except ValueError:
        return "must be 'auto' or a number in (0, 1]"
    return None if 0 < x <= 1 else "must be in (0, 1], or 'auto'"


def unit_closed(v: Any) -> str | None:
    return None if 0 <= v <= 1 else "must be in [0, 1]"


def hidden(v: Any) -> str | None:
    try:
        sizes = [int(s) for s in str(v).split(",") if s.strip()]
    except ValueError:
        sizes = []
    return None if sizes and all(s > 0 for s in sizes) else "must be comma-separated positive ints, e.g. '64,64'"


def target(v: Any) -> str | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return None if math.isfinite(v) else "must be finite"
    if str(v).strip().lower() in ("auto", "none"):
        return None
    try:
        return None if math.isfinite(float(v)) else "must be a finite number, 'auto' or 'none'"
    except ValueError:
        return "must be 'auto' (the env's reward threshold), 'none' or a number"


def bits(v: Any) -> str | None:
    return None if 1 <= v <= 16 else "must be an int in [1, 16]"


def off_or_bits(v: Any) -> str | None:
    return None if 0 <= v <= 16 else "must be an int in [0, 16] (0: off)"


def ring_bits(v: Any) -> str | None:
    return None if v == 0 or 2 <= v <= 32 else "must be 0 (auto: the smallest ring that cannot wrap) or in [2, 32]"


def decay(v: Any) -> str | None:
    return None if 0 <= v < 1 else "must be in [0, 1) (0: off)"


def off_or_unit_open(v: Any) -> str | None:
    return None if 0 <= v < 1 else "must be 0 (off) or in (0, 1)"


def unit_open(v: Any) -> str | None:
    return None if 0 < v < 1 else "must be in (0, 1)"


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # Flower carries run-config ints and record ints as sint64
MAX_NODES = 10_000


def travels(v: Any) -> str | None:
    """Whether a run-config value can travel in a Flower record (the run's config and fedrl's plans):
    ints must fit a signed 64-bit int, strings must be UTF-8 (protobuf strings are)."""
    if isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX:
        return "must fit a signed 64-bit int (Flower records carry nothing larger)"
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return "must be valid UTF-8 text (Flower records carry strings as UTF-8)"
    return None


def node_count(v: Any) -> str | None:
    # fedrl check builds every node's environment, and the server keeps a variant, a selection
    # history and (local, gossip) a model per node: a larger federation is untested.
    return None if 1 <= v <= MAX_NODES else f"must be in [1, {MAX_NODES}]"


MAX_HELD_OUT = 1_000


def held_out(v: Any) -> str | None:
    # Each held-out variant costs eval.episodes episodes at every evaluation, in one vector env.
    return None if 0 <= v <= MAX_HELD_OUT else f"must be in [0, {MAX_HELD_OUT}] (0: off)"


def folder_name(v: Any) -> str | None:
    """A run folder's name: one path component, so a run never writes outside ``output-dir``."""
    s = str(v)
    if s in (".", "..") or "/" in s or "\\" in s or "\0" in s:
        return "must be a plain folder name (no '/', '\\', '.' or '..'), e.g. 'cartpole-wide'"
    return None

