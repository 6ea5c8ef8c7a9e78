"""CHOCO-Gossip (``fedrl.topology.choco``): compressed gossip reaches consensus on fixed vectors and
keeps their average; without public copies it does not; its start and copy arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.aggregation.fedavg import apply_delta
from fedrl.compression import make_compressor
from fedrl.topology import choco, gossip
from fedrl.topology.gossip import Mix
from fedrl.topology.graphs import graph, metropolis_hastings

RING = metropolis_hastings(graph("ring", 8, 1, 4, 0))


def _decoded(name: str, **knobs: object):  # type: ignore[no-untyped-def]
    comp = make_compressor(name, **knobs)  # type: ignore[arg-type]
    rng = np.random.default_rng(1)
    return lambda v, i: comp.decode(comp.encode(v.astype(np.float32), rng))


def _spread(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.sum((x - x.mean(axis=0)) ** 2, axis=1))))


@pytest.mark.parametrize(("name", "knobs", "gamma"), [("quantize", {"bits": 4}, 1.0),
                                                      ("topk", {"fraction": 0.1}, 0.3)])
def test_compressed_gossip_reaches_consensus_on_the_average(name: str, knobs: dict, gamma: float) -> None:
    x0 = np.random.default_rng(0).standard_normal((8, 200))
    x, public = x0.copy(), np.zeros_like(x0)
    compress = _decoded(name, **knobs)
    for _ in range(400):
        x, public = choco.consensus_round(x, public, RING, compress, gamma)
    assert _spread(x) < 1e-8 * _spread(x0)
    np.testing.assert_allclose(x.mean(axis=0), x0.mean(axis=0), atol=1e-12)  # the average never moves
    np.testing.assert_allclose(x, np.broadcast_to(x0.mean(axis=0), x.shape), atol=1e-8)


def test_without_public_copies_compressed_gossip_stalls() -> None:
    """Mixing compressed models directly (no error compensation) keeps the nodes apart: top-k drops
    the same small coordinates every time."""
    x0 = np.random.default_rng(0).standard_normal((8, 200))
    x, compress = x0.copy(), _decoded("topk", fraction=0.1)
    for _ in range(400):
        q = np.stack([compress(x[i], i) for i in range(8)]).astype(np.float64)
        x = x + 0.3 * (RING @ q - q)
    assert _spread(x) > 0.1 * _spread(x0)


def test_the_start_is_plain_gossip_without_compression_and_the_choco_step_with_it() -> None:
    like = [np.zeros((1,), np.float32)]
    state = {gossip.MODEL_KEY: np.array([4.0], np.float32), gossip.ROUND_KEY: np.array([3])}
    m = Mix(0.5, 3, None, [(1, 0.5, [np.array([2.0], np.float32)])])
    assert gossip.receive(m, state, like)[0].tolist() == [3.0]  # 0.5 * 4 + 0.5 * 2
    # with a public copy of 1: 4 + 0.5 * ((0.5 * 1 + 0.5 * 2) - 1) = 4.25
    with_public = {**state, choco.PUBLIC_KEY: np.array([1.0], np.float32)}
    weights, public = gossip.receive_public(m, with_public, like, 0.5)
    assert (weights[0].tolist(), public[0].tolist()) == ([4.25], [1.0])
    # gamma alone, no public copy: 4 + 0.5 * (3 - 4) = 3.5
    assert gossip.receive(m, state, like, 0.5)[0].tolist() == [3.5]
    # a plan that sends the node's model resets both its model and its public copy to it
    sent = Mix(0.5, 3, [np.array([6.0], np.float32)], m.peers)
    weights, public = gossip.receive_public(sent, with_public, like, 0.5)
    assert (weights[0].tolist(), public[0].tolist()) == ([5.0], [6.0])  # 6 + 0.5 * (4 - 6)


def test_a_public_copy_advances_as_the_server_applies_an_update() -> None:
    rng = np.random.default_rng(3)
    public = [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)]
    decoded = [rng.standard_normal((3, 4)).astype(np.float32) * 1e-3, rng.standard_normal(4).astype(np.float32)]
    for a, b in zip(choco.advance(public, decoded), apply_delta(public, decoded, 1.0), strict=True):
        assert a.dtype == np.float32 and a.tobytes() == b.tobytes()
