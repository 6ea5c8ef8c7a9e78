"""Gossip graphs: their shapes, connectivity checks, and Metropolis-Hastings mixing matrices."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.errors import ConfigError
from fedrl.topology.graphs import GRAPHS, connected, graph, metropolis_hastings


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("n", [2, 5, 8, 9, 16])
def test_every_mixing_matrix_is_symmetric_and_doubly_stochastic(name: str, n: int) -> None:
    if name == "regular" and n < 5:
        pytest.skip("a 4-regular graph needs 5 nodes")
    for rnd in (1, 2, 3):
        w = metropolis_hastings(graph(name, n, rnd, degree=4))
        np.testing.assert_array_equal(w, w.T)
        np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-12)
        np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
        assert np.all(w >= 0)


def test_graph_shapes_by_hand() -> None:
    assert graph("ring", 5) == [{1, 4}, {0, 2}, {1, 3}, {2, 4}, {3, 0}]
    assert graph("exponential", 8)[0] == {1, 2, 4, 7, 6}  # 0 +- 1, 2, 4 (mod 8)
    assert graph("torus", 9)[4] == {1, 7, 3, 5}  # 3 x 3: up, down, left, right
    assert [graph("one-peer", 8, r)[0] for r in (1, 2, 3, 4)] == [{1, 7}, {2, 6}, {4}, {1, 7}]
    assert all(len(nb) == 4 for nb in graph("regular", 10, degree=4, seed=3))
    assert graph("complete", 4)[2] == {0, 1, 3}


def test_metropolis_hastings_by_hand() -> None:
    # path 0 - 1 - 2: degrees 1, 2, 1: W01 = W12 = 1/3; W00 = W22 = 2/3; W11 = 1/3
    w = metropolis_hastings([{1}, {0, 2}, {1}])
    np.testing.assert_allclose(w, [[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]])
    np.testing.assert_allclose(metropolis_hastings(graph("complete", 5)), np.full((5, 5), 0.2))


def test_bad_graphs_are_refused_with_the_key() -> None:
    for kwargs, key in (({"name": "star", "n": 5}, "topology.graph"),
                        ({"name": "regular", "n": 5, "degree": 3}, "topology.degree"),
                        ({"name": "regular", "n": 5, "degree": 5}, "topology.degree"),
                        ({"name": "ring", "n": 1}, "nodes.count")):
        with pytest.raises(ConfigError) as err:
            graph(**kwargs)  # type: ignore[arg-type]
        assert err.value.key == key
    assert not connected([{1}, {0}, {3}, {2}])
