"""Byzantine-robust aggregation rules on flat updates (plain numpy).

Each takes the round's updates as an ``[n, d]`` array and returns one ``d`` vector; node weights
are ignored (a Byzantine node could lie about them).

- coordinate-wise median (Yin et al., ICML 2018): tolerates f < n/2 per coordinate;
- trimmed mean (Yin et al., ICML 2018): per coordinate, drop the ``k`` largest and ``k``
  smallest values and average the rest; tolerates f <= k;
- Krum and Multi-Krum (Blanchard et al., NeurIPS 2017): score each update by the sum of squared
  distances to its ``n - f - 2`` nearest others; Krum returns the best-scored update, Multi-Krum
  the mean of the ``m`` best. Needs n > 2f + 2.
"""

from __future__ import annotations

import numpy as np

ROBUST_RULES = ("median", "trimmed-mean", "krum", "multi-krum")


def _stack(updates: np.ndarray) -> np.ndarray:
    u = np.asarray(updates, np.float64)
    if u.ndim != 2 or u.shape[0] == 0:
        raise ValueError(f"updates must be a non-empty [n, d] array, got shape {u.shape}")
    return u


def coordinate_median(updates: np.ndarray) -> np.ndarray:
    return np.median(_stack(updates), axis=0).astype(np.float32)


def trimmed_mean(updates: np.ndarray, k: int) -> np.ndarray:
    """Per coordinate, the mean without the ``k`` largest and ``k`` smallest values."""
    u = _stack(updates)
    if not (0 <= k and 2 * k < u.shape[0]):
        raise ValueError(f"trimming {k} from each side of {u.shape[0]} updates leaves none")
    s = np.sort(u, axis=0)
    return s[k:u.shape[0] - k].mean(axis=0).astype(np.float32)


def krum_scores(updates: np.ndarray, f: int) -> np.ndarray:
    """Each update's sum of squared distances to its ``n - f - 2`` nearest other updates."""
    u = _stack(updates)
    n = u.shape[0]
    if n <= 2 * f + 2:
        raise ValueError(f"Krum needs n > 2f + 2; got n = {n}, f = {f}")
    sq = (u * u).sum(axis=1)
    dist = np.maximum(sq[:, None] + sq[None, :] - 2 * u @ u.T, 0.0)
    np.fill_diagonal(dist, np.inf)
    return np.sort(dist, axis=1)[:, : n - f - 2].sum(axis=1)


def multi_krum(updates: np.ndarray, f: int, m: int = 1) -> np.ndarray:
    """The mean of the ``m`` updates with the lowest Krum scores (``m = 1``: Krum)."""
    u = _stack(updates)
    if not 1 <= m <= u.shape[0]:
        raise ValueError(f"multi-krum m must be in [1, {u.shape[0]}], got {m}")
    best = np.argsort(krum_scores(u, f), kind="stable")[:m]
    return u[best].mean(axis=0).astype(np.float32)


def robust_aggregate(rule: str, updates: np.ndarray, f: int, trim: float, m: int) -> np.ndarray:
    """``rule`` over the updates; ``f`` Byzantine nodes assumed, ``trim`` the fraction trimmed per side,
    ``m`` Multi-Krum's selection (0: n - f)."""
    n = _stack(updates).shape[0]
    if rule == "median":
        return coordinate_median(updates)
    if rule == "trimmed-mean":
        return trimmed_mean(updates, int(trim * n))
    if rule == "krum":
        return multi_krum(updates, f, 1)
    if rule == "multi-krum":
        return multi_krum(updates, f, m or n - f)
    raise ValueError(f"robust rule must be one of {ROBUST_RULES}, got {rule!r}")
