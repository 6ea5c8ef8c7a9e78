"""Temporally correlated Gaussian exploration noise, for SAC's action sampling.

SAC draws its action as ``tanh(mu + sigma * eps)``; with i.i.d. ``eps`` (white noise) the car in
MountainCarContinuous jitters in place and never learns that the goal exists. Eberhard et al.
("Pink noise is all you need", ICLR 2023) replace ``eps`` by colored noise, a Gaussian sequence
whose power spectrum falls as ``1 / f**beta`` over each env's time steps: beta = 0 is white,
1 pink, 2 red (Brownian-like). Each step's marginal is still N(0, 1), so the policy's
log-probabilities and losses are unchanged; only the order of the draws is correlated.

Written here rather than taken from the ``colorednoise`` or ``pink-noise-rl`` packages: it is
one FFT, and fedrl draws every random number from its own derived generators (``fedrl.seeding``)
so that runs replay exactly.
"""

from __future__ import annotations

import numpy as np


def colored_noise(beta: float, length: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Independent colored-noise sequences: an array ``(length, *shape)`` of float32, each series
    over the first axis Gaussian with mean 0, variance 1 at every step and power spectrum
    proportional to ``1 / f**beta`` (frequencies below ``1 / length`` take that lowest one's
    power). ``beta = 0`` returns white noise drawn from ``rng`` directly."""
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    if beta == 0 or length == 1:
        return rng.standard_normal((length, *shape)).astype(np.float32)
    f = np.fft.rfftfreq(length)
    f[0] = f[1]  # the mean's power is the lowest frequency's, not infinite
    s = f ** (-beta / 2.0)  # amplitude per frequency
    real_only = [0, -1] if length % 2 == 0 else [0]  # the mean's and the Nyquist frequency's coefficients
    real = rng.standard_normal((len(f), *shape))
    imag = rng.standard_normal((len(f), *shape))
    imag[real_only] = 0.0
    coef = s.reshape(-1, *([1] * len(shape))) * (real + 1j * imag)
    x = np.fft.irfft(coef, n=length, axis=0)
    # Var(x_t) of irfft: (sum_real_only s_k^2 + 4 sum_others s_k^2) / n^2, the same at every t
    w = np.full(len(f), 4.0)
    w[real_only] = 1.0
    sigma = np.sqrt(np.sum(w * s**2)) / length
    return (x / sigma).astype(np.float32)
