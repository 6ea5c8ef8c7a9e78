"""A stacked policy samples each node's actions as that node's own ``ActorCritic`` would.

``StackedActorCritic.sample`` does not call ``torch.multinomial``: it reproduces its one-sample
algorithm (Exp(1) draws, then argmax of p / q) batched over nodes. If torch changes that
algorithm, these tests fail and say so, rather than the cohort path drifting from the single one.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from fedrl.rl.networks import ActorCritic, get_weights, spec_for
from fedrl.rl.stacked import StackedActorCritic


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "Pendulum-v1"])
def test_each_node_draws_the_actions_and_stream_it_would_alone(env_id: str) -> None:
    probe = gym.make(env_id)
    spec = spec_for(probe.observation_space, probe.action_space, (16, 16))
    k, envs, steps = 5, 3, 50
    torch.manual_seed(1)
    nets = [ActorCritic(spec) for _ in range(k)]
    stacked = StackedActorCritic(spec, [get_weights(n) for n in nets])
    alone = [torch.Generator().manual_seed(100 + j) for j in range(k)]
    together = [torch.Generator().manual_seed(100 + j) for j in range(k)]
    changed = 0
    for _ in range(steps):
        obs = torch.randn(k, envs, spec.obs_dim)
        with torch.no_grad():
            mine = [nets[j].sample(obs[j], alone[j]) for j in range(k)]
            action, logp = stacked.sample(obs, together)
        for j, (a, lp) in enumerate(mine):
            if spec.action_kind == "discrete":
                assert torch.equal(action[j], a), "the stacked draw differs from torch.multinomial alone"
            else:  # mean + std * noise: the same noise, the mean up to a batched matmul's rounding
                torch.testing.assert_close(action[j], a, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(logp[j], lp, rtol=1e-5, atol=1e-5)
        changed += int(not torch.equal(action[0], action[-1]))
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(alone, together, strict=True))
    assert changed > 0  # the nodes' draws are not all alike
