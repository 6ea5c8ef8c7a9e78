"""Distributed DP inside the secure-aggregation ring: the Skellam mechanism.

Agarwal, Kairouz and Liu (NeurIPS 2021). Each node clips its update to L2 norm ``C``, scales it
by ``s``, rounds it to integers and adds its share of Skellam noise before masking, so the server
only ever unmasks a sum that is already noised:

- **Rounding** is conditional randomized rounding (Kairouz, Liu and Steinke, ICML 2021): each
  coordinate rounds up with probability equal to its fractional part, and the draw is repeated
  until the rounded vector's norm is within ``l2`` (their bound holds with probability
  ``1 - beta`` per draw). So ``l2`` is a hard bound on the sensitivity after quantization, and
  the integer vector's L1 norm is at most ``min(l2^2, sqrt(d) l2)``.
- **Noise**: Skellam(mu, mu) = Poisson(mu) - Poisson(mu), variance 2 mu. Sums of Skellams are
  Skellam, so ``k`` nodes each adding Sk(mu_node) give Sk(k mu_node): the noise is exact in
  the ring, with no floating point.
- **Dropouts**: each node adds Sk(mu / t), ``t`` the fewest nodes whose sum the secure
  aggregation can unmask (its threshold). Any sum the server gets has noise at least Sk(mu),
  whoever dropped; with k > t nodes in it, it has Sk(k mu / t) and is accounted as such.
- **Accounting**: RDP of the Skellam mechanism for integer orders (their Theorem 3.5):
  ``eps(a) <= a l2^2 / (4 mu) + min((2 a l2^2 + 6 l1) / (16 mu^2), 3 l1 / (4 mu))``, composed
  over rounds and turned into (ε, δ) by Opacus' RDP conversion. The rounding is in ``l2``.
- **No wrap-around**: the scale is chosen so that ``n l2 + 12 sigma_n < 2^(bits-1)`` with
  ``sigma_n`` the noise std when all n nodes are in the sum; every coordinate of a node's
  rounded vector is at most ``l2``, so the sum leaves the signed range only if the noise exceeds
  12 standard deviations (probability below 1e-30 per coordinate).

Noise comes from :func:`fedrl.privacy.noise.private_rng` (numpy's generator, not a
cryptographic one; see that module).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from fedrl.privacy.accounting import History

ORDERS = tuple(range(2, 257))  # integer Rényi orders: the Skellam bound is for integer a > 1
BETA = math.exp(-0.5)  # conditional rounding: chance that one rounding draw exceeds the bound
TAIL_SIGMAS = 12.0  # headroom for the noise in the ring, in standard deviations


def rounded_l2(norm: float, d: int, beta: float = BETA) -> float:
    """The bound ``l2`` that conditional randomized rounding enforces on a vector of norm <= ``norm``
    (Kairouz et al. 2021): ``sqrt(min(c^2 + d/4 + sqrt(2 ln(1/beta)) (c + sqrt(d)/2), (c + sqrt(d))^2))``."""
    c, rd = float(norm), math.sqrt(d)
    return math.sqrt(min(c * c + d / 4 + math.sqrt(2 * math.log(1 / beta)) * (c + rd / 2), (c + rd) ** 2))


def conditional_round(x: np.ndarray, bound: float, rng: np.random.Generator, tries: int = 1000) -> np.ndarray:
    """Unbiased per-coordinate rounding of ``x`` to int64, redrawn until the L2 norm is <= ``bound``.

    Raises:
        RuntimeError: if ``tries`` draws all exceed the bound (each succeeds with probability >= 1 - beta).
    """
    x = np.asarray(x, np.float64)
    floor = np.floor(x)
    frac = x - floor
    for _ in range(tries):
        out = (floor + (rng.random(x.size) < frac)).astype(np.int64)
        if float(np.linalg.norm(out.astype(np.float64))) <= bound:
            return out
    raise RuntimeError(f"randomized rounding exceeded the norm bound {bound:g} in {tries} draws")


def skellam(n: int, mu: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` int64 samples of Sk(mu, mu) = Poisson(mu) - Poisson(mu) (variance 2 mu); zeros at mu = 0."""
    if not (math.isfinite(mu) and mu >= 0):
        raise ValueError(f"Skellam mu must be finite and >= 0, got {mu!r}")
    if mu == 0:
        return np.zeros(n, np.int64)
    return rng.poisson(mu, n).astype(np.int64) - rng.poisson(mu, n).astype(np.int64)


def skellam_rdp(order: int, mu: float, l1: float, l2: float) -> float:
    """RDP at integer ``order`` of adding Sk(mu, mu) to an integer query with sensitivities l1, l2."""
    a = order
    return a * l2 * l2 / (4 * mu) + min((2 * a * l2 * l2 + 6 * l1) / (16 * mu * mu), 3 * l1 / (4 * mu))


