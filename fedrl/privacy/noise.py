"""Gaussian noise for the DP mechanisms.

The generator is seeded with 128 bits from the operating system, never from the run's seed:
anyone who knows a seeded stream (``config.json`` records the seed) could subtract the noise.
So DP runs are not bit-for-bit reproducible. numpy's PCG64 is not a cryptographic generator and
floating-point Gaussian samples have known side channels (Mironov, CCS 2012); Opacus makes the
same trade-off unless its ``secure_mode`` is on. The guarantees reported here are for the
mathematical mechanism.
"""

from __future__ import annotations

import secrets

import numpy as np


def private_rng() -> np.random.Generator:
    """A generator nobody else can replay (seeded from ``secrets``)."""
    return np.random.default_rng(secrets.randbits(128))


def gaussian(n: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` float32 samples of N(0, std^2); zeros when ``std`` is 0.

    Raises:
        ValueError: on a negative or non-finite ``std``.
    """
    if not (np.isfinite(std) and std >= 0):
        raise ValueError(f"noise std must be finite and >= 0, got {std!r}")
    if std == 0:
        return np.zeros(n, np.float32)
    return rng.normal(0.0, std, n).astype(np.float32)
