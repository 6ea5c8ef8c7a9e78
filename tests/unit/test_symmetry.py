"""``algo.mirror``: each declared mirror is a symmetry of Gymnasium's physics, the symmetric policy
maps a mirrored observation to the mirrored action, and the checks refuse what it cannot do."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch

from fedrl.checks.validate import check
from fedrl.envs.make import make_env
from fedrl.envs.symmetry import MIRRORS, mirror_for
from fedrl.errors import ConfigError
from fedrl.rl.networks import ActorCritic, PolicySpec, get_weights, mirrored, spec_for
from fedrl.rl.stacked import StackedActorCritic

VARIANTS = {"CartPole-v1": {"length": 0.9, "masscart": 1.4}, "CartPole-v0": {},
            "Pendulum-v1": {"l": 1.2}, "Acrobot-v1": {"link_mass_2": 1.5}}


def _step_from(env: gym.Env, state: np.ndarray, action: object) -> tuple[np.ndarray, float, bool]:
    base = env.unwrapped
    base.state = state.copy()
    if hasattr(base, "steps_beyond_terminated"):  # CartPole: a step after termination pays 0
        base.steps_beyond_terminated = None
    obs, reward, terminated, _, _ = base.step(action)
    return np.asarray(obs, np.float64), float(reward), bool(terminated)


@pytest.mark.parametrize("env_id", sorted(MIRRORS))
def test_each_declared_mirror_is_a_symmetry_of_the_physics(env_id: str) -> None:
    """From a state and its mirror (every family's internal state is odd: angles, positions and
    velocities), the action and its mirror lead to mirrored observations, equal rewards and equal
    terminations, for 300 states visited by a random policy in a varied env."""
    mirror = mirror_for(env_id)
    assert mirror is not None
    env, twin = (make_env(env_id, VARIANTS[env_id], {}) for _ in range(2))
    rng = np.random.default_rng(0)
    env.reset(seed=1)
    twin.reset(seed=2)
    sign = np.asarray(mirror.obs, np.float64)
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    checked = 0
    for _ in range(300):
        state = np.asarray(env.unwrapped.state, np.float64).copy()
        if discrete:
            a: object = int(rng.integers(env.action_space.n))
            b: object = mirror.action[a]  # type: ignore[index]
        else:
            a = rng.uniform(-2, 2, env.action_space.shape).astype(np.float32)
            b = (a * np.asarray(mirror.action)).astype(np.float32)  # type: ignore[operator]
        obs, reward, terminated = _step_from(env, state, a)
        m_obs, m_reward, m_terminated = _step_from(twin, -state, b)
        np.testing.assert_allclose(m_obs, obs * sign, rtol=1e-6, atol=1e-6)
        assert m_reward == pytest.approx(reward, rel=1e-6, abs=1e-9) and m_terminated == terminated
        checked += 1
        if terminated:
            env.reset(seed=checked)
    assert checked == 300
    assert len(mirror.obs) == env.observation_space.shape[0]


def _spec(env_id: str) -> PolicySpec:
    env = gym.make(env_id)
    spec = spec_for(env.observation_space, env.action_space, (16, 16))
    m = mirror_for(env_id)
    assert m is not None
    return replace(spec, obs_mirror=m.obs, action_mirror=m.action)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1"])
def test_the_symmetric_policy_gives_a_mirrored_observation_the_mirrored_action(env_id: str) -> None:
    spec = _spec(env_id)
    torch.manual_seed(0)
    model = ActorCritic(spec)
    for p in model.parameters():  # away from the init's near-zero output layer, so the check has teeth
        p.data.normal_(0, 0.5)
    x = torch.randn(200, spec.obs_dim) * 2
    mx = x * torch.tensor(spec.obs_mirror, dtype=x.dtype)
    with torch.no_grad():
        out, m_out = model.actor_out(x), model.actor_out(mx)
        expected = out[:, list(spec.action_mirror)] if spec.action_kind == "discrete" else -out
        torch.testing.assert_close(m_out, expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.value(mx), model.value(x), rtol=1e-5, atol=1e-6)
        raw = model.actor(x)  # the unsymmetrized actor does not have the property: the test is not vacuous
        raw_m = model.actor(mx)
        raw_expected = raw[:, list(spec.action_mirror)] if spec.action_kind == "discrete" else -raw
        assert float((raw_m - raw_expected).abs().max()) > 0.1
        if spec.action_kind == "discrete":
            mirrored_greedy = torch.tensor(spec.action_mirror)[model.greedy(x)]
            assert torch.equal(model.greedy(mx), mirrored_greedy)
        # one observation without a batch dimension is the same as a batch of one
        torch.testing.assert_close(model.actor_out(x[0]), out[0])


def test_mirrored_is_the_plain_function_without_a_mirror() -> None:
    env = gym.make("CartPole-v1")
    spec = spec_for(env.observation_space, env.action_space, (8,))
    model = ActorCritic(spec)
    x = torch.randn(5, 4)
    with torch.no_grad():
        assert torch.equal(mirrored(model.actor, x, spec, action=True), model.actor(x))
        assert torch.equal(model.actor_out(x), model.actor(x))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_the_stacked_policy_is_symmetric_as_each_node_alone(env_id: str) -> None:
    spec = _spec(env_id)
    models = []
    for k in range(3):
        torch.manual_seed(k)
        models.append(ActorCritic(spec))
    stacked = StackedActorCritic(spec, [get_weights(m) for m in models])
    obs = torch.randn(3, 7, spec.obs_dim)
    with torch.no_grad():
        out, values = stacked.actor(obs), stacked.value(obs)
        for k, m in enumerate(models):
            torch.testing.assert_close(out[k], m.actor_out(obs[k]), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(values[k], m.value(obs[k]), rtol=1e-5, atol=1e-6)


BASE = {"algo.mirror": True, "algo.norm-obs-center": False, "algo.norm-obs": "on"}


def test_a_mirror_run_is_accepted_and_builds_the_symmetric_spec() -> None:
    from fedrl.experiment import policy_spec, variants_of

    cfg = check(BASE)
    spec = policy_spec(cfg, variants_of(cfg)[0])
    assert spec.obs_mirror == (-1, -1, -1, -1) and spec.action_mirror == (1, 0)
    plain = check({})
    assert policy_spec(plain, variants_of(plain)[0]).obs_mirror == ()


@pytest.mark.parametrize(("over", "says"), [
    ({"env.id": "MountainCar-v0", "env.vary": ""}, "declares no mirror symmetry"),
    ({"algo.name": "dqn"}, "PPO's actor-critic"),
    ({"algo.norm-obs-center": True}, "set algo.norm-obs-center = false"),
    ({"privacy.dpsgd": True, "algo.norm-obs": "off", "algo.norm-obs-center": True}, "Opacus"),
])
def test_what_the_mirror_cannot_do_is_refused_naming_algo_mirror(over: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**BASE, **over})
    assert err.value.key == "algo.mirror" and says in str(err.value)
    # without the mirror the same settings pass these checks (or fail on something else)
    try:
        check({**BASE, **over, "algo.mirror": False})
    except ConfigError as other:
        assert other.key != "algo.mirror"


def test_auto_normalization_is_judged_by_what_it_resolves_to() -> None:
    """``algo.norm-obs = auto`` under gossip stays auto: off for discrete actions (the mirror then needs
    nothing), on for continuous ones (centred statistics refused); under DP it becomes ``server``,
    whose statistics must then be uncentred."""
    gossip = {"algo.mirror": True, "topology.name": "gossip"}
    cfg = check(gossip)
    assert cfg.algo.norm_obs == "auto" and cfg.algo.norm_obs_center and cfg.algo.mirror
    for over in ({**gossip, "env.id": "Pendulum-v1", "env.vary": ""},
                 {"algo.mirror": True, "privacy.mode": "central", "privacy.target-epsilon": 8.0}):
        with pytest.raises(ConfigError) as err:
            check(over)
        assert err.value.key == "algo.mirror" and "set algo.norm-obs-center = false" in str(err.value)
    dp = check({"algo.mirror": True, "privacy.mode": "central", "privacy.target-epsilon": 8.0,
                "algo.norm-obs-center": False})
    assert dp.algo.norm_obs == "server" and dp.algo.mirror


def test_the_policy_trains_after_acting_in_inference_mode() -> None:
    """The mirror's constants are cached; one first built while acting (inference mode) must not
    break the next backward pass (it did, in the cohort path, before they were built outside it)."""
    from fedrl.rl import networks

    networks._constant.cache_clear()
    spec = _spec("Pendulum-v1")
    model = ActorCritic(spec)
    x = torch.randn(6, spec.obs_dim)
    with torch.inference_mode():
        model.actor_out(x)
    logp, _ = model.log_prob_entropy(x, torch.zeros(6, 1))
    (logp.sum() + model.value(x).sum()).backward()
    assert all(p.grad is not None for p in model.actor.parameters())
