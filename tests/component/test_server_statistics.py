"""``algo.norm-obs = server``: the server gathers observation statistics from its own rollouts of the
global policy on public variants; nodes normalize with them and send none."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedrl.checks.validate import check
from fedrl.config import DEFAULTS, from_run_config
from fedrl.errors import ConfigError
from fedrl.model.moments import Moments
from fedrl.node import RoundStart, build_pipeline, node_setup
from fedrl.rl.networks import ActorCritic
from fedrl.rl.obs_stats import rollout_moments
from fedrl.server.federation import Federation
from fedrl.wire import NodeState

SERVER = {**DEFAULTS, "nodes.count": 4, "algo.local-steps": 64, "algo.num-envs": 2, "num-server-rounds": 2,
          "eval.episodes": 1, "algo.norm-obs": "server", "env.vary": "length=linspace(0.4, 1.2)"}


def _moments(fed: Federation, rnd: int, steps: int = 40) -> Moments:
    variants = fed.variants[:3]
    return rollout_moments(fed.spec, fed.models[0], Moments.empty(fed.spec.obs_dim), "CartPole-v1", variants, {},
                           steps, 7, rnd, ActorCritic)


def test_a_rollout_counts_each_step_of_each_variant_and_replays_exactly() -> None:
    fed = Federation(from_run_config(SERVER))
    a, b, c = _moments(fed, 1), _moments(fed, 1), _moments(fed, 2)
    assert a.count == 3 * 40  # the reset observations count, as on a node
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.m2, b.m2)
    assert not np.array_equal(a.mean, c.mean)  # another round, other resets and action samples
    assert np.all(a.var > 0) and np.all(np.abs(a.mean) < 1.0)  # CartPole starts near 0 and moves


def test_the_server_merges_its_rollouts_each_round_and_plans_carry_them() -> None:
    fed = Federation(from_run_config(SERVER))
    assert fed.obs_from_server and fed.moments[0] is not None and fed.moments[0].count == 0
    fed.begin_round(1)
    first = fed.moments[0]
    assert first.count == 2 * 64  # algo.num-envs variants x algo.local-steps steps
    assert fed.plan(3, 1)[0].obs_moments is first
    fed.begin_round(2)
    assert fed.moments[0].count == 2 * 2 * 64


def test_uncentred_server_statistics_are_the_rollouts_second_moments_about_zero() -> None:
    # algo.norm-obs-center = false: the same rollouts, kept about zero, so a mean that follows a
    # drifting policy never shifts what the policy sees
    fed = Federation(from_run_config({**SERVER, "algo.norm-obs-center": False}))
    centred = _moments(fed, 1)
    m = rollout_moments(fed.spec, fed.models[0], Moments.empty(fed.spec.obs_dim), "CartPole-v1", fed.variants[:3], {},
                        40, 7, 1, ActorCritic, center=False)
    assert m.count == centred.count
    np.testing.assert_array_equal(m.mean, np.zeros(fed.spec.obs_dim))
    np.testing.assert_allclose(m.m2, centred.m2 + centred.count * centred.mean**2, rtol=1e-9)
    fed.begin_round(1)
    fed.begin_round(2)
    np.testing.assert_array_equal(fed.moments[0].mean, np.zeros(fed.spec.obs_dim))


def test_nodes_send_no_statistics_and_one_that_does_is_left_out() -> None:
    cfg = from_run_config(SERVER)
    fed = Federation(cfg)
    fed.begin_round(1)
    plan, downlink = fed.plan(0, 1)
    reply = build_pipeline(node_setup(cfg), 0).run(RoundStart(plan, downlink, NodeState({}))).reply()
    assert reply.obs_moments is None and reply.env_steps == 64
    assert fed.validate(reply, 0) is None
    lying = dataclasses.replace(reply, obs_moments=Moments.of(np.zeros((64, fed.spec.obs_dim))))
    assert "sent observation statistics, but nodes send none" in str(fed.validate(lying, 0))
    fed.aggregate([reply], 1)
    assert fed.moments[0].count == 2 * 64  # the node's observations did not enter


@pytest.mark.parametrize(("over", "key"), [
    ({"topology.name": "gossip"}, "algo.norm-obs"),
    ({"strategy.name": "local"}, "algo.norm-obs"),
    ({"privacy.dpsgd": True}, "algo.norm-obs"),
    ({"algo.name": "dqn"}, "algo.norm-obs"),
])
def test_server_statistics_are_refused_where_there_is_no_one_global_model(over: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        check({**SERVER, **over})


def test_server_statistics_pass_with_secure_aggregation_and_central_dp() -> None:
    cfg = check({**SERVER, "secagg.enabled": True, "compression.up": "quantize", "privacy.mode": "central",
                 "privacy.target-epsilon": 8.0})
    assert cfg.algo.norm_obs == "server"


def test_under_a_hierarchy_every_edge_gets_the_statistics_of_the_cloud_models_rollouts() -> None:
    cfg = check({**SERVER, "topology.name": "hierarchical", "topology.edges": 2, "topology.cloud-every": 2,
                 "secagg.enabled": True, "compression.up": "quantize", "privacy.mode": "central",
                 "privacy.target-epsilon": 8.0})
    fed = Federation(cfg)
    assert fed.obs_from_server and len(fed.moments) == 2
    fed.begin_round(1)
    first = fed.moments[0]
    assert first.count == 2 * 64 and fed.moments[1] is first
    # the rollouts are of the cloud model (here still the initial one, shared by both edges)
    expected = fed.evaluation.observe(fed.server_model(), Moments.empty(fed.spec.obs_dim), 1)
    np.testing.assert_array_equal(first.mean, expected.mean)
    np.testing.assert_array_equal(first.m2, expected.m2)
    edge_of = fed.rule.edge_of  # type: ignore[attr-defined]
    assert {edge_of[0], edge_of[3]} == {0, 1}
    assert fed.plan(0, 1)[0].obs_moments is first and fed.plan(3, 1)[0].obs_moments is first
    # after the edges diverge (no cloud step in round 1), the next rollouts are of the cloud average
    fed.rule.models[1] = [w + 0.05 for w in fed.rule.models[1]]
    cloud = fed.server_model()
    fed.begin_round(2)
    again = first.merge(fed.evaluation.observe(cloud, first, 2))
    np.testing.assert_array_equal(fed.moments[1].m2, again.m2)
    assert fed.moments[0] is fed.moments[1] and fed.moments[0].count == 2 * 2 * 64
