"""Topologies beyond the star end to end through Flower's Simulation Engine."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.e2e.harness import LocalFlower

pytestmark = pytest.mark.slow


def test_hierarchical_with_secure_aggregation_per_edge_solves_heterogeneous_cartpole(flower: LocalFlower,
                                                                                     tmp_path: Path) -> None:
    """Each edge sums its own nodes' 8-bit codes in a SecAgg+ session of its own; the edge <-> cloud tier
    moves float32 models."""
    summary, rows = flower.solve("topology.name='hierarchical' topology.edges=2 topology.cloud-every=2 eval.every=2 "
                                 "eval.episodes=3 eval.stop-at-target=true nodes.cohort-size=4 "
                                 "secagg.enabled=true compression.up='quantize'", tmp_path / "runs", "h", timeout=900)
    # every second round each of the 2 edges sends its model up and gets the cloud's back (float32)
    assert all(r["bytes_cloud"] == (r["round"] // 2) * 2 * 2 * 4 * 9155 for r in rows), rows
    # each node's masked input is packed at the ring's width (8-bit codes plus room for the sum), far below float32
    ring = len(rows) * 8 * 9155 * rows[0]["secagg_bits"] / 8
    assert ring < summary["bytes_up_total"] < len(rows) * 8 * 9155 * 4 / 2, (summary["bytes_up_total"], ring)
    assert summary["bytes_cloud_total"] == rows[-1]["bytes_cloud"]
    # one session per edge (contiguous: nodes 0-3 and 4-7), each unmasked on its own
    for r in rows:
        assert set(r["secagg_edges"]) == {"0", "1"} and r["secagg_aborted"] is None, r
        assert all(e["nodes"] == 4 and e["survivors"] == 4 and e["aborted"] is None
                   for e in r["secagg_edges"].values()), r
        assert r["nodes_trained"] == list(range(8))


# One case keeps CI short: plain gossip on the ring is checked in-process (tests/component/
# test_gossip_round.py, test_golden_inprocess.py); through the engine, compressed gossip covers its path.
@pytest.mark.parametrize(("graph", "up"), [("exponential", "quantize")])
def test_gossip_solves_heterogeneous_cartpole_on_every_node(flower: LocalFlower, tmp_path: Path, graph: str,
                                                            up: str) -> None:
    """No global model: the worst node's mixed model, on its own variant, reaches 475; nodes send
    8-bit codes of the change to their public copies (CHOCO)."""
    # One message per node (no cohorts): the bytes below count every node's relayed neighbours.
    summary, rows = flower.solve(f"topology.name='gossip' topology.graph='{graph}' compression.up='{up}' "
                                 "eval.episodes=3 eval.stop-at-target=true", tmp_path / "runs", "g", timeout=900)
    assert all(r["consensus_distance"] >= 0 for r in rows) and len(summary["eval_cross"]) == 8
    # each round every node gets its neighbours' float32 models: at least degree x 9,155 x 4 bytes
    degree = {"ring": 2, "exponential": 5}[graph]
    assert all(r2["bytes_down"] - r1["bytes_down"] > 8 * degree * 9155 * 4 for r1, r2 in itertools.pairwise(rows))
    up_per_round = [r2["bytes_up"] - r1["bytes_up"] for r1, r2 in itertools.pairwise(rows)]
    if up == "quantize":  # 1 byte a weight, against 4
        assert all(8 * 9155 < b < 8 * 9155 * 4 / 3 for b in up_per_round), up_per_round
    else:
        assert all(b > 8 * 9155 * 4 for b in up_per_round), up_per_round


def test_fedbuff_solves_heterogeneous_cartpole_with_slow_nodes(flower: LocalFlower, tmp_path: Path) -> None:
    """No round barrier: 8 SuperNodes, nodes 1.0x to 2.0x slow, a server step every 4 updates, 8-bit uplinks
    (a compressed reply lands as base + its decoded update)."""
    summary, rows = flower.solve("strategy.name='fedbuff' strategy.buffer=4 nodes.speed='linspace(1, 2)' "
                                 "compression.up='quantize' compression.bits=8 "
                                 "num-server-rounds=60 eval.every=2 eval.episodes=3 eval.stop-at-target=true",
                                 tmp_path / "runs", "b", supernodes=8, timeout=900)
    assert all(len(r["nodes_trained"]) == 4 == len(r["staleness"]) for r in rows)
    assert any(t > 0 for r in rows for t in r["staleness"])  # updates did land on newer versions
    assert summary["env_steps_total"] >= 4 * 1024 * len(rows)
    assert summary["bytes_up_total"] < summary["bytes_down_total"] / 3  # 8-bit codes up, float32 models down
