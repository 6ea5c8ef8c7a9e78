"""``topology.consensus-step = auto``: CHOCO-Gossip's consensus step γ chosen for the run's graph
and uplink compressor, before round 1, by the same rule on the server and on every node.

Why: γ must shrink as the compressor drops more (Koloskova, Stich and Jaggi, ICML 2019, Theorem 2:
γ of order ρ²δ, ρ the graph's spectral gap, δ the share of a vector's energy the compressor keeps),
and a γ that suits one compressor breaks another. Measured on heterogeneous CartPole (8 nodes, ring,
top-k 5%): γ = 1 left a variant at 75 (best model 248); 0.3 solved. The theorem's constant is far too
small to use (about 1e-3 for a ring of 8), so the step is measured instead: CHOCO's average consensus
(``fedrl.topology.choco``'s step, no training) on Gaussian vectors, with the run's mixing matrices and the
run's compressor, for each γ of :data:`GRID`; the γ with the smallest consensus error after
:data:`STEPS` steps wins (ties: the larger γ). The vectors and the compressor's randomness come from
fixed seeds, so the value depends only on the graph and the compressor: server and nodes agree.

Uncompressed gossip resolves to 1 (plain gossip, D-PSGD) without measuring.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from fedrl.compression.base import Compressor
from fedrl.compression.pipeline import stage
from fedrl.config import Config
from fedrl.config.features import CompressionConfig
from fedrl.topology import choco
from fedrl.topology.graphs import graph, metropolis_hastings

GRID = (1.0, 0.7, 0.5, 0.35, 0.25, 0.18, 0.125, 0.09, 0.06, 0.04, 0.025)
STEPS = 50
MAX_NODES = 32  # larger graphs are measured on the same family at this size (the rule is local)
BUDGET = 16_384  # nodes x coordinates simulated per step


def measure(weights: Callable[[int], np.ndarray], compress: Callable[[np.ndarray, np.random.Generator], np.ndarray],
            n: int, dim: int, gamma: float, steps: int = STEPS) -> float:
    """CHOCO's relative consensus error ``||x - mean(x)|| / ||x0 - mean(x0)||`` after ``steps``
    steps (``choco.consensus_round``, BLAS-free) from Gaussian ``x0`` (public copies from 0),
    ``weights(t)`` the mixing matrix of step t (1-based) and ``compress(v, rng)`` the decoded
    compression of ``v``; ``inf`` on divergence."""
    x = np.random.default_rng(0).standard_normal((n, dim))
    public = np.zeros_like(x)
    start = _distance(x)
    rng = np.random.default_rng(1)
    for t in range(1, steps + 1):
        x, public = choco.consensus_round(x, public, weights(t), lambda v, _i: compress(v, rng), gamma)
        if not np.all(np.isfinite(x)) or np.abs(x).max() > 1e6:
            return float("inf")
    return _distance(x) / start


def _distance(x: np.ndarray) -> float:
    """``||x - mean(x)||`` in float64 (``gossip.consensus_distance`` flattens models to float32)."""
    d = x - x.mean(axis=0)
    return float(np.sqrt(np.sum(d * d)))


def auto_step(graph_name: str, n: int, degree: int, seed: int, compressor: Compressor, n_params: int) -> float:
    """γ for ``topology.graph = graph_name`` over ``n`` nodes (``degree``, ``seed``: the graph's
    own settings) under ``compressor`` on a model of ``n_params`` parameters (see the module doc)."""
    if compressor.name == "none":
        return 1.0
    m = min(n, MAX_NODES)
    dim = max(1, min(n_params, BUDGET // m))
    mats: dict[int, np.ndarray] = {}

    def weights(t: int) -> np.ndarray:
        if t not in mats:  # time-varying graphs (one-peer) change with the round
            mats[t] = metropolis_hastings(graph(graph_name, m, t, degree, seed))
        return mats[t]

    def compress(v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return compressor.decode(compressor.encode(v.astype(np.float32), rng)).astype(np.float64)

    best, best_err = GRID[0], float("inf")
    for gamma in GRID:  # descending; stop once the error is twice the best seen (past the minimum)
        err = measure(weights, compress, m, dim, gamma)
        if err < best_err:
            best, best_err = gamma, err
        elif err > 2 * best_err:
            break
    return best


def step_for(cfg: Config, shapes: Sequence[tuple[int, ...]]) -> float:
    """``topology.consensus-step`` as a number: the configured one, or ``auto``'s (cached per graph,
    compression settings and model shapes; ``shapes``: the model's tensor shapes, for PowerSGD)."""
    t = cfg.topology
    if t.consensus_step.strip().lower() != "auto":
        return float(t.consensus_step)
    return _auto(t.graph, cfg.nodes.count, t.degree, cfg.seed, cfg.compression, tuple(map(tuple, shapes)))


@functools.lru_cache(maxsize=16)
def _auto(graph_name: str, n: int, degree: int, seed: int, cc: CompressionConfig,
          shapes: tuple[tuple[int, ...], ...]) -> float:
    up = stage(cc, "up", list(shapes), compensated=True)
    return auto_step(graph_name, n, degree, seed, up.compressor, int(sum(np.prod(s, dtype=np.int64) for s in shapes)))
