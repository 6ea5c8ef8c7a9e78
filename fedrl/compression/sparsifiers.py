"""Sparsifying compressors: top-k (largest magnitudes) and random-k (round-shared seed)."""

from __future__ import annotations

import numpy as np

from fedrl.compression.base import Compressed, Compressor, _as_update, _check_fraction, _k_of
from fedrl.compression.packing import pack_indices, unpack_indices


def _index_payload(idx: np.ndarray, n: int) -> dict[str, np.ndarray]:
    kind, data = pack_indices(idx, n)
    return {f"idx_{kind}": data}


def _values(c: Compressed, k: int) -> np.ndarray:
    """The payload's float32 ``values``, which must number exactly ``k`` (checked before any copy)."""
    v = np.asarray(c.arrays["values"])
    if v.ndim != 1 or v.size != k:
        raise ValueError(f"{c.name} payload has {v.size} values; its fraction keeps k={k} of n={c.n}")
    return np.asarray(v, dtype=np.float32)


def _index_from_payload(c: Compressed, k: int) -> np.ndarray:
    """The payload's ``k`` indices: strictly increasing (no duplicates) and below ``c.n``."""
    for kind in ("bitmap", "delta"):
        key = f"idx_{kind}"
        if key in c.arrays:
            return unpack_indices(kind, np.asarray(c.arrays[key]), int(c.n), k)
    raise ValueError(f"{c.name} payload lacks an index array (idx_bitmap or idx_delta); has {sorted(c.arrays)}")


class TopK(Compressor):
    """``topk``: keep the ``k = clamp(ceil(fraction * n), 1, n)`` largest-magnitude coordinates.

    Error bound: exact (float32) on the kept coordinates, zero elsewhere, so
    ``||decode - x||^2 <= (1 - k/n) ||x||^2`` (Stich et al., NeurIPS 2018). Ties at the k-th
    magnitude are broken arbitrarily. Biased (pair with :class:`~fedrl.compression.error_feedback.ErrorFeedback`);
    not summable (nodes keep different coordinates).

    Payload: ``values`` (float32, k) and ``idx_bitmap`` or ``idx_delta`` (see ``pack_indices``).
    """

    name = "topk"
    unmaskable = "each node keeps different coordinates, so the sum of payloads is not summable"

    def __init__(self, fraction: float = 0.01) -> None:
        self.fraction = _check_fraction(fraction)

    def __repr__(self) -> str:
        return f"TopK(fraction={self.fraction})"

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        a = _as_update(x)
        n = int(a.size)
        k = _k_of(self.fraction, n)
        if k == n:
            idx = np.arange(n, dtype=np.int64)
        else:
            idx = np.sort(np.argpartition(-np.abs(a), k - 1)[:k]).astype(np.int64)
        return Compressed(self.name, {"values": a[idx].copy(), **_index_payload(idx, n)}, n)

    def decode(self, c: Compressed) -> np.ndarray:
        """The float32 update of length ``c.n``.

        Raises:
            ValueError: not exactly ``k`` values for this fraction, or indices that are out of
                range or repeated (checked before anything of their size is allocated).
        """
        self._check_payload(c, ("values",))
        values = _values(c, _k_of(self.fraction, int(c.n)))
        idx = _index_from_payload(c, int(values.size))
        out = np.zeros(int(c.n), dtype=np.float32)
        out[idx] = values
        return out


class RandK(Compressor):
    """``randk``: ``k = clamp(ceil(fraction * n), 1, n)`` uniformly random coordinates, scaled by ``n/k``.

    ``encode`` draws one int64 ``seed`` from the given ``rng`` and picks
    ``sorted(np.random.default_rng(seed).choice(n, k, replace=False))``; the payload stores that
    ``seed`` (shape ``(1,)``) and the ``k`` values ``(n/k) * x[idx]`` (float32), never the indices.

    Summable: when every node encodes with a generator in the same state (a round-shared seed),
    all draw the same ``seed`` and coordinates, so summing the ``values`` arrays (seed unchanged)
    decodes to the sum of the updates' decodes. Unbiased over ``rng`` (each coordinate is kept
    with probability ``k/n``; Stich et al., NeurIPS 2018). Error: ``decode`` is zero off the chosen
    coordinates and ``(n/k) * x`` on them (variance ``(n/k - 1) ||x||^2``).
    """

    name = "randk"
    unmaskable = "random-k with secure aggregation is not implemented yet (only quantize is)"
    summable = True
    unbiased = True

    def __init__(self, fraction: float = 0.01) -> None:
        self.fraction = _check_fraction(fraction)

    def __repr__(self) -> str:
        return f"RandK(fraction={self.fraction})"

    @staticmethod
    def indices(seed: int, n: int, k: int) -> np.ndarray:
        """The sorted int64 coordinates chosen by ``seed`` (shared by encode and decode)."""
        if k == 0:
            return np.zeros(0, dtype=np.int64)
        return np.sort(np.random.default_rng(seed).choice(n, k, replace=False)).astype(np.int64)

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        a = _as_update(x)
        n = int(a.size)
        k = _k_of(self.fraction, n)
        seed = int(rng.integers(0, np.iinfo(np.int64).max))
        idx = self.indices(seed, n, k)
        values = (a[idx].astype(np.float64) * (n / k)).astype(np.float32) if k else np.zeros(0, np.float32)
        return Compressed(self.name, {"seed": np.array([seed], dtype=np.int64), "values": values}, n)

    def decode(self, c: Compressed) -> np.ndarray:
        self._check_payload(c, ("seed", "values"))
        values = _values(c, _k_of(self.fraction, int(c.n)))
        seed_arr = np.asarray(c.arrays["seed"])
        if seed_arr.shape != (1,) or not np.issubdtype(seed_arr.dtype, np.integer) or int(seed_arr[0]) < 0:
            raise ValueError(f"randk seed must be one integer >= 0, got {seed_arr.dtype}{seed_arr.shape}")
        idx = self.indices(int(seed_arr[0]), int(c.n), int(values.size))
        out = np.zeros(int(c.n), dtype=np.float32)
        out[idx] = values
        return out
