"""Server optimizers on the aggregated update (Reddi et al., "Adaptive Federated Optimization", ICLR 2021).

Each round the server gets the (weighted, robust or private) mean update ``d`` (a pseudo-gradient
pointing downhill, i.e. minus a gradient) and moves the global model ``x`` with it:

- ``fedavg``:     ``x += lr * d``
- ``fedavgm``:    ``m = momentum * m + d``;  ``x += lr * m``  (Hsu, Qi and Brown, 2019)
- ``fedadagrad``: ``m = b1 m + (1 - b1) d``; ``v = v + d^2``;                         ``x += lr * m / (sqrt(v) + tau)``
- ``fedadam``:    ``m = b1 m + (1 - b1) d``; ``v = b2 v + (1 - b2) d^2``;              ``x += lr * m / (sqrt(v) + tau)``
- ``fedyogi``:    ``m = b1 m + (1 - b1) d``; ``v = v - (1 - b2) d^2 sign(v - d^2)``;   ``x += lr * m / (sqrt(v) + tau)``

``m`` and ``v`` start at zero, as in Flower's strategies (no bias correction, as in the paper's
Algorithm 2). So FedAdam with ``b1 = 0``, ``b2 = 1`` and ``tau = 1`` is FedAvg with the same
``lr``: its state never moves ``v`` off zero. The state is plain float arrays, saved in the
run's checkpoint. Flower ships these as Strategy classes around its own training loop; fedrl's
loop needs them as a step on arrays, so they are written here (a few lines each).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from fedrl.config.schedule import linear

OPTIMIZERS = ("fedavg", "fedavgm", "fedadagrad", "fedadam", "fedyogi")


def annealed_lr(start: float, end: float, rnd: int, total_rounds: int) -> float:
    """The server learning rate of round ``rnd`` (1-based) of ``total_rounds``: ``start`` in round 1,
    then linearly to ``min(end, start)`` in the last round (``end = -1``: ``start`` throughout). The
    schedule never raises the step: an adaptive optimizer's small ``start`` (about 0.01) stays as it is
    under the default ``end`` of 0.5.

    Why: PPO bounds each node's policy change per round (the clipped ratio), and the mean of those
    changes stays near that trust region; a server step above 1 extrapolates beyond it. Early on
    that speeds learning; late, when the policy is good, it can overshoot a solved policy.
    """
    return linear(start, end if end < 0 else min(end, start), rnd, total_rounds)


@dataclass(frozen=True)
class ServerOptSettings:
    name: str = "fedavg"
    lr: float = 1.0
    momentum: float = 0.9  # fedavgm
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3


class ServerOptimizer:
    """One optimizer over the flattened global model; ``step`` returns the new flat model."""

    def __init__(self, settings: ServerOptSettings, n: int) -> None:
        if settings.name not in OPTIMIZERS:
            raise ValueError(f"server optimizer must be one of {OPTIMIZERS}, got {settings.name!r}")
        self.s = settings
        self.m = np.zeros(n, np.float64)
        self.v = np.zeros(n, np.float64)
        self.steps = 0

    def step(self, x: np.ndarray, d: np.ndarray, lr: float | None = None) -> np.ndarray:
        """The new flat model after one step on the mean update ``d``; ``lr`` overrides the
        settings' learning rate for this step (a schedule, ``annealed_lr``)."""
        s, d64 = self.s, np.asarray(d, np.float64)
        if lr is not None:
            s = dataclasses.replace(s, lr=lr)
        if d64.shape != self.m.shape:
            raise ValueError(f"update has {d64.size} values, the model {self.m.size}")
        self.steps += 1
        if s.name == "fedavg":
            return (np.asarray(x, np.float64) + s.lr * d64).astype(np.float32)
        if s.name == "fedavgm":
            self.m = s.momentum * self.m + d64
            return (np.asarray(x, np.float64) + s.lr * self.m).astype(np.float32)
        self.m = s.beta1 * self.m + (1 - s.beta1) * d64
        sq = d64 * d64
        if s.name == "fedadagrad":
            self.v = self.v + sq
        elif s.name == "fedadam":
            self.v = s.beta2 * self.v + (1 - s.beta2) * sq
        else:  # fedyogi
            self.v = self.v - (1 - s.beta2) * sq * np.sign(self.v - sq)
        return (np.asarray(x, np.float64) + s.lr * self.m / (np.sqrt(self.v) + s.tau)).astype(np.float32)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"serveropt/m": self.m, "serveropt/v": self.v, "serveropt/steps": np.array([self.steps], np.int64)}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        if "serveropt/m" in arrays:
            self.m = np.asarray(arrays["serveropt/m"], np.float64).copy()
            self.v = np.asarray(arrays["serveropt/v"], np.float64).copy()
            self.steps = int(arrays["serveropt/steps"][0])
