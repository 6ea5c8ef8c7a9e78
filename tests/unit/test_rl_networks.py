"""Unit tests for fedrl.rl.networks: weight lists, sampling, specs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Normal

from fedrl.rl.networks import (
    ActorCritic,
    PolicySpec,
    check_weights,
    get_weights,
    set_weights,
    spec_for,
    weight_names,
)

DISCRETE = PolicySpec(4, "discrete", 2, (8, 8))
CONTINUOUS = PolicySpec(3, "continuous", 2, (8,), (-2.0, -1.0), (2.0, 1.0))


def _model(spec: PolicySpec, seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(spec)


def test_weight_list_layout() -> None:
    m = _model(CONTINUOUS)
    names = weight_names(m)
    w = get_weights(m)
    assert len(names) == len(w)
    # state_dict order: the log-std layer first (registered first), then critic, then actor
    assert names[0] == "std.log_std"
    assert [tuple(a.shape) for a in w] == [
        (2,),
        (8, 3),
        (8,),
        (1, 8),
        (1,),
        (8, 3),
        (8,),
        (2, 8),
        (2,),
    ]
    assert all(a.dtype == np.float32 for a in w)


def test_get_weights_returns_copies() -> None:
    m = _model(DISCRETE)
    w = get_weights(m)
    w[0][...] = 123.0
    assert not np.array_equal(get_weights(m)[0], w[0])


@pytest.mark.parametrize("spec", [DISCRETE, CONTINUOUS])
def test_get_set_round_trip(spec: PolicySpec) -> None:
    src, dst = _model(spec, 1), _model(spec, 2)
    w = get_weights(src)
    assert not all(np.array_equal(a, b) for a, b in zip(w, get_weights(dst), strict=True))
    set_weights(dst, w)
    for a, b in zip(w, get_weights(dst), strict=True):
        np.testing.assert_array_equal(a, b)
    obs = torch.randn(5, spec.obs_dim)
    assert torch.equal(src.value(obs), dst.value(obs))


def test_set_weights_accepts_float64_and_does_not_alias() -> None:
    m = _model(DISCRETE)
    w = [np.full(a.shape, 0.25, np.float64) for a in get_weights(m)]
    set_weights(m, w)
    w[0][...] = 9.0
    assert all(np.all(a == 0.25) for a in get_weights(m))


def test_set_weights_wrong_count_raises() -> None:
    m = _model(DISCRETE)
    w = get_weights(m)
    with pytest.raises(ValueError, match=f"expected {len(w)} arrays, got {len(w) - 1}"):
        set_weights(m, w[:-1])
    with pytest.raises(ValueError):
        set_weights(m, [*w, np.zeros(1, np.float32)])


def test_set_weights_wrong_shape_raises_and_names_the_tensor() -> None:
    m = _model(DISCRETE)
    w = get_weights(m)
    before = get_weights(m)
    w[0] = np.zeros((3, 4), np.float32)  # critic.0.weight is (8, 4)
    with pytest.raises(ValueError, match=r"critic\.0\.weight.*\(8, 4\).*\(3, 4\)"):
        set_weights(m, w)
    for a, b in zip(before, get_weights(m), strict=True):
        np.testing.assert_array_equal(a, b)  # nothing loaded on failure


def test_check_weights() -> None:
    ref = get_weights(_model(DISCRETE))
    assert check_weights(ref, [a.copy() for a in ref]) is None
    assert check_weights(ref, ref[:-1]) == f"expected {len(ref)} arrays, got {len(ref) - 1}"
    bad_shape = [a.copy() for a in ref]
    bad_shape[1] = np.zeros((5,), np.float32)  # critic.0.bias is (8,)
    assert check_weights(ref, bad_shape) == "array 1: expected shape (8,), got (5,)"
    for value in (np.nan, np.inf, -np.inf):
        bad = [a.copy() for a in ref]
        bad[2][0, 1] = value
        assert check_weights(ref, bad) == "array 2: non-finite values"


@pytest.mark.parametrize("spec", [DISCRETE, CONTINUOUS])
def test_sample_same_generator_seed_same_actions(spec: PolicySpec) -> None:
    m = _model(spec)
    obs = torch.randn(16, spec.obs_dim)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a1, lp1 = m.sample(obs, g1)
    torch.manual_seed(12345)  # the global RNG must not matter
    a2, lp2 = m.sample(obs, g2)
    assert torch.equal(a1, a2)
    assert torch.equal(lp1, lp2)
    assert lp1.shape == (16,)
    a3, _ = m.sample(obs, torch.Generator().manual_seed(8))
    assert not torch.equal(a1, a3)


def test_discrete_sample_log_prob_matches_log_prob_entropy() -> None:
    m = _model(DISCRETE)
    obs = torch.randn(10, 4)
    with torch.no_grad():
        a, lp = m.sample(obs, torch.Generator().manual_seed(0))
        lp2, ent = m.log_prob_entropy(obs, a)
        logits = m.actor(obs)
    assert a.dtype == torch.int64 and a.shape == (10,)
    assert set(a.tolist()) <= {0, 1}
    torch.testing.assert_close(lp, lp2)
    expected = torch.log_softmax(logits, -1).gather(1, a[:, None]).squeeze(1)
    torch.testing.assert_close(lp, expected)
    assert ent.shape == (10,)


def test_continuous_sample_log_prob_is_normal_log_prob_sum() -> None:
    m = _model(CONTINUOUS)
    with torch.no_grad():
        m.log_std.copy_(torch.tensor([-0.5, 0.3]))
        obs = torch.randn(6, 3)
        a, lp = m.sample(obs, torch.Generator().manual_seed(3))
        mean = m.actor(obs)
        std = torch.exp(torch.tensor([-0.5, 0.3]))
        expected = Normal(mean, std).log_prob(a).sum(-1)
        lp2, ent = m.log_prob_entropy(obs, a)
    assert a.shape == (6, 2)
    torch.testing.assert_close(lp, expected)
    torch.testing.assert_close(lp2, expected)
    # entropy of N(mu, s) = 0.5 + 0.5 log(2 pi) + log s, summed over the 2 dims
    h = 2 * (0.5 + 0.5 * np.log(2 * np.pi)) + (-0.5 + 0.3)
    torch.testing.assert_close(ent, torch.full((6,), h, dtype=torch.float32))
    # the sample is mean + std * noise with noise from the generator
    noise = torch.randn((6, 2), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a, mean + std * noise)


def test_greedy() -> None:
    d = _model(DISCRETE)
    obs = torch.randn(5, 4)
    with torch.no_grad():
        assert torch.equal(d.greedy(obs), d.actor(obs).argmax(-1))
        c = _model(CONTINUOUS)
        o3 = torch.randn(5, 3)
        assert torch.equal(c.greedy(o3), c.actor(o3))


def test_value_shape() -> None:
    assert _model(DISCRETE).value(torch.zeros(7, 4)).shape == (7,)


def test_spec_for_cartpole_and_pendulum() -> None:
    cp = gym.make("CartPole-v1")
    pd = gym.make("Pendulum-v1")
    try:
        assert spec_for(cp.observation_space, cp.action_space, (64, 64)) == PolicySpec(4, "discrete", 2, (64, 64))
        assert spec_for(pd.observation_space, pd.action_space, (32,)) == PolicySpec(
            3, "continuous", 1, (32,), (-2.0,), (2.0,)
        )
    finally:
        cp.close()
        pd.close()


def test_spec_for_rejects_unsupported_spaces() -> None:
    from gymnasium import spaces

    box = spaces.Box(-1.0, 1.0, (3,))
    with pytest.raises(ValueError, match="observations"):
        spec_for(spaces.Box(-1.0, 1.0, (2, 2)), spaces.Discrete(2), (8,))
    with pytest.raises(ValueError, match="observations"):
        spec_for(spaces.Discrete(3), spaces.Discrete(2), (8,))
    with pytest.raises(ValueError, match="actions"):
        spec_for(box, spaces.MultiDiscrete([2, 2]), (8,))
    with pytest.raises(ValueError, match="actions"):
        spec_for(box, spaces.Box(-1.0, 1.0, (2, 2)), (8,))
