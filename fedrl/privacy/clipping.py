"""L2 clipping of a node's whole update (McMahan et al., ICLR 2018: the unit is the node)."""

from __future__ import annotations

import numpy as np


def clip_l2(vec: np.ndarray, clip_norm: float) -> tuple[np.ndarray, float]:
    """``(vec * min(1, clip_norm / ||vec||_2), ||vec||_2)`` as float32; the result's norm is at most ``clip_norm``.

    The factor is computed in float64 and shrunk by a relative 1e-6 so that float32 rounding can
    never lift the clipped norm above the bound the sensitivity analysis assumes.

    Raises:
        ValueError: on a non-positive ``clip_norm`` or a non-finite ``vec``.
    """
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm!r}")
    v = np.asarray(vec, np.float32)
    norm = float(np.linalg.norm(v.astype(np.float64)))
    if not np.isfinite(norm):
        raise ValueError("the update has non-finite values")
    if norm <= clip_norm:
        return v.copy(), norm
    factor = clip_norm / norm * (1.0 - 1e-6)
    return (v.astype(np.float64) * factor).astype(np.float32), norm
