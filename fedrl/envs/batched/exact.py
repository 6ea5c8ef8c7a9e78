"""Scalar arithmetic of Gymnasium's single envs, reproduced over arrays bit for bit.

Gymnasium's classic-control ``step`` squares Python floats and NumPy scalars with ``** 2``,
which calls C's ``pow``. glibc's ``pow`` is accurate to about half an ulp but is not correctly
rounded: for about 1 x in 1,000 it returns a neighbour of ``x * x`` (the correctly rounded
square, and what NumPy's array ``** 2`` computes). In a chaotic system (Acrobot) such a last-bit
difference grows into a different trajectory, so the batch squares as ``pow`` does.
"""

from __future__ import annotations

import math

import numpy as np

_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's split of a double into two 26-bit halves


def pow_square(x: np.ndarray) -> np.ndarray:
    """``x ** 2`` element by element as C's ``pow(x, 2.0)`` rounds it (float64 in and out).

    ``x * x`` and ``pow`` can only disagree where the exact square lies near the midpoint of two
    doubles (``pow``'s error is below 0.52 ulp). Dekker's exact product error finds those
    entries; they, and only they, are recomputed with ``math.pow``. Assumes |x| < 2**500
    (physical states, far from overflow in the split).
    """
    x = np.asarray(x, np.float64)
    p = x * x
    c = _SPLIT * x
    hi = c - (c - x)
    lo = x - hi
    err = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo  # x*x - p exactly (Dekker 1971, TwoProduct)
    hard = np.abs(err) > 0.4 * np.spacing(np.abs(p))
    if hard.any():
        p = p.copy()
        p[hard] = [math.pow(v, 2.0) for v in x[hard].tolist()]
    return p


def powf_square(x: np.ndarray) -> np.ndarray:
    """``x ** 2`` for float32 ``x`` as a NumPy float32 scalar squares (C's ``powf``): float32.

    The exact square of a float32 fits in a double, so the correctly rounded float32 square
    is exact arithmetic plus one rounding; ``powf`` can differ only where that square is close to
    a float32 rounding midpoint, and those entries are recomputed scalar by scalar.
    """
    x = np.asarray(x, np.float32)
    exact = x.astype(np.float64) ** 2  # exact: 24-bit halves make at most 48 bits
    p = exact.astype(np.float32)
    hard = np.abs(exact - p.astype(np.float64)) > 0.4 * np.spacing(np.abs(p)).astype(np.float64)
    if hard.any():
        p = p.copy()
        p[hard] = [np.float32(v) ** 2 for v in x[hard]]
    return p
