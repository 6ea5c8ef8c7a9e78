"""One-run privacy audit (Steinke, Nasr and Jagielski, NeurIPS 2023) with canary updates.

The auditor plants ``m`` canary nodes in the run; each is included with probability 1/2, by a
bit drawn from a generator nobody else can replay. An included canary adds ``C_t u_{j,t}`` to the
clipped sum of round t before the noise: a node whose update has exactly the clip norm, in a
fresh random direction every round. Fresh directions keep the canaries from piling onto each
other across rounds (random directions in d dimensions overlap by about 1/sqrt(d)); random
canary directions for client-level DP are those of Andrew et al. (ICLR 2024).

Canary j's score is ``sum_t <A_t, u_{j,t}> / C_t`` where ``A_t`` is the released noisy sum
(what anyone holding every global model can recompute). The auditor guesses "in" for the k
highest scores and "out" for the k lowest; with ``v`` of ``r = 2k`` guesses right, Steinke et
al.'s Theorem 5.2 gives a p-value for "the run is (ε, δ)-DP". The empirical ε is the largest ε
that is rejected at 95% confidence: a lower bound on the true ε. Several k are tried, with a
Bonferroni correction, so the reported bound keeps its 95%. A bound above the accountant's ε
means the noise is not what the accounting assumes: the run is flagged.

The bound is only as strong as the audit's power: even if every guess is right, r guesses
certify at most :func:`epsilon_lower_bound` (m, r, r). A run that is not flagged is not proven
private; a flagged one is proven not to be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
GUESS_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.4)  # k / m per side, r = 2k guesses (Bonferroni over these);
# at most 0.4: about m/2 canaries are in, so 2k = m guesses could not all be right.


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P[at least v of r guesses right] for an (ε, δ)-DP run with m canaries (Steinke et al., Thm. 5.2).

    With q = e^ε / (1 + e^ε), the bound is P[Bin(r, q) >= v] + 2 m δ max_{1<=i<=v} P[v > Bin(r, q) >= v - i] / i.
    """
    if not (0 <= v <= r <= m and eps >= 0 and 0 <= delta <= 1):
        raise ValueError(f"need 0 <= v <= r <= m, eps >= 0, delta in [0, 1]; got m={m} r={r} v={v} eps={eps} "
                         f"delta={delta}")
    from scipy.stats import binom  # lazily: scipy is only needed by an audited run's server

    q = 1.0 / (1.0 + math.exp(-eps))
    beta = float(binom.sf(v - 1, r, q))
    alpha = 0.0
    if v > 0 and delta > 0:
        below = binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[Bin = v-1], P[Bin = v-2], ..., P[Bin = 0]
        alpha = float(np.max(np.cumsum(below) / np.arange(1, v + 1)))
    return min(1.0, beta + 2 * m * delta * alpha)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, level: float = 1 - CONFIDENCE) -> float:
    """The largest ε whose p-value is below ``level`` (0 when even ε = 0 is not rejected), to 1e-4."""
    if p_value(m, r, v, 0.0, delta) >= level:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < level:
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            return lo
    while hi - lo > 1e-4:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_value(m, r, v, mid, delta) < level else (lo, mid)
    return lo


@dataclass(frozen=True)
class AuditResult:
    canaries: int
    rounds: int
    guesses: int  # r of the best guess count
    correct: int  # v
    epsilon_lower: float  # empirical ε at 95% confidence
    power: float  # the most any guess count could certify (every guess right)
    epsilon_claimed: float  # the accountant's
    flagged: bool  # epsilon_lower > epsilon_claimed

    def line(self) -> str:
        verdict = ("FLAGGED: the run leaks more than its accounting allows (is the noise switched off?)"
                   if self.flagged else "consistent with the accountant")
        return (f"privacy audit (one run, {self.canaries} canaries, {self.rounds} rounds): empirical ε ≥ "
                f"{self.epsilon_lower:.3g} at 95% confidence ({self.correct}/{self.guesses} guesses right; this audit "
                f"can certify at most {self.power:.3g}); accountant ε = {self.epsilon_claimed:.3g}: {verdict}")

    def to_dict(self) -> dict[str, float | int | bool]:
        return {"canaries": self.canaries, "rounds": self.rounds, "guesses": self.guesses, "correct": self.correct,
                "epsilon_lower": self.epsilon_lower, "power": self.power, "epsilon_claimed": self.epsilon_claimed,
                "flagged": self.flagged}


def audit_scores(scores: np.ndarray, included: np.ndarray, rounds: int, delta: float, claimed: float) -> AuditResult:
    """The audit's verdict from the canaries' scores and the auditor's inclusion bits."""
    m = int(scores.size)
    order = np.argsort(-scores, kind="stable")
    level = (1 - CONFIDENCE) / len(GUESS_FRACTIONS)
    best = (0.0, 0, 0)
    power = 0.0
    for frac in GUESS_FRACTIONS:
        k = max(1, int(frac * m))
        top, bottom = order[:k], order[m - k:]
        v = int(included[top].sum() + (~included[bottom]).sum())
        eps = epsilon_lower_bound(m, 2 * k, v, delta, level)
        power = max(power, epsilon_lower_bound(m, 2 * k, 2 * k, delta, level))
        if eps > best[0] or best[1] == 0:
            best = (eps, 2 * k, v)
    return AuditResult(m, rounds, best[1], best[2], best[0], power, claimed, best[0] > claimed)


class CanaryAudit:
    """The auditor's side of the run: canary bits, this round's directions, scores so far.

    ``secret`` seeds the directions (never the run's seed: whoever knew the directions and bits
    could not be audited against; a real adversary does not know them either).
    """

    def __init__(self, m: int, dim: int, secret: int, included: np.ndarray | None = None) -> None:
        if m < 2:
            raise ValueError(f"an audit needs at least 2 canaries, got {m}")
        self.m, self.dim, self.secret = m, dim, secret
        rng = np.random.default_rng([secret, 0])
        self.included = rng.random(m) < 0.5 if included is None else included.astype(bool)
        self.scores = np.zeros(m, np.float64)
        self.rounds = 0
        self._dirs: np.ndarray | None = None

    def _directions(self, rnd: int) -> np.ndarray:
        u = np.random.default_rng([self.secret, 1, rnd]).standard_normal((self.m, self.dim))
        return u / np.linalg.norm(u, axis=1, keepdims=True)

    def inject(self, rnd: int, clip: float) -> np.ndarray:
        """The included canaries' updates of round ``rnd``, summed: add this to the clipped sum."""
        self._dirs = self._directions(rnd)
        return clip * self.included.astype(np.float64) @ self._dirs

    def observe(self, released_sum: np.ndarray, clip: float) -> None:
        """Score the round from the released noisy sum (call after :meth:`inject`, same round)."""
        if self._dirs is None:
            raise RuntimeError("observe() before inject() in this round")
        self.scores += self._dirs @ np.asarray(released_sum, np.float64) / clip
        self._dirs = None
        self.rounds += 1

    def result(self, delta: float, claimed: float) -> AuditResult:
        return audit_scores(self.scores, self.included, self.rounds, delta, claimed)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"audit/included": self.included.astype(np.uint8), "audit/scores": self.scores,
                "audit/meta": np.array([self.secret, self.rounds], dtype=np.uint64)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dim: int) -> CanaryAudit:
        secret, rounds = (int(x) for x in arrays["audit/meta"])
        a = cls(int(arrays["audit/included"].size), dim, secret, arrays["audit/included"])
        a.scores = arrays["audit/scores"].astype(np.float64)
        a.rounds = rounds
        return a
