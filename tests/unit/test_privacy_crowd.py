"""The noise-to-signal ratio printed before round 1 (fedrl/privacy/crowd.py): exact values on small cases."""

from __future__ import annotations

import dataclasses

import pytest

from fedrl.config import from_run_config
from fedrl.privacy.crowd import central_ratio, crowd_line, gossip_ratio, local_ratio
from fedrl.privacy.plan import plan_for
from fedrl.topology.graphs import graph, metropolis_hastings

CARTPOLE = {"env.id": "CartPole-v1", "env.vary": "length=linspace(0.4, 1.2)"}


def test_central_noise_on_a_mean_shrinks_with_the_nodes_and_grows_with_the_edges() -> None:
    # z S sqrt(d) / (n C): 2 x 1 x 10 / 10
    assert central_ratio(2.0, 1.0, 1.0, dim=100, nodes=10) == pytest.approx(2.0)
    assert central_ratio(2.0, 1.0, 1.0, dim=100, nodes=20) == pytest.approx(1.0)
    assert central_ratio(2.0, 1.0, 1.0, dim=100, nodes=20, edges=2) == pytest.approx(2.0)  # each edge: 10 nodes
    assert central_ratio(2.0, 1.5, 1.0, dim=100, nodes=10) == pytest.approx(3.0)  # rounding slack counts


def test_local_noise_averages_over_the_square_root_of_the_nodes() -> None:
    assert local_ratio(1.0, dim=400, nodes=16) == pytest.approx(5.0)  # 20 / 4
    assert local_ratio(1.0, dim=400, nodes=16, edges=4) == pytest.approx(10.0)  # 20 / 2


def test_gossip_noise_is_the_worst_nodes_mixing_weight_norm() -> None:
    # complete graph on 4 nodes: every weight 1/4, a row's norm 1/2
    assert gossip_ratio(1.0, 100, metropolis_hastings(graph("complete", 4)).tolist()) == pytest.approx(5.0)
    # ring of 8: weights 1/3 on self and two neighbours, norm sqrt(1/3)
    assert gossip_ratio(1.0, 100, metropolis_hastings(graph("ring", 8)).tolist()) == pytest.approx(10 / 3 ** 0.5)


def test_the_line_warns_only_above_the_measured_bound() -> None:
    assert "expect little learning" in crowd_line(2.5, "x") and "2.5x" in crowd_line(2.5, "x")
    assert "expect little learning" not in crowd_line(1.9, "x")


def test_the_run_states_its_ratio_before_round_1() -> None:
    def note(**over: object) -> str:
        plan = plan_for(from_run_config({**CARTPOLE, **over}), continuous=False, dim=9155)
        assert plan is not None
        return plan.note

    # sqrt(9155) = 95.68: central, 8 nodes, z = 1 -> 11.96; local -> 95.68 / sqrt(8) = 33.83
    assert "about 12x" in note(**{"privacy.mode": "central", "privacy.noise-multiplier": 1.0})
    assert "about 33.8x" in note(**{"privacy.mode": "local", "privacy.noise-multiplier": 1.0})
    # hierarchical: 2 edges of 4 nodes -> 23.92; gossip on the 8-node exponential graph (degree 5, weights 1/6)
    assert "about 23.9x" in note(**{"privacy.mode": "central", "privacy.noise-multiplier": 1.0,
                                    "topology.name": "hierarchical", "topology.edges": 2})
    gossip = note(**{"privacy.mode": "local", "privacy.noise-multiplier": 0.01, "topology.name": "gossip",
                     "topology.graph": "exponential"})
    assert "about 0.391x" in gossip and "expect little learning" not in gossip  # 0.01 x 95.68 / sqrt(6)


def test_a_nodes_plan_is_the_servers_without_the_sentence() -> None:
    cfg = from_run_config({**CARTPOLE, "privacy.mode": "local", "privacy.noise-multiplier": 0.01,
                           "topology.name": "gossip", "topology.graph": "exponential"})
    server, node = plan_for(cfg, False, 9155), plan_for(cfg, False, 9155, crowd=False)
    assert server is not None and node is not None
    assert "noise" in server.note and server.note.startswith(node.note) and len(server.note) > len(node.note)
    assert dataclasses.replace(server, note=node.note) == node  # the same guarantee, only the note differs
