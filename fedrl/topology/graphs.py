"""Communication graphs for decentralized (gossip) averaging and their Metropolis-Hastings mixing weights.

Graphs are symmetric adjacency sets over nodes ``0..n-1`` (no self loops):

- ``ring``: i ~ i +- 1;
- ``torus``: a 2-D torus of r x c = n (r the largest divisor of n up to sqrt(n)), four neighbours;
- ``regular``: a random d-regular graph (pairing model, redrawn until simple), seeded;
- ``exponential``: i ~ i +- 2^k (mod n) for 2^k < n (static exponential graph, Ying et al. 2021);
- ``complete``: everyone;
- ``one-peer``: the time-varying one-peer exponential graph: in round t, i ~ i +- 2^(t mod ceil(log2 n)).

Metropolis-Hastings weights (Xiao and Boyd, 2004): ``W_ij = 1 / (1 + max(deg_i, deg_j))`` on an
edge, ``W_ii = 1 - sum_j W_ij``: symmetric and doubly stochastic on any graph, so repeated mixing
on a connected graph converges to the plain average.
"""

from __future__ import annotations

import math

import numpy as np

from fedrl.errors import ConfigError

GRAPHS = ("ring", "torus", "regular", "exponential", "complete", "one-peer")

Adjacency = list[set[int]]


def _from_pairs(n: int, pairs: list[tuple[int, int]]) -> Adjacency:
    adj: Adjacency = [set() for _ in range(n)]
    for a, b in pairs:
        if a != b:
            adj[a].add(b)
            adj[b].add(a)
    return adj


def graph(name: str, n: int, rnd: int = 1, degree: int = 4, seed: int = 0) -> Adjacency:
    """The adjacency of graph ``name`` on ``n`` nodes in round ``rnd`` (only ``one-peer`` varies).

    Raises:
        ConfigError: naming ``topology.graph`` or ``topology.degree`` for an unknown graph, an
            impossible degree, or a graph that is not connected.
    """
    if n < 2:
        raise ConfigError("nodes.count", f"gossip needs at least 2 nodes, got {n}")
    if name == "ring":
        adj = _from_pairs(n, [(i, (i + 1) % n) for i in range(n)])
    elif name == "torus":
        r = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
        c = n // r
        adj = _from_pairs(n, [(i * c + j, ((i + 1) % r) * c + j) for i in range(r) for j in range(c)]
                          + [(i * c + j, i * c + (j + 1) % c) for i in range(r) for j in range(c)])
    elif name == "regular":
        adj = _regular(n, degree, seed)
    elif name == "exponential":
        adj = _from_pairs(n, [(i, (i + 2 ** k) % n) for i in range(n) for k in range(max(1, math.ceil(math.log2(n))))
                              if 2 ** k < n])
    elif name == "complete":
        adj = [set(range(n)) - {i} for i in range(n)]
    elif name == "one-peer":
        k = (rnd - 1) % max(1, math.ceil(math.log2(n)))
        adj = _from_pairs(n, [(i, (i + 2 ** k) % n) for i in range(n)])
    else:
        raise ConfigError("topology.graph", f"unknown graph {name!r}; one of {', '.join(GRAPHS)}")
    if name != "one-peer" and not connected(adj):  # one-peer is connected over a period, not each round
        raise ConfigError("topology.graph", f"the {name} graph on {n} nodes is not connected")
    return adj


def _regular(n: int, d: int, seed: int) -> Adjacency:
    if not 1 <= d < n or (n * d) % 2:
        raise ConfigError("topology.degree", f"a {d}-regular graph on {n} nodes needs 1 <= d < n and n x d even")
    rng = np.random.default_rng([seed, 11])
    for _ in range(1000):
        stubs = rng.permutation(np.repeat(np.arange(n), d))
        pairs = [(int(a), int(b)) for a, b in stubs.reshape(-1, 2)]
        if all(a != b for a, b in pairs) and len({tuple(sorted(p)) for p in pairs}) == len(pairs):
            adj = _from_pairs(n, pairs)
            if connected(adj):
                return adj
    raise ConfigError("topology.degree", f"no connected simple {d}-regular graph on {n} nodes found in 1000 draws")


def connected(adj: Adjacency) -> bool:
    seen, todo = {0}, [0]
    while todo:
        for j in adj[todo.pop()]:
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return len(seen) == len(adj)


def metropolis_hastings(adj: Adjacency) -> np.ndarray:
    """The mixing matrix W (float64, symmetric, rows and columns summing to 1)."""
    n = len(adj)
    w = np.zeros((n, n), np.float64)
    for i in range(n):
        for j in adj[i]:
            w[i, j] = 1.0 / (1 + max(len(adj[i]), len(adj[j])))
    w[np.diag_indices(n)] = 1.0 - w.sum(axis=1)
    return w
