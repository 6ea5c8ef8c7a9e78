"""The model a run keeps, as an exponential moving average of the server's models (``strategy.ema``).

Under differential privacy every round adds Gaussian noise to the global model, and the noise
of successive rounds accumulates: a policy that solved every variant can drift off again (the
1,000-node preset, issue 16). Averaging the iterates damps that noise while training still
steps from the latest model; De et al. 2022 ("Unlocking high-accuracy differentially private
image classification through scale") keep such an average for DP-SGD. The average is computed
from models the server has already released, so it is post-processing: it costs no ε.

The average is bias-corrected: after rounds ``1..t`` it is ``sum_i decay^(t-i) w_i / sum_i
decay^(t-i)``, so the first rounds are not pulled towards a zero or initial model. Written here
(not ``torch.optim.swa_utils.AveragedModel``) because the server's models are lists of numpy
arrays, never ``nn.Module``s, and the state must round-trip through the run's checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

PREFIX = "ema/"  # checkpoint array names: ema/0, ema/1, ... (float64)


class IterateAverage:
    """Bias-corrected exponential moving average of a sequence of models (lists of arrays)."""

    def __init__(self, decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay!r}")
        self.decay = decay
        self.weight = 0.0  # sum_i decay^(t-i): the normalizer of the average after t models
        self.mean: list[np.ndarray] | None = None

    def update(self, model: Sequence[np.ndarray]) -> None:
        """Fold in the next model: mean += (w - mean) / weight, weight = decay * weight + 1."""
        self.weight = self.decay * self.weight + 1.0
        if self.mean is None:
            self.mean = [np.asarray(w, np.float64).copy() for w in model]
            return
        step = 1.0 / self.weight
        for m, w in zip(self.mean, model, strict=True):
            m += (np.asarray(w, np.float64) - m) * step

    def model(self) -> list[np.ndarray]:
        """The average as float32 arrays (the model's dtype). Raises ValueError before any update."""
        if self.mean is None:
            raise ValueError("no model has been averaged yet")
        return [m.astype(np.float32) for m in self.mean]

    def to_checkpoint(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Meta ``{"ema_weight": w}`` and arrays ``ema/<i>`` (none before the first update)."""
        arrays = {f"{PREFIX}{i}": m.copy() for i, m in enumerate(self.mean or [])}
        return {"ema_weight": self.weight}, arrays

    def load_checkpoint(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray], n: int) -> None:
        """Restore what ``to_checkpoint`` wrote for a model of ``n`` arrays (shapes are checked by
        ``fedrl.server.snapshot_checks``)."""
        self.weight = float(meta.get("ema_weight", 0.0))
        names = [f"{PREFIX}{i}" for i in range(n)]
        self.mean = [np.asarray(arrays[k], np.float64).copy() for k in names] if names[0] in arrays else None
