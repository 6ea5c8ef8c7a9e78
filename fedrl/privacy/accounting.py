"""Privacy accounting with Opacus' accountants (RDP, Mironov 2017; PRV, Gopi et al. 2021).

One :class:`Ledger` per run: every released round is one step of the (subsampled) Gaussian
mechanism with noise multiplier ``z`` (noise std / sensitivity) and sampling rate ``q``. The
history is plain numbers, saved in the checkpoint, so a resumed run continues the same
composition instead of starting a fresh accountant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opacus.accountants.accountant import IAccountant

ACCOUNTANTS = ("rdp", "prv")
# Opacus is imported where it is used, not here: it costs ~1.5 s, and a ClientApp (a fresh process
# per message in deployment) imports this module whether or not the run is private.


def _make(kind: str) -> IAccountant:
    from opacus.accountants import PRVAccountant, RDPAccountant

    if kind == "rdp":
        return RDPAccountant()
    if kind == "prv":
        return PRVAccountant()
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {kind!r}")


def epsilon_after(z: float, q: float, steps: int, delta: float, kind: str = "rdp") -> float:
    """ε at ``delta`` after ``steps`` rounds of the Gaussian mechanism (z, q); inf when z is 0."""
    led = Ledger(kind, delta)
    if steps:
        led.history = [(float(z), float(q), int(steps))]
    return led.epsilon()


def noise_for_target(target_epsilon: float, delta: float, q: float, steps: int, kind: str = "rdp") -> float:
    """The smallest noise multiplier (Opacus' search, to 0.01 in ε) that keeps ``steps`` rounds within the target.

    Raises:
        ValueError: if no noise multiplier up to Opacus' limit reaches the target.
    """
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=q,
                                      steps=steps, accountant=kind, epsilon_tolerance=0.01))


class History:
    """Released rounds as ``(noise, q, steps)`` runs, as Opacus keeps them; plain numbers, so a
    checkpoint can hold them. Subclasses say what ``noise`` is and turn the history into ε."""

    def __init__(self, delta: float) -> None:
        self.delta = delta
        self.history: list[tuple[float, float, int]] = []

    def step(self, noise: float, q: float = 1.0) -> None:
        if self.history and self.history[-1][:2] == (noise, q):
            self.history[-1] = (noise, q, self.history[-1][2] + 1)
        else:
            self.history.append((float(noise), float(q), 1))

    @property
    def steps(self) -> int:
        return sum(n for _, _, n in self.history)

    def to_list(self) -> list[list[float]]:
        return [[z, q, float(n)] for z, q, n in self.history]

    def load_list(self, rows: list[list[float]]) -> None:
        self.history = [(float(z), float(q), int(n)) for z, q, n in rows]


class Ledger(History):
    """The composition of every released round so far (Gaussian mechanism: ``noise`` is z)."""

    def __init__(self, kind: str, delta: float) -> None:
        _make(kind)
        super().__init__(delta)
        self.kind = kind

    def epsilon(self, extra: tuple[float, float] | None = None) -> float:
        """ε at ``delta`` so far, or if one more round ``extra = (z, q)`` were released."""
        hist = list(self.history)
        if extra is not None:
            hist.append((float(extra[0]), float(extra[1]), 1))
        if not hist:
            return 0.0
        if any(z <= 0 for z, _, _ in hist):
            return float("inf")
        acc = _make(self.kind)
        acc.history = hist
        return float(acc.get_epsilon(delta=self.delta))
