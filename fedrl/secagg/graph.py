"""The public neighbour graph of SecAgg+ (Bell et al., CCS 2020): a Harary graph H(n, k).

Nodes sit on a ring in a seeded random order and each is joined to the ``k/2`` nearest nodes
on either side. Bell et al. show that a random Harary graph with ``k = O(log n)`` keeps the
protocol's guarantees while each node talks to ``k`` peers instead of ``n - 1``. The graph is
public (the server and every client derive it from the same seed), so numpy's seeded RNG is fine.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def neighbour_graph(nodes: Iterable[int], k: int, seed: int) -> dict[int, tuple[int, ...]]:
    """Map each node to its sorted neighbours.

    ``k == 0`` or ``k >= n - 1`` gives the complete graph (plain SecAgg). Otherwise ``k`` must be
    even and every node has exactly ``k`` neighbours. The result is symmetric, has no self loops,
    and depends only on ``(sorted(nodes), k, seed)``.

    Raises:
        ValueError: on repeated or negative node ids, a negative ``k``, or an odd ``k < n - 1``.
    """
    ids = list(nodes)
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in ids):
        raise ValueError(f"nodes must be ints >= 0, got {ids!r}")
    ordered = sorted(int(v) for v in ids)
    if len(set(ordered)) != len(ordered):
        raise ValueError("nodes must be distinct")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    n = len(ordered)
    if k == 0 or k >= n - 1:
        return {v: tuple(w for w in ordered if w != v) for v in ordered}
    if k % 2:
        raise ValueError(f"k must be even when 0 < k < n - 1, got k={k} for n={n}")
    ring = [int(v) for v in np.random.default_rng(seed).permutation(np.array(ordered, dtype=np.int64))]
    half = int(k) // 2
    out: dict[int, tuple[int, ...]] = {}
    for i, v in enumerate(ring):
        # k < n - 1 with k even means offsets -half..half never meet around the ring: degree is exactly k.
        out[v] = tuple(sorted(ring[(i + d) % n] for d in range(-half, half + 1) if d))
    return out
