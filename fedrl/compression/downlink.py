"""Downlink compression: send nodes the compressed change of the global model, not the model.

The server keeps, per model slot, the *broadcast model* ``B``: the weights that a node which
received every broadcast holds. Each round it compresses ``G - B`` (the global model minus what
nodes hold, so whatever an earlier round's compression dropped is sent again: error feedback for
free) and advances ``B`` by the decoded payload, which every up-to-date node applies identically.
Nodes keep ``B`` and its round in their state. A node whose held round is not the previous
broadcast (it missed rounds, is new, or lost its state) gets ``B`` in full, as float32 weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrl.compression.base import Compressed
from fedrl.compression.pipeline import Stage, decompress, rng_for
from fedrl.model.layout import flatten, unflatten

BASE_KEY, ROUND_KEY = "down.base", "down.round"


@dataclass(frozen=True)
class Downlink:
    """A plan's weights: in full (``weights``), or ``delta`` against the broadcast of ``base_round``."""

    weights: list[np.ndarray] | None
    delta: Compressed | None = None
    base_round: int = -1


class Broadcaster:
    """Server side of one model slot (see module doc)."""

    def __init__(self, st: Stage, model: list[np.ndarray], seed: int, slot: int) -> None:
        self.stage, self.seed, self.slot = st, seed, slot
        self.base = [np.asarray(w, np.float32).copy() for w in model]
        self.round = 0  # round of the broadcast ``base`` is
        self.prev = -1  # round the current ``delta`` applies to
        self.delta: Compressed | None = None

    def advance(self, model: list[np.ndarray], rnd: int) -> None:
        """Make round ``rnd``'s broadcast from the current global ``model``."""
        if not self.stage.active:
            self.base, self.round = [np.asarray(w, np.float32) for w in model], rnd
            return
        b = flatten(self.base)
        d = flatten(model) - b
        self.delta = self.stage.compressor.encode(d, rng_for(self.stage.name, self.seed, rnd, self.slot))
        self.base = unflatten(b + decompress(self.delta, self.stage, b.size), self.base)
        self.prev, self.round = self.round, rnd

    def load(self, base: list[np.ndarray], rnd: int) -> None:
        """Resume from a checkpoint: ``base`` is the broadcast of round ``rnd``."""
        self.base, self.round = base, rnd

    def downlink(self, holds: int | None) -> Downlink:
        """What to send a node holding the broadcast of round ``holds`` (None: nothing known)."""
        if self.stage.active and self.delta is not None and holds is not None and holds == self.prev:
            return Downlink(None, self.delta, self.prev)
        return Downlink(self.base)


class StaleBase(ValueError):
    """A node was sent a delta against a broadcast it does not hold."""


def receive(dl: Downlink, st: Stage, state: dict[str, np.ndarray], rnd: int,
            like: list[np.ndarray]) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Client side: the weights to train from and the state entries to keep.

    Raises:
        StaleBase: a delta against a round this node does not hold (the server then sends full
            weights next time).
        ValueError: a malformed payload.
    """
    if dl.weights is not None:
        weights = [np.asarray(w, np.float32) for w in dl.weights]
    else:
        assert dl.delta is not None
        held = int(state[ROUND_KEY][0]) if ROUND_KEY in state else None
        if held != dl.base_round or BASE_KEY not in state:
            raise StaleBase(f"sent a delta against round {dl.base_round}'s model, holds round {held}")
        b = state[BASE_KEY].astype(np.float32)
        weights = unflatten(b + decompress(dl.delta, st, b.size), like)
    if not st.active:
        return weights, {}
    return weights, {BASE_KEY: flatten(weights), ROUND_KEY: np.asarray([rnd], np.int64)}
