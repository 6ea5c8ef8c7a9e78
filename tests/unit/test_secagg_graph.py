"""The SecAgg+ neighbour graph: a Harary graph over a seeded permutation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrl.secagg.graph import neighbour_graph


@pytest.mark.parametrize(("n", "k"), [(5, 0), (5, 4), (5, 9), (6, 5), (2, 2), (3, 2)])
def test_complete_graph(n: int, k: int) -> None:
    nodes = list(range(10, 10 + n))
    assert neighbour_graph(nodes, k, 0) == {v: tuple(w for w in nodes if w != v) for v in nodes}


def test_single_node_has_no_neighbours() -> None:
    assert neighbour_graph([4], 0, 0) == {4: ()}


def test_harary_structure_exact() -> None:
    nodes = [3, 17, 5, 8, 21, 1, 13, 34, 2, 0]
    graph = neighbour_graph(nodes, 4, 7)
    ring = [int(v) for v in np.random.default_rng(7).permutation(np.array(sorted(nodes), dtype=np.int64))]
    n = len(ring)
    for i, v in enumerate(ring):
        expected = {ring[(i - 2) % n], ring[(i - 1) % n], ring[(i + 1) % n], ring[(i + 2) % n]}
        assert graph[v] == tuple(sorted(expected))


def test_deterministic_and_seed_dependent() -> None:
    nodes = list(range(20))
    assert neighbour_graph(nodes, 4, 1) == neighbour_graph(list(reversed(nodes)), 4, 1)
    assert neighbour_graph(nodes, 4, 1) != neighbour_graph(nodes, 4, 2)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(4, 60), half=st.integers(1, 30), seed=st.integers(0, 2**32 - 1))
def test_regular_symmetric_loop_free(n: int, half: int, seed: int) -> None:
    k = 2 * half
    nodes = list(range(0, 3 * n, 3))
    graph = neighbour_graph(nodes, k, seed)
    assert sorted(graph) == nodes
    degree = min(n - 1, k)
    for v, nb in graph.items():
        assert len(nb) == degree and len(set(nb)) == degree
        assert v not in nb and set(nb) <= set(nodes)
        assert all(v in graph[w] for w in nb)
        assert list(nb) == sorted(nb)


@pytest.mark.parametrize(
    ("nodes", "k"), [([0, 1, 2, 3, 4, 5], 3), ([0, 1, 2], -2), ([0, 0, 1], 0), ([-1, 2], 0), ([0, 1, 2], 1.0)]
)
def test_rejects(nodes: list[int], k: int) -> None:
    with pytest.raises(ValueError):
        neighbour_graph(nodes, k, 0)
