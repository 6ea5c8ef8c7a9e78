"""Running mean/variance statistics (observation and reward normalization).

Merging uses the parallel algorithm of Chan, Golub and LeVeque (1979), so statistics kept
separately on nodes can be pooled exactly: ``merge(a, b)`` equals the statistics of the
concatenated data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Moments:
    """Count, mean and sum of squared deviations (M2) of a stream of vectors."""

    count: float
    mean: np.ndarray
    m2: np.ndarray

    @staticmethod
    def empty(dim: int) -> Moments:
        return Moments(0.0, np.zeros(dim, np.float64), np.zeros(dim, np.float64))

    @staticmethod
    def of(batch: np.ndarray, center: bool = True) -> Moments:
        """Moments of a ``[B, D]`` batch; ``center=False``: about zero (mean 0, M2 the sum of squares).

        Moments about zero merge into moments about zero, so statistics kept that way stay
        uncentred and ``normalize`` divides by the root mean square without shifting.
        """
        b = np.asarray(batch, np.float64).reshape(len(batch), -1)
        mean = b.mean(0) if center else np.zeros(b.shape[1])
        return Moments(float(len(b)), mean, ((b - mean) ** 2).sum(0))

    @property
    def var(self) -> np.ndarray:
        return self.m2 / self.count if self.count > 0 else np.ones_like(self.m2)

    def merge(self, other: Moments) -> Moments:
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        n = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * other.count / n
        m2 = self.m2 + other.m2 + delta**2 * self.count * other.count / n
        return Moments(n, mean, m2)

    def to_array(self) -> np.ndarray:
        """Flat float64 ``[count, mean..., m2...]`` for the wire and ``context.state``."""
        return np.concatenate([[self.count], self.mean, self.m2]).astype(np.float64)

    @staticmethod
    def from_array(arr: np.ndarray) -> Moments:
        a = np.asarray(arr, np.float64)
        if a.ndim != 1 or len(a) % 2 != 1:
            raise ValueError("moments array must be 1-D of odd length")
        d = (len(a) - 1) // 2
        return Moments(float(a[0]), a[1 : 1 + d].copy(), a[1 + d :].copy())


def normalize(obs: np.ndarray, m: Moments, clip: float = 10.0, eps: float = 1e-8) -> np.ndarray:
    """(obs - mean) / sqrt(var + eps), clipped to ±clip; identity statistics when empty."""
    if m.count == 0:
        return np.clip(obs, -clip, clip).astype(np.float32)
    return np.clip((obs - m.mean) / np.sqrt(m.var + eps), -clip, clip).astype(np.float32)
