"""Batched physics equals Gymnasium's single environments step for step (issue 16, item 1).

Each family runs 10,000 vector steps of random actions through ``make_batched_env`` and through
``make_vector_env`` (Gymnasium's own envs, one per sub-env) from the same seeds, on several
variants at once; observations, rewards, terminations, truncations, final observations and
episode statistics must be identical, resets included.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.envs.batched import BatchedEnv, make_batched_env
from fedrl.envs.make import finished_episodes, make_vector_env
from fedrl.envs.snapshot import restore, snapshot
from fedrl.errors import ConfigError

STEPS = 10_000

VARIANTS = {
    "CartPole-v1": [{}, {"length": 0.1}, {"length": 1.2, "masscart": 2.0}, {"masspole": 0.3, "gravity": 12.0},
                    {"force_mag": 5.0, "length": 0.8}],
    "Pendulum-v1": [{}, {"g": 8.0}, {"g": 12.0, "m": 1.2}, {"m": 0.8, "l": 1.3}],
    "Acrobot-v1": [{}, {"link_mass_1": 0.5}, {"link_mass_2": 1.7, "link_length_1": 1.2}, {"link_length_2": 0.7}],
    "MountainCar-v0": [{}, {"force": 0.0015}, {"gravity": 0.002}, {"force": 0.0012, "gravity": 0.003}],
    # a strong engine reaches the goal: terminations happen too
    "MountainCarContinuous-v0": [{}, {"power": 0.003}, {"gravity": 0.002, "power": 0.004}, {"gravity": 0.0035}],
}


def _run_pair(env_id: str, params: list[dict[str, float]], kwargs: dict[str, object], steps: int) -> dict[str, int]:
    ref = make_vector_env(env_id, params, kwargs)
    bat = make_batched_env(env_id, params, kwargs)
    assert isinstance(bat, BatchedEnv)
    assert bat.single_observation_space == ref.single_observation_space
    assert bat.single_action_space == ref.single_action_space
    obs_r, _ = ref.reset(seed=7)
    obs_b, _ = bat.reset(seed=7)
    np.testing.assert_array_equal(obs_b, obs_r)
    space = ref.action_space
    space.seed(3)
    seen = {"terminated": 0, "truncated": 0}
    for t in range(steps):
        action = space.sample()
        o_r, r_r, te_r, tr_r, info_r = ref.step(action)
        o_b, r_b, te_b, tr_b, info_b = bat.step(action)
        np.testing.assert_array_equal(o_b, o_r, err_msg=f"{env_id} obs at step {t}")
        np.testing.assert_array_equal(r_b, r_r, err_msg=f"{env_id} reward at step {t}")
        np.testing.assert_array_equal(te_b, te_r, err_msg=f"{env_id} terminated at step {t}")
        np.testing.assert_array_equal(tr_b, tr_r, err_msg=f"{env_id} truncated at step {t}")
        assert o_b.dtype == o_r.dtype and r_b.dtype == r_r.dtype
        assert set(info_b) == set(info_r), f"{env_id} infos at step {t}"
        if "final_obs" in info_r:
            np.testing.assert_array_equal(info_b["_final_obs"], info_r["_final_obs"])
            for i in np.flatnonzero(info_r["_final_obs"]):
                np.testing.assert_array_equal(info_b["final_obs"][i], info_r["final_obs"][i])
            assert [(e.env_index, e.ret, e.length) for e in finished_episodes(info_b)] == \
                [(e.env_index, e.ret, e.length) for e in finished_episodes(info_r)]
        seen["terminated"] += int(te_r.sum())
        seen["truncated"] += int(tr_r.sum())
    ref.close()
    bat.close()
    return seen


@pytest.mark.parametrize("env_id", sorted(VARIANTS))
def test_family_matches_gymnasium_step_for_step(env_id: str) -> None:
    params = VARIANTS[env_id]
    seen = _run_pair(env_id, params, {}, STEPS)
    # the comparison covered episode ends (resets included), not only running episodes
    assert seen["terminated"] + seen["truncated"] > 0
    if env_id in ("CartPole-v1", "Acrobot-v1", "MountainCarContinuous-v0"):
        assert seen["terminated"] > 0


def test_time_limit_from_kwargs_truncates_as_gymnasium() -> None:
    seen = _run_pair("CartPole-v1", [{"length": 0.3}, {}], {"max_episode_steps": 9}, 200)
    assert seen["truncated"] > 0


def test_other_ids_and_kwargs_fall_back_to_gymnasium() -> None:
    env = make_batched_env("CartPole-v1", [{}], {"sutton_barto_reward": True})
    assert not isinstance(env, BatchedEnv)
    env.close()


def test_snapshot_and_restore_continue_the_episode_as_gymnasium() -> None:
    params = VARIANTS["CartPole-v1"]
    ref, bat = make_vector_env("CartPole-v1", params, {}), make_batched_env("CartPole-v1", params, {})
    ref.reset(seed=1)
    bat.reset(seed=1)
    for _ in range(5):
        a = np.zeros(len(params), np.int64)
        ref.step(a)
        bat.step(a)
    ref_snap, bat_snap = snapshot(ref), snapshot(bat)
    assert ref_snap is not None and bat_snap is not None
    np.testing.assert_array_equal(bat_snap[0], ref_snap[0])
    np.testing.assert_array_equal(bat_snap[1], ref_snap[1])
    ref2, bat2 = make_vector_env("CartPole-v1", params, {}), make_batched_env("CartPole-v1", params, {})
    ref2.reset(seed=2)
    bat2.reset(seed=2)
    o_r, o_b = restore(ref2, *ref_snap), restore(bat2, *bat_snap)
    assert o_r is not None and o_b is not None
    np.testing.assert_array_equal(o_b, o_r)
    for _ in range(30):
        a = np.ones(len(params), np.int64)
        np.testing.assert_array_equal(bat2.step(a)[0], ref2.step(a)[0])


def test_bad_arguments_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="env.vary"):
        make_batched_env("CartPole-v1", [{"lenght": 0.5}], {})
    with pytest.raises(ConfigError, match="env.vary"):
        make_batched_env("CartPole-v1", [{"length": -1.0}], {})
    with pytest.raises(ConfigError, match="env.vary"):
        make_batched_env("Pendulum-v1", [{"max_torque": 1.0}, {"max_torque": 2.0}], {})
    with pytest.raises(ConfigError, match="env.kwargs"):
        make_batched_env("CartPole-v1", [{}], {"max_episode_steps": 0})
    env = make_batched_env("CartPole-v1", [{}, {}], {})
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(2, np.int64))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="actions"):
        env.step(np.array([0, 2]))
