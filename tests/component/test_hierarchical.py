"""Hierarchical aggregation (HierFAVG): edge assignment, cloud rounds, and the reduction to FedAvg."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.model.layout import flatten, unflatten
from fedrl.server.federation import Federation
from fedrl.topology.hierarchy import assign_edges, cloud_average
from fedrl.wire import Reply

SMALL = {"nodes.count": 6, "algo.local-steps": 256, "eval.episodes": 1, "strategy.server-lr": 1.5}
HIER = {"topology.name": "hierarchical"}


def _rounds(fed: Federation, rounds: int, first: int = 1) -> None:
    rng = np.random.default_rng(first)
    for rnd in range(first, first + rounds):
        fed.begin_round(rnd)
        replies = []
        for n in fed.select(rnd):
            base = fed.sent(n)
            step = rng.normal(0, 0.01, fed.n_params).astype(np.float32)
            replies.append(Reply(n, unflatten(flatten(base) + step, base), int(rng.integers(200, 300)), None, {}))
        fed.aggregate(replies, rnd)
        fed.round = rnd


def test_one_edge_with_a_cloud_round_every_round_is_fedavg() -> None:
    star = Federation(from_run_config(SMALL))
    hier = Federation(from_run_config({**SMALL, **HIER, "topology.edges": 1, "topology.cloud-every": 1}))
    _rounds(star, 3)
    _rounds(hier, 3)
    np.testing.assert_array_equal(flatten(hier.server_model()), flatten(star.models[0]))


def test_edges_drift_apart_between_cloud_rounds_and_meet_at_them() -> None:
    fed = Federation(from_run_config({**SMALL, **HIER, "topology.edges": 2, "topology.cloud-every": 2}))
    assert fed.rule.edge_of == [0, 0, 0, 1, 1, 1]
    _rounds(fed, 1)
    assert not np.array_equal(flatten(fed.models[0]), flatten(fed.models[1])) and fed.rule.bytes_cloud == 0
    _rounds(fed, 1, first=2)  # round 2 is a cloud round: every edge takes the average
    np.testing.assert_array_equal(flatten(fed.models[0]), flatten(fed.models[1]))
    np.testing.assert_array_equal(flatten(fed.models[0]), flatten(fed.server_model()))
    assert fed.rule.bytes_cloud == 2 * 2 * 4 * fed.n_params


def test_edge_assignments() -> None:
    v = [{"length": x} for x in (0.4, 1.2, 0.5, 1.1, 0.45, 1.15)]
    assert assign_edges("contiguous", v, 3, 0) == [0, 0, 1, 1, 2, 2]
    labels = assign_edges("cluster", v, 2, 0)
    assert labels[0] == labels[2] == labels[4] != labels[1] == labels[3] == labels[5]
    assert assign_edges("1,0,1,0,1,0", v, 2, 0) == [1, 0, 1, 0, 1, 0]
    for how, edges, key in (("0,1", 2, "topology.assign"), ("0,0,0,0,0,0", 2, "topology.assign"),
                            ("contiguous", 7, "topology.edges"), ("edges", 2, "topology.assign")):
        with pytest.raises(ConfigError) as err:
            assign_edges(how, v, edges, 0)
        assert err.value.key == key


def test_cloud_average_weighs_edges_by_their_nodes() -> None:
    a, b = [np.zeros(2, np.float32)], [np.ones(2, np.float32)]
    np.testing.assert_allclose(cloud_average([a, b], [1, 3])[0], [0.75, 0.75])
    np.testing.assert_array_equal(cloud_average([b], [5])[0], b[0])


@pytest.mark.parametrize(("over", "key"), [
    ({"topology.edges": 7}, "topology.edges"),
    ({"strategy.name": "fedadam"}, "strategy.name"),
    ({"secagg.enabled": True, "compression.up": "quantize", "topology.edge-rule": "median"}, "topology.edge-rule"),
    ({"secagg.enabled": True, "compression.up": "quantize", "privacy.mode": "distributed",
      "privacy.noise-multiplier": 1.0}, "privacy.mode"),
    ({"secagg.enabled": True, "compression.up": "quantize", "topology.edges": 5, "topology.assign": "0,0,1,2,3,4"},
     "topology.assign"),
    ({"privacy.mode": "central", "privacy.noise-multiplier": 1.0, "topology.edge-rule": "median"},
     "topology.edge-rule"),
    ({"privacy.mode": "central", "privacy.noise-multiplier": 1.0, "privacy.adaptive-clip": True},
     "privacy.adaptive-clip"),
])
def test_what_hierarchical_does_not_combine_with_fails_before_round_1(over: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**SMALL, **HIER, **over})
    assert err.value.key == key


def _one_round_with_a_liar(over: dict) -> Federation:
    """Round 1 on 6 nodes in 2 edges; node 0 (edge 0) sends +100 everywhere, the rest +0.01."""
    fed = Federation(from_run_config({**SMALL, **HIER, "topology.edges": 2, "topology.cloud-every": 2, **over}))
    fed.begin_round(1)
    replies = [Reply(n, [w + np.float32(100.0 if n == 0 else 0.01) for w in fed.sent(n)], 256, None, {})
               for n in fed.select(1)]
    fed.aggregate(replies, 1)
    return fed


def test_each_tier_uses_its_own_rule() -> None:
    w0 = flatten(Federation(from_run_config({**SMALL, **HIER})).models[0])
    plain = _one_round_with_a_liar({})
    robust = _one_round_with_a_liar({"topology.edge-rule": "median"})
    # edge 0's FedAvg step takes a third of the liar's +100 (x server-lr 1.5); its median takes +0.01
    np.testing.assert_allclose(flatten(plain.models[0]) - w0, 1.5 * (100 + 0.02) / 3, rtol=1e-4)
    np.testing.assert_allclose(flatten(robust.models[0]) - w0, 1.5 * 0.01, atol=1e-5)
    np.testing.assert_array_equal(flatten(robust.models[1]), flatten(plain.models[1]))  # edge 1 is honest
    # the cloud: with 3 edges and cloud-rule median, one wild edge does not move the cloud model
    three = Federation(from_run_config({**SMALL, **HIER, "topology.edges": 3, "topology.cloud-rule": "median"}))
    base = [flatten(m) for m in three.models]
    three.rule.models = [unflatten(b + np.float32(s), three.models[0]) for b, s in zip(base, (0.0, 0.1, 50.0), strict=True)]
    np.testing.assert_allclose(flatten(three.server_model()) - base[0], 0.1, atol=1e-6)


@pytest.mark.parametrize(("over", "key"), [
    ({"topology.edge-rule": "krum", "attack.name": "sign-flip", "attack.nodes": "0"}, "attack.nodes"),
    ({"topology.edge-rule": "median", "strategy.byzantine": 2}, "strategy.byzantine"),
    ({"topology.cloud-rule": "trimmed-mean", "strategy.trim": 0.5}, "strategy.trim"),
])
def test_per_tier_rules_that_cannot_tolerate_their_attackers_fail_before_round_1(over: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**SMALL, **HIER, "topology.edges": 2, **over})
    assert err.value.key == key
