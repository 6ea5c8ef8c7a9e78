"""FedAvg (McMahan et al., AISTATS 2017) on deltas, with a server learning rate.

new = global + server_lr * sum_i(w_i * delta_i) / sum_i(w_i), with w_i the env steps of
node i. server_lr = 1 is plain FedAvg (the weighted mean of the clients' models); other
values are the "server learning rate" of Reddi et al. (ICLR 2021) with plain SGD.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def weighted_mean(deltas: Sequence[Sequence[np.ndarray]], weights: Sequence[float]) -> list[np.ndarray]:
    """Weighted mean of same-shaped array lists (float64 accumulation, float32 result)."""
    if not deltas:
        raise ValueError("weighted_mean of no updates")
    if len(deltas) != len(weights):
        raise ValueError("one weight per update")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("weights must sum to a positive number")
    out = [np.zeros(a.shape, np.float64) for a in deltas[0]]
    for delta, w in zip(deltas, weights, strict=True):
        for acc, a in zip(out, delta, strict=True):
            acc += (w / total) * a
    return [a.astype(np.float32) for a in out]


def apply_delta(params: Sequence[np.ndarray], delta: Sequence[np.ndarray], server_lr: float) -> list[np.ndarray]:
    return [(p + server_lr * d).astype(np.float32) for p, d in zip(params, delta, strict=True)]


def delta_of(new: Sequence[np.ndarray], old: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [(n - o).astype(np.float32) for n, o in zip(new, old, strict=True)]
