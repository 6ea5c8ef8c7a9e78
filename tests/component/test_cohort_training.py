"""A cohort trains each node as it would train alone (issue 16, item 2).

Eight nodes with different variants train 3 rounds twice: each alone (``train_locally`` on its
own envs) and all together (``Algorithm.train_cohort``: one batched env, one stacked policy).
Steps, episodes, learning rates, Adam step counts, env snapshots and metrics must agree; the
weights agree up to float rounding.

How close is "up to float rounding": a batched matmul sums in another order than ``addmm``, a
difference of one ulp, which training amplifies as it amplifies any rounding. Measured
(2026-12-02): starting the *same* single-node training from initial weights moved by one ulp
gives weights after 3 rounds that differ by up to 1.2e-5 (CartPole) and 2.4e-5 (Pendulum) in
relative L2 norm per tensor; the cohort path differs from the single path by 1.1e-5 and 3.5e-5.
So the test runs twice:

- in float64 (torch's default dtype set for the test; weights still cross rounds as float32
  arrays), where that rounding noise is ~1e-16, against the issue's bound of 1e-5. Measured
  (2026-12-04): the two paths' float32 weights are equal after every round (difference 0.0);
- in float32, what runs in production, against 1e-4: a few times the noise floor above, far
  below what any real difference in the algorithm (a wrong advantage, a missed clip, another
  random stream) does to the weights.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from fedrl.algorithms.base import CohortMember
from fedrl.config import from_run_config
from fedrl.envs.batched import make_batched_env
from fedrl.envs.spec import parse_vary, sample_variant
from fedrl.experiment import policy_spec
from fedrl.model.moments import Moments
from fedrl.registry.algorithms import get as algorithm
from fedrl.rl.networks import ActorCritic, get_weights, spec_for
from fedrl.rl.train import train_locally
from fedrl.wire import LocalPlan, NodeState

K, ROUNDS, ENVS = 8, 3, 4
TOLERANCE = {torch.float64: 1e-5, torch.float32: 1e-4}  # relative L2 norm per tensor: see the module doc
VARY = {"CartPole-v1": "length=linspace(0.3, 1.5); masscart=uniform(0.5, 2)",
        "Pendulum-v1": "g=linspace(8, 12); m=uniform(0.8, 1.2)"}


@pytest.fixture
def one_thread() -> object:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=[torch.float64, torch.float32], ids=["float64", "float32"])
def dtype(request: pytest.FixtureRequest) -> object:
    before = torch.get_default_dtype()
    torch.set_default_dtype(request.param)
    yield request.param
    torch.set_default_dtype(before)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(("env_id", "prox_mu", "center", "mirror", "floor"), [
    ("CartPole-v1", 0.0, True, False, 0.0), ("Pendulum-v1", 0.0, True, False, 0.0),
    ("CartPole-v1", 0.05, True, False, 0.0), ("CartPole-v1", 0.0, False, False, 0.0),
    ("CartPole-v1", 0.0, False, True, 0.0), ("Pendulum-v1", 0.0, False, True, 0.0),
    # an entropy floor so close to log 2 that the hinge acts on most states from the first update
    ("CartPole-v1", 0.0, True, False, 0.99)])
def test_a_cohort_trains_each_node_as_alone(env_id: str, prox_mu: float, center: bool, mirror: bool, floor: float,
                                            dtype: torch.dtype) -> None:
    cfg = from_run_config({"env.id": env_id, "env.vary": VARY[env_id], "nodes.count": K, "algo.local-steps": 256,
                           "algo.num-envs": ENVS, "num-server-rounds": ROUNDS, "ppo.target-kl": 0.02,
                           "algo.norm-obs-center": center, "algo.mirror": mirror, "ppo.ent-floor": floor})
    assert cfg.algo.norm_obs == "on"  # the statistics the nodes fold their observations into are in play
    variants = [sample_variant(parse_vary(cfg.env.vary), i, K, cfg.seed) for i in range(K)]
    spec = policy_spec(cfg, variants[0])  # with algo.mirror, the symmetric policy (fedrl.envs.symmetry)
    assert bool(spec.obs_mirror) is mirror and spec.hidden == (64, 64)
    torch.manual_seed(0)
    start = get_weights(ActorCritic(spec))
    assert next(ActorCritic(spec).parameters()).dtype == dtype
    alone_w, together_w = [start] * K, [start] * K
    alone_s, together_s = [NodeState({})] * K, [NodeState({})] * K
    moments = Moments.empty(spec.obs_dim)
    worst, held, stray = 0.0, 0.0, 0.0
    for rnd in range(1, ROUNDS + 1):
        plans = [LocalPlan(i, rnd, ROUNDS, cfg.seed, prox_mu, moments) for i in range(K)]
        alone = []
        for i in range(K):
            envs = make_batched_env(env_id, [variants[i]] * ENVS, {})
            alone.append(train_locally(spec, alone_w[i], envs, cfg, plans[i], alone_s[i]))
            envs.close()
        together = algorithm("ppo").train_cohort(
            cfg, spec, [CohortMember(together_w[i], plans[i], together_s[i], variants[i]) for i in range(K)], {})
        for a, b in zip(alone, together, strict=True):
            assert a.env_steps == b.env_steps
            assert sorted(a.state.arrays) == sorted(b.state.arrays)
            for key in ("train_episodes", "optimizer_steps", "lr", "epochs"):
                assert b.metrics[key] == pytest.approx(a.metrics[key], rel=1e-9), key
            assert b.metrics["train_return"] == pytest.approx(a.metrics["train_return"], rel=1e-6, nan_ok=True)
            np.testing.assert_array_equal(b.state.arrays["env.elapsed"], a.state.arrays["env.elapsed"])
            np.testing.assert_allclose(b.state.arrays["env.states"], a.state.arrays["env.states"], rtol=1e-3, atol=1e-4)
            for x, y in zip(a.weights, b.weights, strict=True):
                size, diff = float(np.linalg.norm(x)), float(np.linalg.norm(x - y))
                if mirror and size < 1e-3:
                    # The symmetric actor's biases get a gradient of 0 up to rounding: its output bias
                    # acts on no action's probability (a shift of every logit, or a part the mirror
                    # cancels), and with CartPole's mirror (every sign flipped) zero hidden biases are a
                    # stationary point. Adam turns that rounding-level gradient into steps of its own
                    # size, so in float32 each path's biases random-walk about 0 on their own (measured
                    # 2026-12-06, here and on CI: norms up to 1.6e-4 on either path after 3 rounds, a
                    # difference of 2.1e-4, about the sum of the two). What holds is that both paths
                    # stay at the stationary point; in float64 the walk is ~1e-12 and the two paths
                    # must agree to the tolerance.
                    if dtype == torch.float64:
                        held = max(held, diff)
                    else:
                        stray = max(stray, size, float(np.linalg.norm(y)))
                    continue
                worst = max(worst, diff / max(size, 1e-6))
        alone_w, together_w = [r.weights for r in alone], [r.weights for r in together]
        alone_s, together_s = [r.state for r in alone], [r.state for r in together]
        moments = Moments.empty(spec.obs_dim)
        for r in alone:  # the server's pooled statistics, as the next round's plan carries them
            if r.obs_moments is not None:
                moments = moments.merge(r.obs_moments)
        if not center:  # about zero, as the nodes folded them (algo.norm-obs-center = false)
            np.testing.assert_array_equal(moments.mean, np.zeros(spec.obs_dim))
    assert worst < TOLERANCE[dtype] and held < TOLERANCE[dtype], (worst, held)
    assert stray < 1e-3, stray  # float32: the stationary biases stayed at 0 on both paths
    # training happened: the weights moved far more than the tolerance
    flat = np.concatenate([w.ravel() for w in start])
    moved = np.concatenate([w.ravel() for w in alone_w[0]]) - flat
    assert float(np.linalg.norm(moved) / np.linalg.norm(flat)) > 100 * TOLERANCE[dtype]


def test_members_the_cohort_cannot_vectorize_train_alone() -> None:
    cfg = from_run_config({"env.id": "CartPole-v1", "nodes.count": 3, "algo.local-steps": 64, "algo.num-envs": 2})
    spec = spec_for(gym.make("CartPole-v1").observation_space, gym.make("CartPole-v1").action_space, (64, 64))
    torch.manual_seed(0)
    start = get_weights(ActorCritic(spec))
    plans = [LocalPlan(i, 1, 30, 0, 0.0, None) for i in range(3)]
    members = [CohortMember(start, plans[i], NodeState({}), {"length": 0.5 + 0.2 * i}, random_actions=(i == 1))
               for i in range(3)]
    got = algorithm("ppo").train_cohort(cfg, spec, members, {})
    envs = make_batched_env("CartPole-v1", [{"length": 0.7}] * 2, {})
    want = train_locally(spec, start, envs, cfg, plans[1], NodeState({}), random_actions=True)
    for x, y in zip(want.weights, got[1].weights, strict=True):
        np.testing.assert_array_equal(x, y)  # the random-action node trained alone, bit for bit
    assert [r.env_steps for r in got] == [64, 64, 64]
