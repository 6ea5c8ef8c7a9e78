"""Unit tests for fedrl.envs.families and fedrl.envs.make."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.acrobot import AcrobotEnv

from fedrl.envs import (
    check_env_id,
    check_params,
    check_values,
    family_for,
    finished_episodes,
    make_env,
    make_vector_env,
    next_observations,
)
from fedrl.errors import ConfigError

# --- CartPole ---------------------------------------------------------------------------------


def test_cartpole_applies_every_param_and_derived_quantities() -> None:
    params = {"length": 0.8, "masspole": 0.3, "masscart": 2.0, "gravity": 3.7, "force_mag": 7.0}
    env = make_env("CartPole-v1", params, {})
    base: Any = env.unwrapped
    assert family_for("CartPole-v1").defaults(env) == params
    assert base.total_mass == 0.3 + 2.0
    assert base.polemass_length == 0.3 * 0.8


@pytest.mark.filterwarnings("ignore:.*CartPole-v0 is out of date")
def test_cartpole_single_param_keeps_derived_consistent() -> None:
    base: Any = make_env("CartPole-v0", {"length": 1.5}, {}).unwrapped
    assert base.polemass_length == base.masspole * 1.5
    assert base.total_mass == base.masspole + base.masscart


def _theta_after(length: float, steps: int) -> float:
    env = make_env("CartPole-v1", {"length": length, "force_mag": 0.0}, {})
    env.reset(seed=0)
    base: Any = env.unwrapped
    base.state = np.array([0.0, 0.0, 0.05, 0.0])  # same tilt, at rest
    for _ in range(steps):
        env.step(1)  # force_mag 0: the pole falls under gravity alone
    return float(base.state[2])


def test_longer_pole_falls_slower() -> None:
    short, long = _theta_after(0.25, 10), _theta_after(1.0, 10)
    assert 0.05 < long < short


# --- Pendulum -----------------------------------------------------------------------------------


def test_pendulum_params_and_action_space_seen_through_wrappers() -> None:
    params = {"g": 3.0, "m": 2.0, "l": 0.5, "max_torque": 4.0}
    env = make_env("Pendulum-v1", params, {})
    assert family_for("Pendulum-v1").defaults(env) == params
    assert isinstance(env.action_space, gym.spaces.Box)
    assert env.action_space.low.tolist() == [-4.0]
    assert env.action_space.high.tolist() == [4.0]
    env.reset(seed=0)
    env.step(np.array([3.5], dtype=np.float32))
    assert env.unwrapped.last_u == pytest.approx(3.5)  # type: ignore[attr-defined]  # not clipped to 2


# --- Acrobot --------------------------------------------------------------------------------------


def test_acrobot_sets_instance_attributes_and_centres_of_mass() -> None:
    params = {"link_length_1": 1.4, "link_length_2": 0.6, "link_mass_1": 2.0, "link_mass_2": 0.5}
    env = make_env("Acrobot-v1", params, {})
    base: Any = env.unwrapped
    assert family_for("Acrobot-v1").defaults(env) == params
    assert (base.LINK_LENGTH_1, base.LINK_MASS_2) == (1.4, 0.5)
    assert (base.LINK_COM_POS_1, base.LINK_COM_POS_2) == (0.7, 0.3)
    # set on the instance, never the class: other envs in this process keep the defaults
    assert AcrobotEnv.LINK_LENGTH_1 == 1.0 and AcrobotEnv.LINK_COM_POS_2 == 0.5
    assert gym.make("Acrobot-v1").unwrapped.LINK_MASS_1 == 1.0  # type: ignore[attr-defined]


def _acrobot_obs(params: dict[str, float]) -> np.ndarray:
    env = make_env("Acrobot-v1", params, {})
    env.reset(seed=3)
    for _ in range(20):
        obs, *_ = env.step(2)
    return np.asarray(obs)


@pytest.mark.parametrize("name", ["link_length_1", "link_length_2", "link_mass_1", "link_mass_2"])
def test_every_acrobot_param_changes_dynamics(name: str) -> None:
    assert not np.allclose(_acrobot_obs({}), _acrobot_obs({name: 1.7}))


# --- MountainCar ----------------------------------------------------------------------------------


def test_mountain_car_params() -> None:
    env = make_env("MountainCar-v0", {"force": 0.002, "gravity": 0.001}, {})
    assert family_for("MountainCar-v0").defaults(env) == {"force": 0.002, "gravity": 0.001}


def test_mountain_car_continuous_gravity_default_is_bit_identical() -> None:
    ours = make_env("MountainCarContinuous-v0", {"gravity": 0.0025}, {})
    stock = gym.make("MountainCarContinuous-v0")
    obs_a, _ = ours.reset(seed=11)
    obs_b, _ = stock.reset(seed=11)
    assert np.array_equal(obs_a, obs_b)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(200, 1)).astype(np.float32)
    for action in actions:
        a, b = ours.step(action), stock.step(action)
        assert np.array_equal(a[0], b[0]) and a[0].dtype == b[0].dtype
        assert a[1:4] == b[1:4]


def test_mountain_car_continuous_gravity_and_power_act() -> None:
    def position_after(params: dict[str, float]) -> float:
        env = make_env("MountainCarContinuous-v0", params, {})
        env.reset(seed=0)
        for _ in range(30):
            obs, *_ = env.step(np.array([0.0], dtype=np.float32))
        return float(obs[0])

    base = position_after({})
    assert position_after({"gravity": 0.005}) != base
    assert position_after({"power": 0.01, "gravity": 0.0025}) == base  # zero action: no power


def test_stock_mountain_car_continuous_refuses_family_params() -> None:
    with pytest.raises(TypeError, match="make_env"):
        family_for("MountainCarContinuous-v0").apply(
            gym.make("MountainCarContinuous-v0"), {"gravity": 0.003}
        )


# --- generic family ----------------------------------------------------------------------


def test_generic_family_sets_existing_numeric_attributes() -> None:
    generic = family_for("Taxi-v4")
    assert generic.generic and generic.params == ()
    env = gym.make("MountainCar-v0")  # any env works with the generic family
    generic.apply(env, {"gravity": 0.003, "goal_position": 0.4})
    base: Any = env.unwrapped
    assert (base.gravity, base.goal_position) == (0.003, 0.4)
    assert generic.defaults(env)["gravity"] == 0.003


def test_generic_family_rejects_missing_attribute_and_fractional_int() -> None:
    env = make_env("Taxi-v4", {"rainy_probability": 0.5, "max_row": 4.0}, {})
    assert type(env.unwrapped.max_row) is int  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"^env\.vary: Taxi-v4 has no parameter 'gravity'"):
        make_env("Taxi-v4", {"gravity": 1.0}, {})
    with pytest.raises(ConfigError, match="is an integer"):
        make_env("Taxi-v4", {"max_row": 3.5}, {})


def test_check_params_generic_lists_env_attributes() -> None:
    check_params("Taxi-v4", ["rainy_probability"])
    with pytest.raises(ConfigError) as info:
        check_params("Taxi-v4", ["rainy_probabilty"])
    assert "did you mean 'rainy_probability'" in str(info.value)


# --- config-time checks ------------------------------------------------------------------


def test_unknown_param_message() -> None:
    with pytest.raises(ConfigError) as info:
        check_params("CartPole-v1", ["length", "lenght"])
    assert str(info.value) == (
        "env.vary: CartPole-v1 has no parameter 'lenght'; allowed: length, masspole, "
        "masscart, gravity, force_mag (did you mean 'length'?)"
    )


def test_unknown_param_without_close_match_has_no_hint() -> None:
    with pytest.raises(ConfigError) as info:
        check_params("Pendulum-v1", ["zzz"], key="other")
    assert str(info.value).startswith("other: Pendulum-v1 has no parameter 'zzz'; allowed: g, m")
    assert "did you mean" not in str(info.value)


def test_check_env_id() -> None:
    check_env_id("CartPole-v1")
    with pytest.raises(ConfigError) as info:
        check_env_id("CartPol-v1")
    assert str(info.value).startswith("env.id: 'CartPol-v1' is not a registered Gymnasium id")
    assert "did you mean 'CartPole-v1'" in str(info.value)


@pytest.mark.parametrize(
    ("env_id", "params", "fragment"),
    [
        ("CartPole-v1", {"length": 0.0}, "'length' must be > 0"),
        ("CartPole-v1", {"masspole": -0.1}, "'masspole' must be > 0"),
        ("Pendulum-v1", {"g": float("nan")}, "'g' must be finite"),
        ("Pendulum-v1", {"max_torque": 0.0}, "'max_torque' must be > 0"),
        ("Acrobot-v1", {"link_mass_2": -1.0}, "'link_mass_2' must be > 0"),
        ("MountainCar-v0", {"gravity": float("inf")}, "must be finite"),
    ],
)
def test_physically_invalid_values(env_id: str, params: dict[str, float], fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"^env\.vary: ") as info:
        check_values(env_id, params)
    assert fragment in str(info.value)
    with pytest.raises(ConfigError, match=fragment):
        make_env(env_id, params, {})


def test_force_mag_may_be_zero_or_negative() -> None:
    check_values("CartPole-v1", {"force_mag": 0.0})
    check_values("CartPole-v1", {"force_mag": -10.0})


def test_make_env_bad_id_and_kwargs() -> None:
    with pytest.raises(ConfigError, match=r"^env\.id: "):
        make_env("NoSuchEnv-v0", {}, {})
    with pytest.raises(ConfigError, match=r"^env\.kwargs: .*bogus"):
        make_env("CartPole-v1", {}, {"bogus": 1})


# --- vector env ---------------------------------------------------------------------------


def test_vector_env_has_one_variant_per_sub_env() -> None:
    variants = [{"length": 0.3}, {"length": 0.6, "masscart": 2.0}, {"length": 0.9}]
    vec = make_vector_env("CartPole-v1", variants, {})
    assert vec.num_envs == 3
    assert vec.autoreset_mode == gym.vector.AutoresetMode.SAME_STEP
    assert vec.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    bases: list[Any] = [e.unwrapped for e in vec.envs]
    assert [b.length for b in bases] == [0.3, 0.6, 0.9]
    assert [b.masscart for b in bases] == [1.0, 2.0, 1.0]
    assert [b.polemass_length for b in bases] == [0.1 * 0.3, 0.1 * 0.6, 0.1 * 0.9]
    assert len({id(b) for b in bases}) == 3
    assert all(isinstance(e, gym.wrappers.RecordEpisodeStatistics) for e in vec.envs)
    vec.close()


def test_vector_env_refuses_differing_action_spaces() -> None:
    with pytest.raises(ConfigError, match=r"^env\.vary: Pendulum-v1 sub-envs 0 and 1"):
        make_vector_env("Pendulum-v1", [{"max_torque": 1.0}, {"max_torque": 2.0}], {})
    make_vector_env("Pendulum-v1", [{"max_torque": 1.0}, {"max_torque": 1.0, "g": 5.0}], {})


def test_truncation_exposes_final_obs_and_episode_stats() -> None:
    variants = [{"length": 0.4}, {"length": 0.5}, {"length": 0.6}]
    vec = make_vector_env("CartPole-v1", variants, {"max_episode_steps": 5})
    singles = [make_env("CartPole-v1", p, {"max_episode_steps": 5}) for p in variants]
    obs, _ = vec.reset(seed=100)
    for i, single in enumerate(singles):
        single_obs, _ = single.reset(seed=100 + i)  # SyncVectorEnv seeds sub-env i with seed+i
        assert np.array_equal(obs[i], single_obs)
    actions = np.array([0, 1, 0])
    for t in range(5):
        obs, _, terminated, truncated, infos = vec.step(actions)
        last = [single.step(int(a)) for single, a in zip(singles, actions, strict=True)]
        if t < 4:
            assert not truncated.any() and "final_obs" not in infos and "final_info" not in infos
            assert finished_episodes(infos) == []
            assert np.array_equal(next_observations(obs, infos), obs)
    assert truncated.all() and not terminated.any()
    assert infos["_final_obs"].tolist() == [True, True, True]
    for i, step in enumerate(last):
        # final_obs is the true 5th observation; obs is already the next episode's reset obs
        assert np.array_equal(infos["final_obs"][i], step[0])
        assert not np.array_equal(obs[i], step[0])
    assert np.array_equal(next_observations(obs, infos), np.stack([s[0] for s in last]))
    assert "episode" not in infos  # SAME_STEP moves the last step's info to final_info
    assert infos["final_info"]["_episode"].tolist() == [True, True, True]
    assert infos["final_info"]["episode"]["r"].tolist() == [5.0, 5.0, 5.0]
    stats = finished_episodes(infos)
    assert [(s.env_index, s.ret, s.length) for s in stats] == [(0, 5.0, 5), (1, 5.0, 5), (2, 5.0, 5)]
    vec.close()


def test_only_finished_sub_envs_are_masked() -> None:
    vec = make_vector_env("CartPole-v1", [{}, {}], {"max_episode_steps": 5})
    vec.reset(seed=0)
    vec.step(np.array([0, 0]))
    vec.envs[1].unwrapped.state[2] = 1.0  # type: ignore[attr-defined]  # past the angle limit
    obs, _, terminated, truncated, infos = vec.step(np.array([0, 0]))
    assert terminated.tolist() == [False, True] and not truncated.any()
    assert infos["_final_obs"].tolist() == [False, True]
    assert infos["final_obs"][0] is None
    assert [(s.env_index, s.length) for s in finished_episodes(infos)] == [(1, 2)]
    fixed = next_observations(obs, infos)
    assert np.array_equal(fixed[0], obs[0]) and not np.array_equal(fixed[1], obs[1])
    vec.close()
