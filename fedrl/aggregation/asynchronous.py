"""Asynchronous aggregation without a round barrier: FedBuff (Nguyen et al., AISTATS 2022) and
FedAsync (Xie et al., 2019).

Nodes train from whatever model version is current when they are dispatched and reply when they
are done; the version is the number of server steps so far (the run's round). An update that
started from version v and is applied at version t has staleness tau = t - v and weight
``s(tau) = (1 + tau) ** -a`` (``strategy.staleness-exponent`` a; FedBuff's 1 / sqrt(1 + tau) at
a = 0.5; a = 0 ignores staleness).

- ``fedbuff``: updates (trained weights minus the version they started from) wait in a buffer;
  when ``strategy.buffer`` = K are in, the server steps with
  ``sum_i s(tau_i) n_i delta_i / sum_i n_i`` (n_i: env steps) through ``strategy.server-lr``.
  With K = N and no staleness that is FedAvg exactly (tested).
- ``fedasync``: every update is applied when it arrives, ``x += alpha s(tau) (x_i - x)`` with
  ``alpha = strategy.mixing`` and x_i the node's trained model.

``Versions`` keeps the models that in-flight nodes started from, and only those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedrl.aggregation.fedavg import weighted_mean

ASYNC_RULES = ("fedbuff", "fedasync")


def staleness_weight(tau: int, exponent: float) -> float:
    """``(1 + tau) ** -exponent`` (1 at tau = 0)."""
    if tau < 0:
        raise ValueError(f"staleness must be >= 0, got {tau}")
    return float((1.0 + tau) ** -exponent)


@dataclass(frozen=True)
class Buffered:
    """One update waiting in FedBuff's buffer."""

    node: int
    delta: list[np.ndarray]  # trained weights minus the version it started from
    env_steps: int
    version: int  # the version it started from
    clip_below: float | None = None  # DP's adaptive clipping: the node's bit (1: its update was within the norm)


def buffered_mean(entries: Sequence[Buffered], now: int, exponent: float) -> list[np.ndarray]:
    """FedBuff's step direction at version ``now``: ``sum s(tau_i) n_i delta_i / sum n_i``.

    Computed as ``weighted_mean`` with weights ``s n`` times ``sum s n / sum n``: with no staleness
    the factor is exactly 1 and the result is FedAvg's mean, bit for bit."""
    sn = [staleness_weight(now - e.version, exponent) * e.env_steps for e in entries]
    mean = weighted_mean([e.delta for e in entries], sn)
    factor = sum(sn) / sum(e.env_steps for e in entries)
    return mean if factor == 1.0 else [(m * np.float32(factor)).astype(np.float32) for m in mean]


def async_mix(model: Sequence[np.ndarray], trained: Sequence[np.ndarray], alpha: float) -> list[np.ndarray]:
    """FedAsync's update ``x + alpha (x_i - x)`` (float64, float32 result)."""
    return [(m.astype(np.float64) + alpha * (t.astype(np.float64) - m.astype(np.float64))).astype(np.float32)
            for m, t in zip(model, trained, strict=True)]


class Versions:
    """The models in-flight nodes started from, counted by use, so each is freed when its last node is back."""

    def __init__(self) -> None:
        self.models: dict[int, list[np.ndarray]] = {}
        self.users: dict[int, int] = {}

    def acquire(self, version: int, model: list[np.ndarray]) -> None:
        if version not in self.models:
            self.models[version] = [np.array(w, np.float32, copy=True) for w in model]
        self.users[version] = self.users.get(version, 0) + 1

    def release(self, version: int) -> list[np.ndarray]:
        """The model of ``version``; forgotten once no node uses it."""
        model = self.models[version]
        self.users[version] -= 1
        if self.users[version] == 0:
            del self.models[version], self.users[version]
        return model


class AsyncState:
    """Server state of an asynchronous run: the versions in use and FedBuff's buffer.

    Not checkpointed: a resumed run redispatches every node at the checkpointed version (work in
    flight and buffered updates at the kill are lost, as a crashed FedBuff server would lose them).
    """

    def __init__(self) -> None:
        self.versions = Versions()
        self.buffer: list[Buffered] = []
