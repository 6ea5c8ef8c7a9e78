"""The model's flat layout: its weight arrays as one float32 vector, in the order of ``get_weights``.

Compression, secure aggregation, the server rules and the node all work on this vector; it
lives here, under everything that uses it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def flatten(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """All arrays, raveled and concatenated, as float32."""
    if not arrays:
        return np.zeros(0, np.float32)
    return np.concatenate([np.asarray(a, np.float32).ravel() for a in arrays])


def unflatten(vec: np.ndarray, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Split ``vec`` into float32 arrays shaped like ``like``.

    Raises:
        ValueError: if the lengths differ.
    """
    total = sum(int(a.size) for a in like)
    if vec.shape != (total,):
        raise ValueError(f"update has shape {vec.shape}, the model has {total} parameters")
    out, at = [], 0
    for a in like:
        out.append(np.asarray(vec[at:at + a.size], np.float32).reshape(a.shape))
        at += a.size
    return out
