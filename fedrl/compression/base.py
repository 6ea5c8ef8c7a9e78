"""Update compressors: encode a 1-D float32 update into plain arrays, decode it back.

Contract shared by every compressor:

- ``encode(x, rng)`` takes a finite 1-D array (cast to float32) and an explicit
  ``np.random.Generator`` (the only source of randomness), and returns a :class:`Compressed`
  whose ``arrays`` are plain numpy arrays (what travels in a Flower ``ArrayRecord``).
- ``decode(c)`` returns a float32 array of length ``c.n``.
- ``summable``: decoding the element-wise *sum* of several nodes' payload arrays gives the sum of
  their decodes (what secure aggregation needs, since the server only sees sums). See each class
  for the exact conditions.
- ``unbiased``: ``E_rng[decode(encode(x, rng))] == x``.
- Each class states its worst-case error bound; tests in ``tests/unit/test_compression_*.py`` check it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from fedrl.wire import Compressed  # the payload type lives with the other wire types


def _as_update(x: np.ndarray) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"update must be 1-D, got shape {a.shape}")
    a = a.astype(np.float32, copy=False)
    if a.size and not bool(np.all(np.isfinite(a))):
        raise ValueError("update contains NaN or inf")
    return a


def _check_int(name: str, value: int, lo: int, hi: int | None = None) -> int:
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    ok = ok and int(value) >= lo and (hi is None or int(value) <= hi)
    if not ok:
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be an int in {rng}, got {value!r}")
    return int(value)


def _check_fraction(fraction: float) -> float:
    f = float(fraction)
    if not (0.0 < f <= 1.0) or math.isnan(f):
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    return f


def _k_of(fraction: float, n: int) -> int:
    """Number of kept coordinates: ``ceil(fraction * n)`` clamped to ``[1, n]`` (0 when ``n == 0``)."""
    if n == 0:
        return 0
    return min(n, max(1, math.ceil(fraction * n)))


class Compressor(ABC):
    """Base class: ``name``, ``summable``, ``unbiased``, ``encode`` and ``decode`` (see module doc)."""

    name: str = ""
    summable: bool = False
    unbiased: bool = False
    # Why its payloads cannot feed a masked sum (secure aggregation, distributed DP's ring), in the
    # words a refused run hears; "" for a summable compressor that can. The resolver in
    # ``fedrl.features.components`` reads this with ``summable``.
    unmaskable: str = ""

    @abstractmethod
    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        """Compress a finite 1-D float32 update ``x``; randomness only from ``rng``."""

    @abstractmethod
    def decode(self, c: Compressed) -> np.ndarray:
        """Return the float32 reconstruction, shape ``(c.n,)``."""

    def _check_payload(self, c: Compressed, keys: tuple[str, ...]) -> None:
        if c.name != self.name:
            raise ValueError(f"payload was made by {c.name!r}, cannot decode with {self.name!r}")
        missing = [k for k in keys if k not in c.arrays]
        if missing:
            raise ValueError(f"{self.name} payload lacks arrays {missing}; has {sorted(c.arrays)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
