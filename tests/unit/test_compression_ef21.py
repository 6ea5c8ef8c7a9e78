"""EF21: node and server keep the same estimate of each node's update, through lost replies too."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.compression.ef21 import R, ServerEF21, node_encode
from fedrl.compression.pipeline import stage
from fedrl.config import CompressionConfig

ST = stage(CompressionConfig(up="topk", fraction=0.1), "up")


def _round(server: ServerEF21, state: dict, delta: np.ndarray, rnd: int, deliver: bool = True) -> dict:
    c, used, kept = node_encode(delta, server.base(0), ST, np.random.default_rng(rnd), state, rnd)
    g = server.estimate(0, used, c)
    np.testing.assert_array_equal(g, kept["ef21.g"])  # both sides computed the same estimate
    if deliver:
        server.commit(0, g, rnd)
    return {**state, **kept}


def test_a_steady_update_is_learned_exactly_after_enough_rounds() -> None:
    server, state = ServerEF21(ST, 50), {}
    delta = np.random.default_rng(0).normal(size=50).astype(np.float32)
    for rnd in range(1, 11):  # top 5 of 50 a round: 10 rounds cover every coordinate
        state = _round(server, state, delta, rnd)
    np.testing.assert_allclose(server.g[0], delta, atol=1e-6)
    assert server.base(0) == 10 and int(state[R][0]) == 10


def test_a_lost_reply_falls_back_to_the_previous_round_then_resets() -> None:
    server, state = ServerEF21(ST, 50), {}
    rng = np.random.default_rng(1)
    for rnd in (1, 2):
        state = _round(server, state, rng.normal(size=50).astype(np.float32), rnd)
    state = _round(server, state, rng.normal(size=50).astype(np.float32), 3, deliver=False)
    assert server.base(0) == 2
    # The node still holds round 2's estimate as its previous one: no reset needed.
    c, used, _ = node_encode(np.zeros(50, np.float32), server.base(0), ST, rng, state, 4)
    assert used == 2
    # A node that knows neither round answers from zero, and the server follows.
    c, used, kept = node_encode(np.ones(50, np.float32), 2, ST, rng, {}, 4)
    assert used == -1
    np.testing.assert_array_equal(server.estimate(0, -1, c), kept["ef21.g"])


def test_server_refuses_a_base_it_never_announced() -> None:
    server = ServerEF21(ST, 50)
    c, _, _ = node_encode(np.ones(50, np.float32), -1, ST, np.random.default_rng(0), {}, 1)
    with pytest.raises(ValueError, match="round 7"):
        server.estimate(0, 7, c)


def test_server_state_round_trips_through_arrays() -> None:
    server, state = ServerEF21(ST, 50), {}
    _round(server, state, np.ones(50, np.float32), 3)
    other = ServerEF21(ST, 50)
    other.load_arrays(server.to_arrays())
    assert other.base(0) == 3
    np.testing.assert_array_equal(other.g[0], server.g[0])
