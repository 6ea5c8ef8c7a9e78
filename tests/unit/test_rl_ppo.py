"""Unit tests for fedrl.rl.ppo (proximal term, update) and a component test of
fedrl.rl.train.train_locally on CartPole-v1 (4 sub-envs, 256 env steps per round)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch

from fedrl.config import Config, from_run_config
from fedrl.envs.make import make_vector_env
from fedrl.rl.networks import ActorCritic, PolicySpec, get_weights, set_weights, spec_for
from fedrl.rl.ppo import PPOHyper, Proximal, ppo_update, proximal_term
from fedrl.rl.rollout import Rollout
from fedrl.rl.train import LocalPlan, LocalResult, NodeState, train_locally


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    # These models are tiny: intra-op threads only add spin-waiting, which makes the module
    # many times slower on a busy machine. Restored afterwards.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- proximal_term ----------------------------------------------------------------------------

TINY = PolicySpec(2, "discrete", 2, (3,))
# parameters: critic 2*3 + 3 + 3*1 + 1 = 13, actor 2*3 + 3 + 3*2 + 2 = 17 -> 30 scalars
N_TINY = 30


def _tiny_model(fill: float) -> ActorCritic:
    m = ActorCritic(TINY)
    set_weights(m, [np.full(a.shape, fill, np.float32) for a in get_weights(m)])
    return m


def test_tiny_model_has_thirty_parameters() -> None:
    assert sum(p.numel() for p in _tiny_model(0.0).parameters()) == N_TINY


def test_proximal_term_exact_value_and_gradient() -> None:
    model = _tiny_model(0.0)
    anchor = [torch.full_like(p, 2.0) for p in model.parameters()]
    term = proximal_term(model, Proximal(0.1, anchor))
    # mu/2 * ||w - a||^2 = 0.05 * 30 * (0 - 2)^2 = 0.05 * 120 = 6.0
    torch.testing.assert_close(term, torch.tensor(6.0))
    term.backward()
    for p in model.parameters():  # d/dw = mu * (w - a) = 0.1 * -2 = -0.2
        assert p.grad is not None
        torch.testing.assert_close(p.grad, torch.full_like(p, -0.2))


def test_proximal_term_per_tensor_offsets() -> None:
    model = _tiny_model(1.0)
    params = list(model.parameters())
    # anchor of tensor k is 1 - (k + 1): squared distance (k + 1)^2 per scalar
    anchor = [torch.full_like(p, 1.0 - (k + 1)) for k, p in enumerate(params)]
    expected = 0.5 * 0.3 * sum((k + 1) ** 2 * p.numel() for k, p in enumerate(params))
    # by hand for TINY, tensor sizes in order [6, 3, 3, 1, 6, 3, 6, 2]:
    # 1*6 + 4*3 + 9*3 + 16*1 + 25*6 + 36*3 + 49*6 + 64*2 = 6+12+27+16+150+108+294+128 = 741
    assert [p.numel() for p in params] == [6, 3, 3, 1, 6, 3, 6, 2]
    assert expected == pytest.approx(0.15 * 741)
    torch.testing.assert_close(proximal_term(model, Proximal(0.3, anchor)), torch.tensor(0.15 * 741))


def test_proximal_term_zero_at_anchor_and_includes_log_std() -> None:
    spec = PolicySpec(3, "continuous", 1, (4,), (-2.0,), (2.0,))
    model = ActorCritic(spec)
    anchor = [p.detach().clone() for p in model.parameters()]
    assert float(proximal_term(model, Proximal(1.0, anchor)).detach()) == 0.0
    with torch.no_grad():
        model.log_std.add_(3.0)  # one scalar moved by 3: 0.5 * 1.0 * 9 = 4.5
    torch.testing.assert_close(proximal_term(model, Proximal(1.0, anchor)), torch.tensor(4.5))


def test_proximal_term_anchor_count_mismatch_raises() -> None:
    model = _tiny_model(0.0)
    anchor = [p.detach().clone() for p in model.parameters()][:-1]
    with pytest.raises(ValueError):
        proximal_term(model, Proximal(0.1, anchor))


# --- ppo_update on a synthetic rollout --------------------------------------------------------


def _synthetic_rollout(model: ActorCritic, t: int = 16, e: int = 4, seed: int = 0) -> Rollout:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(t, e, model.spec.obs_dim, generator=g)
    with torch.no_grad():
        actions, logp = model.sample(obs.reshape(t * e, -1), g)
        values = model.value(obs.reshape(t * e, -1))
    rewards = torch.randn(t, e, generator=g)
    values = values.reshape(t, e)
    next_values = torch.cat([values[1:], torch.zeros(1, e)])
    term = (torch.rand(t, e, generator=g) < 0.1).float()
    return Rollout(
        obs,
        actions.reshape(t, e, *actions.shape[1:]),
        logp.reshape(t, e),
        rewards,
        values,
        next_values,
        term,
        term.clone(),
    )


def _fresh(spec: PolicySpec, seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(spec)


def test_ppo_update_changes_weights_and_reports_stats() -> None:
    spec = PolicySpec(3, "discrete", 2, (8,))
    model = _fresh(spec)
    before = get_weights(model)
    ro = _synthetic_rollout(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    stats = ppo_update(model, opt, ro, PPOHyper(update_epochs=2, num_minibatches=4), torch.Generator().manual_seed(1))
    assert set(stats) == {
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clip_fraction",
        "explained_variance",
        "epochs",
    }
    assert stats["epochs"] == 2.0
    assert all(np.isfinite(v) for v in stats.values())
    assert any(not np.array_equal(a, b) for a, b in zip(before, get_weights(model), strict=True))
    # 64 samples / 4 minibatches = 16 per step, 2 epochs -> 8 optimizer steps
    assert all(int(s["step"]) == 8 for s in opt.state.values())


def test_ppo_update_target_kl_stops_early() -> None:
    spec = PolicySpec(3, "discrete", 2, (8,))
    model = _fresh(spec)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    hp = PPOHyper(update_epochs=10, num_minibatches=4, target_kl=1e-12)
    stats = ppo_update(model, opt, _synthetic_rollout(model), hp, torch.Generator().manual_seed(1))
    assert stats["epochs"] == 1.0  # the last minibatch's KL (after 3 steps) exceeds 1e-12


def test_ppo_update_is_deterministic_given_generator() -> None:
    spec = PolicySpec(3, "continuous", 2, (8,), (-1.0, -1.0), (1.0, 1.0))
    out = []
    for _ in range(2):
        model = _fresh(spec, 3)
        ro = _synthetic_rollout(model, seed=5)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        ppo_update(model, opt, ro, PPOHyper(update_epochs=2), torch.Generator().manual_seed(9))
        out.append(get_weights(model))
    for a, b in zip(*out, strict=True):
        np.testing.assert_array_equal(a, b)


def test_ppo_update_with_strong_prox_stays_closer_to_anchor() -> None:
    spec = PolicySpec(3, "discrete", 2, (8,))

    def dist(mu: float) -> float:
        model = _fresh(spec, 1)
        anchor = [p.detach().clone() for p in model.parameters()]
        ro = _synthetic_rollout(model, seed=2)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        hp = PPOHyper(update_epochs=4, max_grad_norm=1e9)
        ppo_update(model, opt, ro, hp, torch.Generator().manual_seed(0), Proximal(mu, anchor))
        return float(sum(((p.detach() - a) ** 2).sum() for p, a in zip(model.parameters(), anchor, strict=True)))

    assert dist(5.0) < dist(0.0)


# --- train_locally on CartPole-v1 -------------------------------------------------------------

N_ENVS = 4


def _envs() -> gym.vector.SyncVectorEnv:
    return make_vector_env("CartPole-v1", [{}] * N_ENVS, {})


def _algo(**extra: object) -> Config:
    rc = {"algo.local-steps": 256, "algo.num-envs": N_ENVS, "ppo.num-steps": 32, **extra}
    return from_run_config(rc)


@pytest.fixture(scope="module")
def cartpole() -> tuple[PolicySpec, list[np.ndarray]]:
    envs = _envs()
    spec = spec_for(envs.single_observation_space, envs.single_action_space, _algo().algo.hidden_sizes)
    envs.close()
    torch.manual_seed(0)
    return spec, get_weights(ActorCritic(spec))


PLAN1 = LocalPlan(node=1, round=1, total_rounds=5, seed=3)
PLAN2 = replace(PLAN1, round=2)


def _train(
    spec: PolicySpec, weights: list[np.ndarray], algo: Config, plan: LocalPlan, state: NodeState
) -> LocalResult:
    envs = _envs()
    try:
        return train_locally(spec, weights, envs, algo, plan, state)
    finally:
        envs.close()


@pytest.fixture(scope="module")
def round1(cartpole: tuple[PolicySpec, list[np.ndarray]]) -> LocalResult:
    spec, w0 = cartpole
    return _train(spec, w0, _algo(), PLAN1, NodeState.empty())


@pytest.fixture(scope="module")
def round2(cartpole: tuple[PolicySpec, list[np.ndarray]], round1: LocalResult) -> LocalResult:
    spec, _ = cartpole
    return _train(spec, round1.weights, _algo(), PLAN2, round1.state)


def test_train_locally_result(cartpole: tuple[PolicySpec, list[np.ndarray]], round1: LocalResult) -> None:
    _, w0 = cartpole
    assert round1.env_steps == 256  # 2 iterations x 4 envs x 32 steps
    assert [a.shape for a in round1.weights] == [a.shape for a in w0]
    assert all(a.dtype == np.float32 and np.all(np.isfinite(a)) for a in round1.weights)
    assert any(not np.array_equal(a, b) for a, b in zip(w0, round1.weights, strict=True))
    # norm-obs auto resolves to on (issue 13): the round's observation statistics come back
    assert round1.obs_moments is not None and round1.obs_moments.count == 256
    assert np.isfinite(round1.metrics["train_return"]) and round1.metrics["train_episodes"] >= 1
    # lr annealed: last iteration i=1 of round 1 of 5 (2 iterations each): 2.5e-3 * (1 - 1/10)
    assert round1.metrics["lr"] == pytest.approx(2.5e-3 * 0.9)


def test_train_locally_node_state_arrays(round1: LocalResult) -> None:
    a = round1.state.arrays
    n_params = len(round1.weights)  # no buffers: one parameter per weight array
    for i in range(n_params):
        assert {f"adam.{i}.m", f"adam.{i}.v", f"adam.{i}.step"} <= set(a)
        assert a[f"adam.{i}.m"].shape == round1.weights[i].shape
        assert np.all(a[f"adam.{i}.v"] >= 0)
        # 2 iterations x 4 epochs x 4 minibatches = 32 Adam steps
        assert a[f"adam.{i}.step"].tolist() == [32.0]
    assert a["env.states"].shape == (N_ENVS, 4) and a["env.states"].dtype == np.float64
    assert a["env.elapsed"].shape == (N_ENVS,) and a["env.elapsed"].dtype == np.int64
    # The cursor of the unfinished episodes: CartPole pays 1 per step and the time limit
    # counts steps since reset, so all three agree.
    np.testing.assert_array_equal(a["ep.length"], a["env.elapsed"])
    np.testing.assert_array_equal(a["ep.return"], a["ep.length"].astype(np.float64))
    assert "ret.moments" in a  # norm-reward auto -> on for PPO, discrete actions included
    assert all(isinstance(v, np.ndarray) for v in a.values())


def test_train_locally_is_deterministic(cartpole: tuple[PolicySpec, list[np.ndarray]], round1: LocalResult) -> None:
    spec, w0 = cartpole
    again = _train(spec, w0, _algo(), PLAN1, NodeState.empty())
    for x, y in zip(round1.weights, again.weights, strict=True):
        assert np.array_equal(x, y)
    assert set(again.state.arrays) == set(round1.state.arrays)
    for k, v in round1.state.arrays.items():
        assert np.array_equal(v, again.state.arrays[k]), k
    assert again.metrics["train_return"] == round1.metrics["train_return"]


def test_train_locally_round2_restores_adam(round1: LocalResult, round2: LocalResult) -> None:
    a = round2.state.arrays
    n_params = len(round1.weights)
    for i in range(n_params):
        assert a[f"adam.{i}.step"].tolist() == [64.0]  # 32 restored + 32 this round
    # lr annealed: round 2, last iteration i=1: progress (1*2 + 1) / 10 = 0.3
    assert round2.metrics["lr"] == pytest.approx(2.5e-3 * 0.7)
    np.testing.assert_array_equal(a["ep.length"], a["env.elapsed"])
    np.testing.assert_array_equal(a["ep.return"], a["ep.length"].astype(np.float64))


def test_train_locally_round2_continues_episodes(cartpole: tuple[PolicySpec, list[np.ndarray]]) -> None:
    # 2 steps per env per round: no CartPole episode can end within 4 steps of a reset
    # (|theta| starts below 0.05 and must exceed 0.21), so the cursor is exactly predictable.
    spec, w0 = cartpole
    algo = from_run_config(
        {"algo.local-steps": 8, "algo.num-envs": N_ENVS, "ppo.num-steps": 2, "ppo.num-minibatches": 2}
    )
    r1 = _train(spec, w0, algo, PLAN1, NodeState.empty())
    assert r1.state.arrays["ep.length"].tolist() == [2] * N_ENVS
    r2 = _train(spec, r1.weights, algo, PLAN2, r1.state)
    assert r2.state.arrays["ep.length"].tolist() == [4] * N_ENVS  # continued, not restarted
    assert r2.state.arrays["env.elapsed"].tolist() == [4] * N_ENVS
    assert r2.state.arrays["ep.return"].tolist() == [4.0] * N_ENVS
    fresh = _train(spec, r1.weights, algo, PLAN2, NodeState.empty())
    assert fresh.state.arrays["ep.length"].tolist() == [2] * N_ENVS
    # The restored physical state is where round 1 left it: 2 more steps from r1's states
    # cannot equal 2 steps from round 2's own reset.
    assert not np.array_equal(r2.state.arrays["env.states"], fresh.state.arrays["env.states"])


def test_train_locally_norm_obs_and_reward_on(cartpole: tuple[PolicySpec, list[np.ndarray]]) -> None:
    spec, w0 = cartpole
    algo = _algo(**{"algo.norm-obs": "on", "algo.norm-reward": "on"})
    r1 = _train(spec, w0, algo, PLAN1, NodeState.empty())
    assert r1.obs_moments is not None
    assert r1.obs_moments.count == 256.0  # observations seen this round
    assert r1.obs_moments.mean.shape == (4,)
    assert np.all(r1.obs_moments.m2 > 0)
    # reward scaling statistics: one discounted-return sample per env per step
    assert r1.state.arrays["ret.moments"].shape == (3,)
    assert r1.state.arrays["ret.moments"][0] == 256.0
    # Round 2 with global obs statistics: obs_moments still counts only this round's
    # observations, the return statistics accumulate across rounds.
    r2 = _train(spec, r1.weights, algo, replace(PLAN2, obs_moments=r1.obs_moments), r1.state)
    assert r2.obs_moments is not None and r2.obs_moments.count == 256.0
    assert r2.state.arrays["ret.moments"][0] == 512.0
    assert all(np.all(np.isfinite(w)) for w in r2.weights)


def test_train_locally_with_prox_differs_and_is_finite(
    cartpole: tuple[PolicySpec, list[np.ndarray]], round1: LocalResult
) -> None:
    spec, w0 = cartpole
    r = _train(spec, w0, _algo(), replace(PLAN1, prox_mu=1.0), NodeState.empty())
    assert all(np.all(np.isfinite(w)) for w in r.weights)
    assert any(not np.array_equal(a, b) for a, b in zip(r.weights, round1.weights, strict=True))


def test_train_locally_round2_is_deterministic_from_state(
    cartpole: tuple[PolicySpec, list[np.ndarray]], round1: LocalResult, round2: LocalResult
) -> None:
    spec, _ = cartpole
    again = _train(spec, round1.weights, _algo(), PLAN2, round1.state)
    for x, y in zip(round2.weights, again.weights, strict=True):
        assert np.array_equal(x, y)
    for k, v in round2.state.arrays.items():
        assert np.array_equal(v, again.state.arrays[k]), k


def test_random_action_rollouts_ignore_the_policy(cartpole: tuple[PolicySpec, list[np.ndarray]]) -> None:
    """A policy that always pushes left falls in ~9 steps; the random-action attacker's rollouts
    (FedPG-BR) from the same weights last as long as a random policy's (~22 on CartPole)."""
    spec, w0 = cartpole
    left = [w.copy() for w in w0]
    left[11][:] = [20.0, -20.0]  # actor output bias: action 0 (left) with probability ~1
    assert left[11].shape == (2,)
    envs = _envs()
    try:
        own = train_locally(spec, left, envs, _algo(), PLAN1, NodeState.empty())
    finally:
        envs.close()
    envs = _envs()
    try:
        rnd = train_locally(spec, left, envs, _algo(), PLAN1, NodeState.empty(), random_actions=True)
    finally:
        envs.close()
    assert own.metrics["train_return"] < 12 and rnd.metrics["train_return"] > 15
    assert not np.array_equal(rnd.weights[11], left[11])  # it still trains, on the random rollouts
