"""An algorithm registered from this file only (REINFORCE, Williams 1992) runs a federation.

Nothing in fedrl knows REINFORCE: the test subclasses ``Algorithm``, registers it, and runs two
rounds with 8-bit quantized uplinks and central DP through the real ClientApp handler, wire
codec, server checks, aggregation and evaluation (``tests.inprocess``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import nn

from fedrl.algorithms import register, unregister
from fedrl.algorithms.base import Algorithm, TrainJob
from fedrl.checks.validate import check
from fedrl.config import Config, from_run_config
from fedrl.errors import ConfigError
from fedrl.rl.networks import PolicySpec, get_weights, set_weights
from fedrl.seeding import ENV_RESET, TRAIN, derive, torch_generator
from fedrl.server.federation import Federation
from fedrl.wire import LocalResult, NodeState
from tests.inprocess import run_rounds, task  # noqa: F401 - the fixture


class SoftmaxPolicy(nn.Module):
    """A linear softmax policy over discrete actions."""

    def __init__(self, spec: PolicySpec) -> None:
        super().__init__()
        self.logits = nn.Linear(spec.obs_dim, spec.action_dim)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits(obs).argmax(-1)


class Reinforce(Algorithm):
    """Monte-Carlo policy gradient with the return-to-go of each step, over the round's steps."""

    def make_model(self, spec: PolicySpec) -> nn.Module:
        if spec.action_kind != "discrete":
            raise ConfigError("algo.name", "reinforce here is for discrete actions")
        return SoftmaxPolicy(spec)

    def train(self, cfg: Config, job: TrainJob) -> LocalResult:
        model = self.make_model(job.spec)
        set_weights(model, job.weights)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch_generator(job.plan.seed, TRAIN, job.plan.node, job.plan.round)
        obs, _ = job.envs.reset(seed=derive(job.plan.seed, ENV_RESET, job.plan.node, job.plan.round))
        n_envs = job.envs.num_envs
        logps, rewards, dones = [], [], []
        for _ in range(cfg.algo.local_steps // n_envs):
            probs = torch.softmax(model.logits(torch.as_tensor(obs, dtype=torch.float32)), -1)
            action = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            logps.append(torch.log(probs.gather(-1, action[:, None]).squeeze(-1)))
            obs, reward, term, trunc, _ = job.envs.step(action.numpy())
            rewards.append(torch.as_tensor(reward, dtype=torch.float32))
            dones.append(torch.as_tensor(term | trunc, dtype=torch.float32))
        returns, acc = [], torch.zeros(n_envs)
        for r, d in zip(reversed(rewards), reversed(dones), strict=True):
            acc = r + 0.99 * acc * (1 - d)
            returns.append(acc)
        g = torch.stack(returns[::-1])
        g = (g - g.mean()) / (g.std() + 1e-8)
        loss = -(torch.stack(logps) * g).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps = len(rewards) * n_envs
        return LocalResult(get_weights(model), steps, None, NodeState({}), {"reinforce_loss": float(loss.detach())})


RUN = {"algo.name": "reinforce", "nodes.count": 3, "num-server-rounds": 2, "algo.local-steps": 128,
       "algo.num-envs": 4, "eval.episodes": 1, "compression.up": "quantize", "privacy.mode": "central",
       "privacy.clip-norm": 1.0, "privacy.noise-multiplier": 0.5, "strategy.server-lr": 1.0}


@pytest.fixture
def reinforce() -> Iterator[None]:
    register("reinforce", Reinforce())
    yield
    unregister("reinforce")


@pytest.mark.usefixtures("task")
def test_a_registered_algorithm_trains_a_compressed_private_federation(reinforce: None) -> None:
    check(RUN)  # the whole config, cross-key checks included, passes with the new name
    fed = Federation(from_run_config(RUN))
    assert fed.names == ["logits.weight", "logits.bias"]  # the algorithm's model, not PPO's
    start = [w.copy() for w in fed.models[0]]
    failures = run_rounds(fed, RUN, 2)
    assert failures == [{}, {}]  # every node's quantized reply passed the server's checks
    assert fed.counters.env_steps == 2 * 3 * 128
    moved = np.concatenate([(a - b).ravel() for a, b in zip(fed.models[0], start, strict=True)])
    assert np.all(np.isfinite(moved)) and np.abs(moved).max() > 0
    assert fed.epsilon() is not None and fed.epsilon() > 0  # central DP accounted both rounds
    returns = fed.evaluate_own()  # the algorithm's greedy policy on every variant
    assert len(returns) == 3 and all(r >= 1 for r in returns)


def test_an_unregistered_algorithm_name_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        from_run_config(RUN)
    assert err.value.key == "algo.name" and "allowed: ppo" in str(err.value)