def skellam_epsilon(mus: list[tuple[float, int]], l1: float, l2: float, delta: float) -> float:
    """ε at ``delta`` after rounds of total noise Sk(mu, mu), given as ``[(mu, rounds), ...]``."""
    if not mus or all(n == 0 for _, n in mus):
        return 0.0
    if any(mu <= 0 for mu, n in mus if n):
        return float("inf")
    rdp = [sum(n * skellam_rdp(a, mu, l1, l2) for mu, n in mus) for a in ORDERS]
    with warnings.catch_warnings():  # "optimal order is the smallest": the bound holds for integer orders only
        warnings.simplefilter("ignore", UserWarning)
        from opacus.accountants.analysis.rdp import get_privacy_spent  # lazily: see fedrl.privacy.accounting

        eps, _ = get_privacy_spent(orders=list(ORDERS), rdp=rdp, delta=delta)
    return float(eps)


@dataclass(frozen=True)
class SkellamCoding:
    """One run's distributed-DP coding: everything every node and the server must agree on.

    ``mu`` is the Poisson parameter of the least total noise: ``share`` nodes' worth, the fewest
    whose sum can be unmasked; each node adds Sk(mu / share). ``z`` = that noise's std / ``l2``.
    """

    bits: int  # ring width
    scale: float  # s: updates are multiplied by s before rounding
    clip: float  # C, in update units
    dim: int
    nodes: int  # nodes selected per round (the most that can be in a sum)
    share: int  # the fewest nodes in an unmasked sum
    mu: float
    l1: float
    l2: float

    @property
    def z(self) -> float:
        return math.sqrt(2 * self.mu) / self.l2

    def mu_with(self, k: int) -> float:
        """Total noise parameter of a sum of ``k`` nodes."""
        return self.mu * k / self.share

    def encode(self, delta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A clipped update (norm <= C) as ring elements (uint64 < 2^bits): scaled, rounded, noised."""
        v = np.asarray(delta, np.float64)
        norm = float(np.linalg.norm(v))
        if norm > self.clip * (1 + 1e-6):
            raise ValueError(f"update norm {norm:.6g} exceeds the clip norm {self.clip:g}; clip before encoding")
        x = conditional_round(v * self.scale, self.l2, rng) + skellam(v.size, self.mu / self.share, rng)
        return (x % (1 << self.bits)).astype(np.uint64)

    def decode_sum(self, total: np.ndarray) -> np.ndarray:
        """The ring sum back to floats: sum of the clipped updates plus noise / s (float64)."""
        t = np.asarray(total, np.int64)
        half = 1 << (self.bits - 1)
        signed = np.where(t >= half, t - (1 << self.bits), t)
        return signed.astype(np.float64) / self.scale

    def epsilon(self, mus: list[tuple[float, int]], delta: float) -> float:
        return skellam_epsilon(mus, self.l1, self.l2, delta)


def coding_for(bits: int, clip: float, dim: int, nodes: int, share: int, z: float) -> SkellamCoding:
    """The largest scale whose worst-case sum fits the signed ``bits``-bit ring; ``z`` = least noise std / l2.

    Raises:
        ValueError: if no scale >= 1 fits (too many nodes or too much noise for the ring).
    """
    if not 1 <= share <= nodes:
        raise ValueError(f"share must be in [1, nodes = {nodes}], got {share}")
    room = float(1 << (bits - 1))
    z_all = z * math.sqrt(nodes / share)  # noise of a sum of all n nodes
    scale = room / (clip * (nodes + TAIL_SIGMAS * z_all) * 1.01)
    while scale >= 1.0:
        l2 = rounded_l2(scale * clip, dim)
        if nodes * l2 + TAIL_SIGMAS * z_all * l2 < room:
            l1 = min(l2 * l2, math.sqrt(dim) * l2)
            return SkellamCoding(bits, scale, clip, dim, nodes, share, (z * l2) ** 2 / 2, l1, l2)
        scale *= 0.9
    raise ValueError(f"a {bits}-bit ring cannot hold {nodes} updates with noise multiplier {z:g}")


def z_for_target(target: float, delta: float, rounds: int, bits: int, clip: float, dim: int, nodes: int,
                 share: int) -> float:
    """The smallest z (to 0.5%) whose Skellam accounting keeps ``rounds`` rounds of the least noise
    within ``target``.

    Raises:
        ValueError: if even z = 1000 does not reach the target.
    """

    def eps(z: float) -> float:
        c = coding_for(bits, clip, dim, nodes, share, z)
        return c.epsilon([(c.mu, rounds)], delta)

    lo, hi = 0.05, 1.0
    while eps(hi) > target:
        lo, hi = hi, hi * 2
        if hi > 1000:
            raise ValueError(f"ε = {target:g} cannot be met in {rounds} rounds")
    while hi / lo > 1.005:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps(mid) <= target else (mid, hi)
    return hi


class SkellamLedger(History):
    """The composition of released sums under distributed DP: ``noise`` is the sum's Skellam mu."""

    kind = "skellam"

    def __init__(self, coding: SkellamCoding, delta: float) -> None:
        super().__init__(delta)
        self.coding = coding

    def epsilon(self, extra: tuple[float, float] | None = None) -> float:
        """ε so far, or if one more sum with noise parameter ``extra[0]`` were released."""
        mus = [(mu, n) for mu, _, n in self.history] + ([(float(extra[0]), 1)] if extra is not None else [])
        return self.coding.epsilon(mus, self.delta)
