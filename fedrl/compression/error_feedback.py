"""Error feedback for biased compressors (EF-SGD; Karimireddy et al., ICML 2019; Seide et al., 2014).

Each round the node compresses ``x + residual`` and keeps ``residual = (x + residual) - decode(c)``,
so what a biased compressor (top-k, sign) drops this round is sent in later rounds. The residual
is node state: it round-trips through :meth:`ErrorFeedback.state_dict` (plain arrays) so it can
live in Flower's ``context.state`` between rounds.
"""

from __future__ import annotations

import numpy as np

from fedrl.compression.compressors import Compressed, Compressor


class ErrorFeedback:
    """Residual state for one node. The residual is float32, 1-D, the update's length; ``None`` before use."""

    def __init__(self) -> None:
        self.residual: np.ndarray | None = None

    def compress(self, x: np.ndarray, compressor: Compressor, rng: np.random.Generator) -> Compressed:
        """Compress ``x + residual`` and update the residual to what was not transmitted.

        Invariant: ``sum_t decode(c_t) + residual_T == sum_t x_t`` (up to float32 rounding).

        Raises:
            ValueError: if ``x`` is not 1-D or its length differs from the stored residual's.
        """
        a = np.asarray(x, dtype=np.float32)
        if a.ndim != 1:
            raise ValueError(f"update must be 1-D, got shape {a.shape}")
        if self.residual is None:
            self.residual = np.zeros_like(a)
        if self.residual.shape != a.shape:
            raise ValueError(f"update has length {a.size} but the error-feedback residual has {self.residual.size}")
        corrected = a + self.residual
        c = compressor.encode(corrected, rng)
        self.residual = (corrected - compressor.decode(c)).astype(np.float32)
        return c

    def reset(self) -> None:
        """Forget the residual (e.g. when the model shape changes)."""
        self.residual = None

    def state_dict(self) -> dict[str, np.ndarray]:
        """``{"residual": float32 copy}``, or ``{}`` before the first ``compress``."""
        return {} if self.residual is None else {"residual": self.residual.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict` output.

        Raises:
            ValueError: on unknown keys or a residual that is not a 1-D array.
        """
        unknown = set(state) - {"residual"}
        if unknown:
            raise ValueError(f"unknown error-feedback state keys {sorted(unknown)}; allowed: ['residual']")
        if "residual" not in state:
            self.residual = None
            return
        r = np.asarray(state["residual"])
        if r.ndim != 1:
            raise ValueError(f"residual must be 1-D, got shape {r.shape}")
        self.residual = r.astype(np.float32, copy=True)
