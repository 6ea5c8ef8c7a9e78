"""Gossip mixing: the node's and the server's mix, stale own models, consensus distance, relay plans."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.topology import gossip
from fedrl.topology.gossip import Mix, Relay, StaleModel


def _m(*values: float) -> list[np.ndarray]:
    return [np.asarray(values[:2], np.float32), np.asarray([values[2:]], np.float32)]


def test_mix_is_the_weighted_sum_of_own_and_peers() -> None:
    out = gossip.mix(0.5, _m(1, 2, 3), [(0.25, _m(3, 2, 1)), (0.25, _m(5, 6, 7))])
    np.testing.assert_array_equal(out[0], [2.5, 3.0])
    np.testing.assert_array_equal(out[1], [[3.5]])
    with pytest.raises(ValueError, match="shapes"):
        gossip.mix(0.5, _m(1, 2, 3), [(0.5, [np.zeros(2, np.float32)])])


def test_receive_takes_the_own_model_from_state_or_the_plan_and_refuses_a_stale_one() -> None:
    like = _m(0, 0, 0)
    state = gossip.after_training(_m(0, 0, 0), _m(2, 2, 2), 2.0, 3)[1]  # keeps 0 + 2 x (2 - 0) = 4
    peer = [(1, 0.5, _m(0, 0, 2))]
    np.testing.assert_array_equal(gossip.receive(Mix(0.5, 3, None, peer), state, like)[1], [[3.0]])
    np.testing.assert_array_equal(gossip.receive(Mix(0.5, 2, _m(2, 2, 2), peer), state, like)[1], [[2.0]])
    with pytest.raises(StaleModel, match="round-2 model, holds round 3"):
        gossip.receive(Mix(0.5, 2, None, peer), state, like)
    with pytest.raises(StaleModel):
        gossip.receive(Mix(1.0, 1, None, []), {}, like)
    with pytest.raises(ValueError, match="non-finite"):
        gossip.receive(Mix(float("nan"), 3, None, peer), state, like)


def test_consensus_distance() -> None:
    assert gossip.consensus_distance([_m(1, 2, 3), _m(1, 2, 3)]) == 0.0
    # two models 2 apart in one coordinate: each is 1 from the mean
    assert gossip.consensus_distance([_m(0, 0, 0), _m(2, 0, 0)]) == pytest.approx(1.0)


def test_the_relay_sends_own_models_only_when_the_node_may_not_hold_them() -> None:
    models = [_m(i, i, i) for i in range(4)]
    relay = Relay("ring", 4, 4, 0)
    first = relay.plan(0, 1, models, None)
    assert first.own is not None and first.peers == [] and first.self_weight == 1.0
    relay.trained = [1, 1, 1, 1]
    plan = relay.plan(0, 2, models, 1)  # node 0 replied in round 1: it holds its model
    assert plan.own is None and [j for j, _, _ in plan.peers] == [1, 3]
    assert plan.self_weight == pytest.approx(1 / 3) and all(w == pytest.approx(1 / 3) for _, w, _ in plan.peers)
    assert relay.plan(0, 2, models, None).own is not None  # its last reply failed: send it


def test_mixing_on_the_complete_graph_gives_every_node_the_average() -> None:
    rng = np.random.default_rng(0)
    models = [[rng.normal(size=(3, 2)).astype(np.float32)] for _ in range(8)]
    mixed = Relay("complete", 8, 4, 0).mixed(1, models)
    mean = np.mean([m[0].astype(np.float64) for m in models], axis=0)
    for m in mixed:
        np.testing.assert_allclose(m[0], mean, rtol=1e-6)
    assert gossip.consensus_distance(mixed) < 1e-6 < gossip.consensus_distance(models)


def test_after_training_steps_on_the_own_update() -> None:
    start, trained = _m(1, 1, 1), _m(1.5, 0.5, 1)
    out, state = gossip.after_training(start, trained, 2.0, 4)
    np.testing.assert_array_equal(out[0], [2.0, 0.0])
    np.testing.assert_array_equal(state[gossip.MODEL_KEY], [2.0, 0.0, 1.0])
    assert state[gossip.ROUND_KEY].tolist() == [4]
    same, _ = gossip.after_training(start, [np.float32(np.pi) * w for w in trained], 1.0, 4)
    np.testing.assert_array_equal(same[0], np.float32(np.pi) * trained[0])  # step 1: the trained model, bit for bit
