"""Gossip rounds with real local PPO training (the node's code path without Flower), through the wire codec."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.envs.make import make_vector_env
from fedrl.errors import ConfigError
from fedrl.flower import codec
from fedrl.model.layout import flatten
from fedrl.rl.train import NodeState, train_locally
from fedrl.server.federation import Federation
from fedrl.server.snapshot import restore, snapshot
from fedrl.storage.checkpoint import Checkpoint
from fedrl.topology import gossip
from fedrl.topology.gossip import Mix
from fedrl.wire import Reply

# Pinned: these tests check exact aggregation formulas on replies without observation statistics
# (the defaults turn normalization on and anneal the server step, issue 13).
SMALL = {"nodes.count": 4, "algo.local-steps": 256, "algo.num-envs": 4, "eval.episodes": 1, "algo.norm-obs": "off", "strategy.server-lr-end": -1}
GOSSIP = {"topology.name": "gossip"}


def _rounds(fed: Federation, states: list[dict[str, np.ndarray]], rounds: int, fail: tuple[int, int] | None = None
            ) -> None:
    """Run ``rounds`` rounds as the ClientApp would; ``fail = (round, node)`` makes that reply go missing."""
    cfg = fed.cfg
    for rnd in range(fed.round + 1, fed.round + rounds + 1):
        fed.begin_round(rnd)
        replies = []
        for n in fed.select(rnd):
            plan, dl = codec.decode_plan(codec.encode_plan(*fed.plan(n, rnd)))
            if isinstance(dl, Mix):
                weights = gossip.receive(dl, states[n], fed.models[0])
            else:
                assert dl.weights is not None
                weights = dl.weights
            envs = make_vector_env(cfg.env.id, [fed.variants[n]] * cfg.algo.num_envs, {})
            try:
                res = train_locally(fed.spec, weights, envs, cfg, plan, NodeState(states[n]))
            finally:
                envs.close()
            sent, kept = res.weights, {}
            if isinstance(dl, Mix):
                sent, kept = gossip.after_training(weights, res.weights, cfg.strategy.server_lr, rnd)
            states[n] = {**res.state.arrays, **kept}
            if fail != (rnd, n):
                replies.append(codec.decode_reply(codec.encode_reply(
                    Reply(n, sent, res.env_steps, res.obs_moments, {}))))
        fed.aggregate(replies, rnd)
        fed.note_delivery(rnd, [r.node for r in replies], [n for n in fed.select(rnd) if fail == (rnd, n)])
        fed.round = rnd


def test_gossip_on_the_complete_graph_is_fedavg() -> None:
    """Every node starts each round from the model FedAvg (server-lr 2, equal env steps) steps to.

    Equal up to float32 rounding: FedAvg adds lr x the mean update to the global model, gossip
    averages the nodes' stepped models; the sums differ in the last bit, and 3 rounds of real
    training stay within 1e-5."""
    star = Federation(from_run_config(SMALL))
    mesh = Federation(from_run_config({**SMALL, **GOSSIP, "topology.graph": "complete"}))
    _rounds(star, [{} for _ in range(4)], 3)
    _rounds(mesh, [{} for _ in range(4)], 3)
    for m in mesh.node_models():
        np.testing.assert_allclose(flatten(m), flatten(star.models[0]), atol=1e-5)
    assert mesh.rule.row_fields(mesh.round)["consensus_distance"] < 1e-5
    assert mesh.counters.bytes_up == star.counters.bytes_up == 0  # (bytes are counted by the Flower transport)


def test_ring_nodes_drift_apart_and_a_missed_reply_is_recovered() -> None:
    fed = Federation(from_run_config({**SMALL, **GOSSIP, "topology.graph": "ring"}))
    states: list[dict[str, np.ndarray]] = [{} for _ in range(4)]
    _rounds(fed, states, 1)
    assert fed.rule.row_fields(fed.round)["consensus_distance"] > 0
    _rounds(fed, states, 1, fail=(2, 1))  # node 1 trained in round 2 but its reply was lost
    assert fed.rule.relay.trained == [2, 1, 2, 2]
    plan = fed.plan(1, 3)[1]
    assert isinstance(plan, Mix) and plan.own is not None and plan.own_round == 1  # sent back: it holds round 2's
    assert isinstance(fed.plan(0, 3)[1], Mix) and fed.plan(0, 3)[1].own is None  # type: ignore[union-attr]
    _rounds(fed, states, 1)
    assert fed.rule.relay.trained == [3, 3, 3, 3]
    # the checkpoint keeps which round each node's model is from
    again = Federation(fed.cfg)
    ck = snapshot(fed, 0.0)
    restore(again, Checkpoint(ck.meta, ck.arrays))
    assert again.rule.relay.trained == [3, 3, 3, 3]
    for a, b in zip(again.node_models(), fed.node_models(), strict=True):
        np.testing.assert_array_equal(flatten(a), flatten(b))


@pytest.mark.parametrize(("over", "key"), [
    ({"topology.graph": "star"}, "topology.graph"),
    ({"topology.graph": "regular", "topology.degree": 1, "nodes.count": 6}, "topology.degree"),
    ({"strategy.name": "krum"}, "strategy.name"),
    ({"fraction-train": 0.5}, "fraction-train"),
    ({"privacy.mode": "central", "privacy.noise-multiplier": 1.0}, "privacy.mode"),
    ({"nodes.count": 1, "min-train-nodes": 1}, "nodes.count"),
])
def test_what_gossip_cannot_do_fails_before_round_1(over: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**SMALL, **GOSSIP, **over})
    assert err.value.key == key
