"""privacy.actor-share: the actor's and the critic's parts of an update clipped apart, within C together."""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest

from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.privacy.clipping import actor_critic_parts, clip_parts
from fedrl.privacy.node import privatize
from fedrl.privacy.plan import plan_for
from fedrl.privacy.server import ServerPrivacy
from fedrl.rl.networks import ActorCritic, spec_for, weight_names

CENTRAL = {"env.id": "CartPole-v1", "privacy.mode": "central", "privacy.noise-multiplier": 1.0,
           "privacy.clip-norm": 10.0, "privacy.actor-share": 0.36}
LAYOUT = [("critic.0.weight", 4), ("actor.0.weight", 2), ("log_std", 1), ("critic.2.bias", 3)]


def test_the_parts_are_the_actor_and_the_rest_at_the_square_roots_of_the_share() -> None:
    parts = actor_critic_parts(LAYOUT, 0.36)
    assert parts == ((((4, 6), (6, 7)), 0.6), (((0, 4), (7, 10)), 0.8))
    assert actor_critic_parts(LAYOUT, 0.0) == ()


def test_each_part_is_clipped_to_its_bound_and_a_part_within_it_is_untouched() -> None:
    parts = actor_critic_parts(LAYOUT, 0.36)
    # actor (indices 4, 5, 6): norm 10 > 6, scaled to 6; critic (0-3, 7-9): norm 5 <= 8, kept
    vec = np.array([0, 3, 0, 0, 6, 8, 0, 4, 0, 0], np.float32)
    out, norm = clip_parts(vec, 10.0, parts)
    assert norm == pytest.approx(math.sqrt(125.0))
    np.testing.assert_allclose(out[[4, 5, 6]], [3.6, 4.8, 0.0], rtol=2e-6)
    np.testing.assert_array_equal(out[[0, 1, 2, 3, 7, 8, 9]], vec[[0, 1, 2, 3, 7, 8, 9]])


def test_the_whole_update_stays_within_the_clip_norm() -> None:
    rng = np.random.default_rng(0)
    spec = spec_for(gym.make("CartPole-v1").observation_space, gym.make("CartPole-v1").action_space, (64, 64))
    model = ActorCritic(spec)
    layout = [(n, t.numel()) for n, t in zip(weight_names(model), model.state_dict().values(), strict=True)]
    for share in (0.1, 0.5, 0.9):
        parts = actor_critic_parts(layout, share)
        for scale in (0.01, 1.0, 100.0):
            out, _ = clip_parts(rng.standard_normal(sum(s for _, s in layout)) * scale, 0.3, parts)
            assert float(np.linalg.norm(out.astype(np.float64))) <= 0.3


def test_nodes_and_the_server_clip_by_parts() -> None:
    cfg = from_run_config(CENTRAL)
    plan = plan_for(cfg, continuous=False, dim=10, layout=LAYOUT)
    assert plan is not None and len(plan.parts) == 2
    vec = np.array([0, 3, 0, 0, 6, 8, 0, 4, 0, 0], np.float32)
    node, below = privatize(vec, plan)
    np.testing.assert_allclose(node[[4, 5]], [3.6, 4.8], rtol=2e-6)
    assert not below  # the whole update (norm 11.2) was above C = 10
    # the server clips again by the same parts: an update a node did not clip comes out as the node's would
    plain = ServerPrivacy(plan, 10)
    plain.plan = dataclasses.replace(plan, no_noise=True)
    np.testing.assert_allclose(plain.noised_mean([vec], 1, 1), node, rtol=1e-6)


@pytest.mark.parametrize(("over", "words"), [
    ({"privacy.adaptive-clip": True}, "adaptive-clip"),
    ({"privacy.audit-canaries": 4}, "audit-canaries"),
])
def test_a_split_is_refused_where_the_whole_norm_is_read(over: dict, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        plan_for(from_run_config({**CENTRAL, **over}), continuous=False, dim=10, layout=LAYOUT)
    assert err.value.key == "privacy.actor-share" and words in str(err.value)


def test_a_model_without_an_actor_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        plan_for(from_run_config(CENTRAL), continuous=False, dim=4, layout=[("q.0.weight", 4)])
    assert err.value.key == "privacy.actor-share" and "set it to 0" in str(err.value)


@pytest.mark.parametrize("value", [1.0, -0.1])
def test_a_share_outside_zero_to_one_names_the_key(value: float) -> None:
    with pytest.raises(ConfigError) as err:
        from_run_config({"privacy.actor-share": value})
    assert err.value.key == "privacy.actor-share" and "(0, 1)" in str(err.value)


def test_the_node_and_the_server_plan_the_same_parts_for_the_run_model() -> None:
    from fedrl.node.setup import node_setup
    from fedrl.server.federation import Federation

    cfg = from_run_config({**CENTRAL, "nodes.count": 4, "privacy.clip-norm": 0.3})
    node = node_setup(cfg).privacy
    server = Federation(cfg).privacy
    assert node is not None and server is not None
    assert node.parts == server.parts and len(node.parts) == 2
    actor = sum(b - a for a, b in node.parts[0][0])
    assert actor == 4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2  # the 64x64 actor's weights
