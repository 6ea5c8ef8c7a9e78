"""Unit tests for fedrl.rl.advantages.gae: exact values computed by hand."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from fedrl.rl.advantages import gae


def _t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# T=3 steps, E=2 envs. Env 0 terminates at t=1, env 1 truncates at t=1.
REWARDS = _t([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
VALUES = _t([[0.5, 1.0], [1.5, 2.0], [0.2, 0.4]])
# next_values[0] = V(s_1) = values[1]; next_values[1]: env 0 terminated (value must be
# ignored, set to 7.0), env 1 truncated: V(final obs) = 3.0 (NOT values[2] = 0.4, the
# value of the reset observation); next_values[2] = V(obs after the rollout) = [0.6, 0.8].
NEXT_VALUES = _t([[1.5, 2.0], [7.0, 3.0], [0.6, 0.8]])
TERMINATED = _t([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
DONE = _t([[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])


def test_gae_terminated_and_truncated_by_hand() -> None:
    # gamma = 0.9, lam = 0.8, gamma*lam = 0.72
    # delta = r + 0.9 * nv * (1 - term) - v
    #   t=0: e0: 1 + 0.9*1.5 - 0.5 = 1.85      e1: 2 + 0.9*2.0 - 1.0 = 2.8
    #   t=1: e0: 3 + 0       - 1.5 = 1.5       e1: 4 + 0.9*3.0 - 2.0 = 4.7   (truncation bootstraps)
    #   t=2: e0: 5 + 0.9*0.6 - 0.2 = 5.34      e1: 6 + 0.9*0.8 - 0.4 = 6.32
    # A[2] = delta[2]                                   = [5.34, 6.32]
    # A[1] = delta[1] + 0.72 * (1 - done[1]) * A[2]     = [1.5, 4.7]     (trace cut in both)
    # A[0] = delta[0] + 0.72 * A[1] = [1.85 + 1.08, 2.8 + 3.384] = [2.93, 6.184]
    # returns = A + V = [[3.43, 7.184], [3.0, 6.7], [5.54, 6.72]]
    adv, ret = gae(REWARDS, VALUES, NEXT_VALUES, TERMINATED, DONE, gamma=0.9, lam=0.8)
    assert_close(adv, _t([[2.93, 6.184], [1.5, 4.7], [5.34, 6.32]]))
    assert_close(ret, _t([[3.43, 7.184], [3.0, 6.7], [5.54, 6.72]]))


def test_gae_ignores_next_value_of_terminal_step() -> None:
    nv = NEXT_VALUES.clone()
    nv[1, 0] = 1e6  # V of a terminal state: multiplied by (1 - terminated) = 0
    a1, r1 = gae(REWARDS, VALUES, NEXT_VALUES, TERMINATED, DONE, 0.9, 0.8)
    a2, r2 = gae(REWARDS, VALUES, nv, TERMINATED, DONE, 0.9, 0.8)
    assert_close(a1, a2, rtol=0, atol=0)
    assert_close(r1, r2, rtol=0, atol=0)


def test_gae_truncation_bootstraps_from_final_observation_value() -> None:
    nv = NEXT_VALUES.clone()
    nv[1, 1] = 13.0  # V(final obs) 3.0 -> 13.0: delta[1,1] grows by 0.9 * 10 = 9
    a, _ = gae(REWARDS, VALUES, nv, TERMINATED, DONE, 0.9, 0.8)
    # A[1,1] = 4.7 + 9 = 13.7; A[0,1] = 2.8 + 0.72 * 13.7 = 2.8 + 9.864 = 12.664
    assert_close(a[:, 1], torch.tensor([12.664, 13.7, 6.32], dtype=torch.float64))
    assert_close(a[:, 0], torch.tensor([2.93, 1.5, 5.34], dtype=torch.float64))


def test_gae_lambda_one_gamma_one_is_monte_carlo_minus_values() -> None:
    # One env, T=4, episode terminates at the last step: returns are rewards-to-go.
    r = _t([[1.0], [2.0], [3.0], [4.0]])
    v = _t([[0.5], [0.25], [2.0], [1.0]])
    nv = torch.cat([v[1:], _t([[99.0]])])  # last next value ignored (terminated)
    term = _t([[0.0], [0.0], [0.0], [1.0]])
    # rewards-to-go: [1+2+3+4, 2+3+4, 3+4, 4] = [10, 9, 7, 4]
    adv, ret = gae(r, v, nv, term, term.clone(), gamma=1.0, lam=1.0)
    assert_close(ret, _t([[10.0], [9.0], [7.0], [4.0]]))
    assert_close(adv, _t([[9.5], [8.75], [5.0], [3.0]]))


def test_gae_lambda_one_with_bootstrap_and_discount() -> None:
    # gamma=0.5, lam=1, no ends, bootstrap V=8 after the rollout:
    # G_2 = 1 + 0.5*8 = 5; G_1 = 1 + 0.5*5 = 3.5; G_0 = 1 + 0.5*3.5 = 2.75
    r = _t([[1.0], [1.0], [1.0]])
    v = _t([[0.0], [1.0], [2.0]])
    nv = _t([[1.0], [2.0], [8.0]])
    zeros = torch.zeros_like(r)
    adv, ret = gae(r, v, nv, zeros, zeros, gamma=0.5, lam=1.0)
    assert_close(ret, _t([[2.75], [3.5], [5.0]]))
    assert_close(adv, ret - v)


def test_gae_lambda_zero_is_one_step_td_error() -> None:
    adv, ret = gae(REWARDS, VALUES, NEXT_VALUES, TERMINATED, DONE, gamma=0.9, lam=0.0)
    deltas = _t([[1.85, 2.8], [1.5, 4.7], [5.34, 6.32]])  # see test_gae_terminated_and_truncated_by_hand
    assert_close(adv, deltas)
    assert_close(ret, deltas + VALUES)


def test_gae_keeps_dtype_and_shape_float32() -> None:
    args = [x.float() for x in (REWARDS, VALUES, NEXT_VALUES, TERMINATED, DONE)]
    adv, ret = gae(*args, gamma=0.9, lam=0.8)
    assert adv.shape == ret.shape == (3, 2)
    assert adv.dtype == ret.dtype == torch.float32
    assert_close(adv, _t([[2.93, 6.184], [1.5, 4.7], [5.34, 6.32]]).float())


def test_gae_does_not_mutate_inputs() -> None:
    before = [x.clone() for x in (REWARDS, VALUES, NEXT_VALUES, TERMINATED, DONE)]
    gae(REWARDS, VALUES, NEXT_VALUES, TERMINATED, DONE, 0.9, 0.8)
    for b, x in zip(before, (REWARDS, VALUES, NEXT_VALUES, TERMINATED, DONE), strict=True):
        assert torch.equal(b, x)


@pytest.mark.parametrize("which", range(5))
def test_gae_shape_mismatch_raises(which: int) -> None:
    args = [REWARDS, VALUES, NEXT_VALUES, TERMINATED, DONE]
    args[which] = args[which][:2]
    with pytest.raises(ValueError, match="shape"):
        gae(*args, gamma=0.9, lam=0.8)
