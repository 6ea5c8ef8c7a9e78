"""Linear schedules over a run's rounds, shared by the server learning rate and the DP clip norm."""

from __future__ import annotations


def linear(start: float, end: float, rnd: int, total_rounds: int) -> float:
    """``start`` in round 1, then linearly to ``end`` in round ``total_rounds`` (rounds are 1-based;
    rounds past the last stay at ``end``). ``end < 0`` means off: ``start`` throughout, as does a
    run of one round."""
    if end < 0 or total_rounds <= 1:
        return start
    frac = min(max((rnd - 1) / (total_rounds - 1), 0.0), 1.0)
    return start + (end - start) * frac
