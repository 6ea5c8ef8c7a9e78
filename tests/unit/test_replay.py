"""Replay for off-policy learners (issue 17): the sum tree, the ring buffer with prioritized
sampling and importance weights, and n-step transitions, against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrl.rl.nstep import NStep, Transitions
from fedrl.rl.replay import Replay
from fedrl.rl.sum_tree import SumTree


# --- sum tree ------------------------------------------------------------------------------
def test_sum_tree_total_and_prefix_search_on_exact_boundaries() -> None:
    t = SumTree(4)
    t.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    assert t.total == 10.0
    assert t.find(np.array([0.0, 0.999, 1.0, 2.999, 3.0, 5.999, 6.0, 9.999])).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    t.update(np.array([1]), np.array([0.0]))  # a zero priority is never found
    assert t.total == 8.0
    assert t.find(np.array([0.5, 1.0, 3.9, 4.0])).tolist() == [0, 2, 2, 3]


def test_sum_tree_with_a_capacity_that_is_no_power_of_two_never_returns_padding() -> None:
    t = SumTree(5)
    t.update(np.arange(5), np.ones(5))
    slots = t.sample(10_000, np.random.default_rng(0))
    assert slots.min() == 0 and slots.max() == 4
    assert t.find(np.array([4.9999999999, 5.0])).tolist() == [4, 4]  # float overshoot steps back to the last slot


def test_sum_tree_update_touches_one_path_only() -> None:
    """O(log n): a single update changes the leaf and its ancestors, nothing else."""
    n = 1 << 12
    t = SumTree(n)
    rng = np.random.default_rng(1)
    t.update(np.arange(n), rng.random(n))
    before = t.tree.copy()
    t.update(np.array([777]), np.array([5.0]))
    changed = np.flatnonzero(before != t.tree)
    assert len(changed) == 13  # the leaf and its 12 ancestors (depth log2(4096) = 12)
    assert t.total == pytest.approx(float(np.sum(t.get(np.arange(n)))), rel=1e-12)


def test_sum_tree_samples_in_proportion_to_priority() -> None:
    """Chi-square goodness of fit of 200,000 draws against p_i / sum(p) over 50 slots."""
    rng = np.random.default_rng(2)
    p = rng.uniform(0.1, 5.0, 50)
    t = SumTree(50)
    t.update(np.arange(50), p)
    draws = np.concatenate([t.sample(1000, rng) for _ in range(200)])
    observed = np.bincount(draws, minlength=50)
    expected = p / p.sum() * len(draws)
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # a wrong sampler (uniform) fails the same test
    assert stats.chisquare(np.bincount(rng.integers(0, 50, len(draws)), minlength=50), expected).pvalue < 1e-6


def test_sum_tree_refuses_bad_priorities_and_slots() -> None:
    t = SumTree(3)
    with pytest.raises(ValueError, match="finite and non-negative"):
        t.update(np.array([0]), np.array([np.nan]))
    with pytest.raises(ValueError, match="finite and non-negative"):
        t.update(np.array([0]), np.array([-1.0]))
    with pytest.raises(IndexError):
        t.update(np.array([3]), np.array([1.0]))
    with pytest.raises(ValueError, match="all zero"):
        t.sample(4, np.random.default_rng(0))


# --- replay buffer ----------------------------------------------------------------------------
def _batch(values: list[float]) -> Transitions:
    v = np.asarray(values, np.float32)
    return Transitions(np.stack([v, -v], 1), v[:, None] % 2, v, np.full(len(v), 0.9, np.float32),
                       np.stack([v + 1, -v - 1], 1))


def test_ring_overwrites_the_oldest() -> None:
    r = Replay(3, obs_dim=2, action_dim=1)
    r.add(_batch([1, 2]))
    r.add(_batch([3, 4, 5]))
    assert len(r) == 3 and r.pos == 2
    assert sorted(r.data["reward"].tolist()) == [3.0, 4.0, 5.0]
    r.add(_batch([6, 7, 8, 9]))  # more than the capacity at once: the newest stay
    assert sorted(r.data["reward"].tolist()) == [7.0, 8.0, 9.0]


def test_uniform_replay_has_unit_weights_and_draws_only_filled_slots() -> None:
    r = Replay(100, obs_dim=2, action_dim=1)
    r.add(_batch([1, 2, 3]))
    idx, t, w = r.sample(500, beta=0.4, rng=np.random.default_rng(0))
    assert set(idx.tolist()) == {0, 1, 2} and np.all(w == 1.0)
    np.testing.assert_array_equal(t.reward, idx + 1)


def test_importance_weights_by_hand() -> None:
    """Priorities 1 and 3 with alpha 1: P = (1/4, 3/4); w_i = (N P_i)^-beta / max_j (N P_j)^-beta."""
    r = Replay(2, obs_dim=2, action_dim=1, alpha=1.0, eps=0.0)
    r.add(_batch([1, 2]))
    r.update_priorities(np.array([0, 1]), np.array([1.0, -3.0]))  # |td|
    idx, _, w = r.sample(2000, beta=0.5, rng=np.random.default_rng(0))
    w0 = (2 * 0.25) ** -0.5  # the rarer slot has the largest weight: it is the max
    w1 = (2 * 0.75) ** -0.5 / w0
    np.testing.assert_allclose(w[idx == 0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(w[idx == 1], w1, rtol=1e-6)
    assert abs(np.mean(idx == 1) - 0.75) < 0.03


def test_new_transitions_enter_with_the_largest_priority_seen() -> None:
    r = Replay(4, obs_dim=2, action_dim=1, alpha=0.5, eps=0.0)
    r.add(_batch([1, 2]))
    r.update_priorities(np.array([0, 1]), np.array([9.0, 0.25]))
    r.add(_batch([3]))
    assert r.tree is not None
    np.testing.assert_allclose(r.tree.get(np.arange(3)), [3.0, 0.5, 3.0])


def test_buffer_round_trips_through_node_state_arrays() -> None:
    r = Replay(5, obs_dim=2, action_dim=1, alpha=0.6)
    r.add(_batch([1, 2, 3, 4, 5, 6, 7]))
    r.update_priorities(np.array([1, 3]), np.array([4.0, 0.1]))
    back = Replay.from_state(r.to_state(), 5, 2, 1, alpha=0.6)
    assert (back.pos, back.count, back.max_priority) == (r.pos, r.count, r.max_priority)
    for f in r.data:
        np.testing.assert_array_equal(back.data[f], r.data[f])
    a = r.sample(64, 0.4, np.random.default_rng(3))
    b = back.sample(64, 0.4, np.random.default_rng(3))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[2], b[2])
    assert len(Replay.from_state({}, 5, 2, 1)) == 0  # a node's first round


def test_a_stored_buffer_that_does_not_fit_is_refused() -> None:
    r = Replay(5, obs_dim=2, action_dim=1)
    r.add(_batch([1, 2, 3]))
    with pytest.raises(ValueError, match="capacity 2"):
        Replay.from_state(r.to_state(), 2, 2, 1)
    with pytest.raises(ValueError, match="shape"):
        Replay.from_state(r.to_state(), 5, 3, 1)


# --- n-step transitions -----------------------------------------------------------------------
def _obs(*xs: float) -> np.ndarray:
    return np.array([[x] for x in xs], np.float32)


def test_n_step_return_and_discount_by_hand() -> None:
    ns = NStep(1, n=3, gamma=0.5)
    no = np.array([False])
    for t, r in enumerate([1.0, 2.0, 3.0, 4.0]):
        ns.step(_obs(t), np.array([t % 2]), np.array([r]), no, no, _obs(t + 1))
    got = ns.take()
    assert got is not None and len(got) == 2
    np.testing.assert_allclose(got.reward, [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3 + 0.25 * 4])
    np.testing.assert_allclose(got.discount, [0.125, 0.125])
    np.testing.assert_array_equal(got.obs[:, 0], [0, 1])
    np.testing.assert_array_equal(got.next_obs[:, 0], [3, 4])
    ns.flush(_obs(4))  # the round ends: the two open windows bootstrap from the current observation
    tail = ns.take()
    assert tail is not None
    np.testing.assert_allclose(tail.reward, [3 + 0.5 * 4, 4])
    np.testing.assert_allclose(tail.discount, [0.25, 0.5])
    np.testing.assert_array_equal(tail.next_obs[:, 0], [4, 4])


def test_termination_cuts_the_windows_and_bootstraps_nothing() -> None:
    ns = NStep(2, n=3, gamma=0.9)
    no, yes = np.array([False, False]), np.array([True, False])
    ns.step(_obs(0, 10), np.array([0, 1]), np.array([1.0, 1.0]), no, no, _obs(1, 11))
    ns.step(_obs(1, 11), np.array([1, 1]), np.array([2.0, 1.0]), yes, no, _obs(99, 12))  # env 0 terminates
    got = ns.take()
    assert got is not None and len(got) == 2  # env 0's two steps; env 1's window is still open
    np.testing.assert_allclose(got.reward, [1 + 0.9 * 2, 2])
    np.testing.assert_array_equal(got.discount, [0, 0])
    np.testing.assert_array_equal(got.next_obs[:, 0], [99, 99])


def test_truncation_bootstraps_from_the_final_observation() -> None:
    ns = NStep(1, n=4, gamma=0.9)
    no, yes = np.array([False]), np.array([True])
    ns.step(_obs(0), np.array([0]), np.array([1.0]), no, no, _obs(1))
    ns.step(_obs(1), np.array([0]), np.array([1.0]), no, yes, _obs(7))
    got = ns.take()
    assert got is not None
    np.testing.assert_allclose(got.reward, [1.9, 1.0], rtol=1e-6)
    np.testing.assert_allclose(got.discount, [0.81, 0.9], rtol=1e-6)
    np.testing.assert_array_equal(got.next_obs[:, 0], [7, 7])


def test_a_resumed_buffer_applies_its_new_alpha_to_the_raw_priorities() -> None:
    r = Replay(4, obs_dim=2, action_dim=1, alpha=0.5, eps=0.0)
    r.add(_batch([1, 2]))
    r.update_priorities(np.array([0, 1]), np.array([4.0, 9.0]))
    back = Replay.from_state(r.to_state(), 4, 2, 1, alpha=1.0)
    assert back.tree is not None
    np.testing.assert_allclose(back.tree.get(np.arange(2)), [4.0, 9.0])
