"""DQN's maths (issue 17): Double DQN n-step targets, the weighted Huber loss, the dueling head
and the schedules, on tiny batches computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrl.rl.dqn import (
    QNetwork,
    beta_at,
    double_dqn_target,
    dqn_loss,
    epsilon_at,
    greedy_or_random,
    lr_at,
    soft_update,
)
from fedrl.rl.networks import PolicySpec


def test_double_dqn_target_takes_the_online_argmax_and_the_target_value() -> None:
    online = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    target = torch.tensor([[10.0, 20.0], [30.0, 40.0]])
    y = double_dqn_target(online, target, torch.tensor([1.0, 1.0]), torch.tensor([0.5, 0.0]))
    # row 0: online picks action 1, target values it 20: 1 + 0.5 * 20; row 1: terminal, discount 0
    assert y.tolist() == [11.0, 1.0]
    # plain DQN would have taken max target = 40 in row 1 and 20 in row 0: double differs where they disagree
    y2 = double_dqn_target(online, target, torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0]))
    assert y2.tolist() == [20.0, 30.0]


def test_n_step_discount_enters_the_target_as_given() -> None:
    # a 3-step transition with gamma 0.9: discount 0.729 multiplies the bootstrapped value
    y = double_dqn_target(torch.tensor([[0.0, 1.0]]), torch.tensor([[5.0, 2.0]]), torch.tensor([2.71]),
                          torch.tensor([0.729]))
    assert y.item() == pytest.approx(2.71 + 0.729 * 2.0)


def test_weighted_huber_loss_and_td_errors_by_hand() -> None:
    q = torch.tensor([[1.0, 2.0], [3.0, 4.0], [0.0, 0.0]], requires_grad=True)
    action = torch.tensor([1, 0, 1])
    target = torch.tensor([2.5, 3.0, 3.0])
    weights = torch.tensor([1.0, 0.5, 2.0])
    loss, td = dqn_loss(q, action, target, weights)
    # q_sa = (2, 3, 0); td = (0.5, 0, 3); Huber(delta 1): 0.5 * 0.25 = 0.125, 0, |3| - 0.5 = 2.5
    assert td.tolist() == [0.5, 0.0, 3.0]
    assert loss.item() == pytest.approx((1.0 * 0.125 + 0.5 * 0.0 + 2.0 * 2.5) / 3)
    loss.backward()
    assert q.grad is not None
    # d/dq_sa: -w * clip(td, -1, 1) / batch; other actions get no gradient
    np.testing.assert_allclose(q.grad.numpy(), [[0.0, -0.5 / 3], [0.0, 0.0], [0.0, -2.0 / 3]], rtol=1e-6)
    assert not td.requires_grad


def test_dueling_head_is_value_plus_centred_advantage() -> None:
    net = QNetwork(PolicySpec(2, "discrete", 3, (4,)), dueling=True)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.trunk[0].bias.fill_(1.0)  # relu(1) = 1 in every unit
        net.value.weight.fill_(0.5)  # V = 4 * 0.5 = 2
        net.head.bias.copy_(torch.tensor([1.0, 2.0, 6.0]))  # A = (1, 2, 6), mean 3
    q = net(torch.zeros(1, 2))
    assert q.tolist() == [[0.0, 1.0, 5.0]]
    assert net.greedy(torch.zeros(1, 2)).tolist() == [2]
    assert [n for n, _ in net.named_parameters()] == ["trunk.0.weight", "trunk.0.bias", "head.weight", "head.bias",
                                                      "value.weight", "value.bias"]
    with pytest.raises(ValueError, match="discrete"):
        QNetwork(PolicySpec(3, "continuous", 1, (4,)))


def test_schedules() -> None:
    assert epsilon_at(0.0, 1.0, 0.04, 0.2) == 1.0
    assert epsilon_at(0.1, 1.0, 0.04, 0.2) == pytest.approx(0.52)
    assert epsilon_at(0.5, 1.0, 0.04, 0.2) == pytest.approx(0.04)
    assert epsilon_at(0.5, 1.0, 0.04, 0.0) == 0.04
    assert beta_at(0.0, 0.4) == pytest.approx(0.4) and beta_at(0.5, 0.4) == pytest.approx(0.7)
    assert beta_at(2.0, 0.4) == 1.0
    assert lr_at(0.25, 1e-3, 0.0) == pytest.approx(7.5e-4) and lr_at(0.7, 1e-3, -1.0) == 1e-3


def test_error_feedback_sees_dqns_learning_rate_schedule() -> None:
    """With dqn.lr-end the round's mean rate (its middle, the schedule being linear); without, 1."""
    from fedrl.config import DEFAULTS, from_run_config
    from fedrl.registry.algorithms import get

    rc = {**DEFAULTS, "algo.name": "dqn", "num-server-rounds": 4}
    assert get("dqn").round_lr(from_run_config(rc), 2) == 1.0
    assert get("dqn").round_lr(from_run_config({**rc, "dqn.lr-end": 0.0}), 2) == pytest.approx(1e-3 * (1 - 1.5 / 4))


def test_soft_update_and_epsilon_greedy() -> None:
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    with torch.no_grad():
        for p in a.parameters():
            p.fill_(1.0)
        for p in b.parameters():
            p.fill_(3.0)
    soft_update(a, b, 0.25)
    assert all(torch.all(p == 1.5) for p in a.parameters())
    q = torch.tensor([[0.0, 1.0, 0.0]]).repeat(10_000, 1)
    acts = greedy_or_random(q, 0.0, np.random.default_rng(0))
    assert np.all(acts == 1)
    acts = greedy_or_random(q, 0.3, np.random.default_rng(0))
    assert np.mean(acts != 1) == pytest.approx(0.3 * 2 / 3, abs=0.02)  # a random pick is the greedy one a third of the time
