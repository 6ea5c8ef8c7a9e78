"""Which nodes train in a round (``selection.name``), and the history deadline-aware selection learns from.

- ``uniform``: k of n drawn without replacement from (seed, round);
- ``round-robin``: the next k in turn (round 1: nodes 0..k-1), so every node trains equally often;
- ``deadline``: the k nodes least likely to miss ``round.deadline-s``. Each node's miss
  probability is the posterior mean (misses + 1) / (asked + 2) of its history (a node that has
  never been asked scores 1/2; a node that failed or replied late counts a miss); ties break by a
  seeded draw. With probability 0.1 per round the last slot goes to a node drawn from the rest,
  so a straggler that got faster is found again (exploration).
- ``poisson``: each node independently with probability q = ``fraction-train`` (the count varies
  round to round, q n on average). This is the sampling the DP accountants assume (Poisson
  subsampling), so client-level DP may claim amplification by sampling; for that the draw must
  be secret from whoever sees the model, so it comes from the OS's randomness
  (``fedrl.privacy.noise.private_rng``), never from ``seed``: runs are not reproducible in who
  trains. Each round is drawn once and kept (``select`` is asked several times a round).

k is ``Config.nodes_per_round``; with k = n every node trains and the rule does not matter
(poisson: with fraction-train = 1).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fedrl.config import Config
from fedrl.privacy.noise import private_rng
from fedrl.seeding import SELECT, numpy_rng

EXPLORE = 0.1  # deadline: chance per round that one slot re-tests a node outside the best k


class Selector:
    def __init__(self, cfg: Config) -> None:
        self.name, self.seed = cfg.selection.name, cfg.seed
        self.n, self.k = cfg.nodes.count, cfg.nodes_per_round
        self.q = cfg.fraction_train
        self.asked = np.zeros(self.n, np.int64)
        self.missed = np.zeros(self.n, np.int64)
        self._drawn: dict[int, list[int]] = {}  # poisson: each round's draw

    def select(self, rnd: int) -> list[int]:
        """The nodes trained in round ``rnd`` (sorted)."""
        n, k = self.n, self.k
        if self.name == "poisson":
            return self._poisson(rnd)
        if k == n:
            return list(range(n))
        if self.name == "round-robin":
            start = (rnd - 1) * k % n
            return sorted((start + j) % n for j in range(k))
        rng = numpy_rng(self.seed, SELECT, rnd)
        if self.name != "deadline":
            return sorted(int(i) for i in rng.choice(n, k, replace=False))
        order = np.lexsort((rng.random(n), self.miss_probability()))  # by score, then the seeded draw
        chosen = [int(i) for i in order[:k]]
        if rng.random() < EXPLORE:
            chosen[-1] = int(rng.choice(order[k:]))
        return sorted(chosen)

    def _poisson(self, rnd: int) -> list[int]:
        if self.q >= 1:
            return list(range(self.n))
        if rnd not in self._drawn:
            self._drawn = {r: v for r, v in self._drawn.items() if r >= rnd - 1}  # keep it small
            self._drawn[rnd] = [int(i) for i in np.flatnonzero(private_rng().random(self.n) < self.q)]
        return self._drawn[rnd]

    def expected(self) -> float:
        """The expected number of nodes per round: k, or q n for poisson (DP-FedAvg divides the
        noised sum by it, a number that does not depend on who was drawn; McMahan et al. 2018)."""
        return self.q * self.n if self.name == "poisson" else float(self.k)

    def miss_probability(self) -> np.ndarray:
        return (self.missed + 1) / (self.asked + 2)

    def note(self, asked: Iterable[int], missed: Iterable[int]) -> None:
        """Record a round: the nodes sent a plan and those that failed or missed the deadline."""
        for i in asked:
            self.asked[i] += 1
        for i in missed:
            self.missed[i] += 1

    def to_meta(self) -> dict[str, list[int]]:
        return {"asked": self.asked.tolist(), "missed": self.missed.tolist()}

    def load_meta(self, meta: dict[str, list[int]]) -> None:
        self.asked = np.asarray(meta["asked"], np.int64)
        self.missed = np.asarray(meta["missed"], np.int64)
