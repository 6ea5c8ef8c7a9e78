"""The PPO entropy floor (``ppo.ent-floor``): a per-state hinge, exact values and what it does."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.rl.losses import ENTROPY_FLOOR_SLOPE, entropy_floor_penalty, ppo_loss
from fedrl.rl.networks import PolicySpec
from fedrl.rl.train import hyper

F64 = torch.float64


def test_the_penalty_is_a_hinge_per_state() -> None:
    ent = torch.tensor([0.1, 0.5, 0.6, 0.9], dtype=F64)
    assert ENTROPY_FLOOR_SLOPE == 1.0
    assert_close(entropy_floor_penalty(ent, 0.6), torch.tensor([0.5, 0.1, 0.0, 0.0], dtype=F64))
    assert_close(entropy_floor_penalty(ent, 0.0), torch.zeros(4, dtype=F64))
    two_d = entropy_floor_penalty(ent.reshape(2, 2), 0.6)  # the cohort path's [K, B]: shape kept
    assert_close(two_d, torch.tensor([[0.5, 0.1], [0.0, 0.0]], dtype=F64))


def test_ppo_loss_adds_the_mean_penalty_and_its_gradient_only_below_the_floor() -> None:
    new = torch.tensor([-1.0, -1.0, -1.0], dtype=F64)
    adv = torch.tensor([1.0, -1.0, 0.5], dtype=F64)
    v = torch.zeros(3, dtype=F64)
    kw = {"clip_coef": 0.2, "clip_vloss": False, "ent_coef": 0.0, "vf_coef": 0.5}
    ent = torch.tensor([0.2, 0.4, 0.9], dtype=F64, requires_grad=True)
    off = ppo_loss(new, new, ent, v, v, adv, v, **kw)
    on = ppo_loss(new, new, ent, v, v, adv, v, **kw, ent_floor=0.5)
    assert_close(on.total - off.total, torch.tensor((0.3 + 0.1 + 0.0) / 3, dtype=F64))
    (grad,) = torch.autograd.grad(on.total, ent)
    assert_close(grad, torch.tensor([-1 / 3, -1 / 3, 0.0], dtype=F64))  # the state above the floor feels nothing
    assert_close(on.entropy, off.entropy)  # the reported entropy is the entropy, not the penalty


def test_the_fraction_becomes_nats_of_the_action_space() -> None:
    cfg = from_run_config({"ppo.ent-floor": 0.25})
    assert cfg.ppo.ent_floor == 0.25
    three = PolicySpec(obs_dim=6, action_kind="discrete", action_dim=3)
    assert hyper(cfg.ppo, three).ent_floor == pytest.approx(0.25 * math.log(3), rel=1e-12)
    gauss = PolicySpec(obs_dim=3, action_kind="continuous", action_dim=1)
    assert hyper(cfg.ppo, gauss).ent_floor == 0.0  # not applied to Gaussian policies
    assert hyper(from_run_config({"ppo.ent-floor": 0}).ppo, three).ent_floor == 0.0


@pytest.mark.parametrize("bad", [1.0, -0.1, 1.5])
def test_a_floor_outside_zero_one_is_refused_by_key(bad: float) -> None:
    with pytest.raises(ConfigError, match=r"ppo\.ent-floor"):
        from_run_config({"ppo.ent-floor": bad})


def test_the_floor_holds_a_policy_that_the_surrogate_drives_to_one_action() -> None:
    """The mechanism: a constant advantage for action 0 drives a softmax policy to determinism;
    with the floor its per-state entropy stops at the floor (within the hinge's balance), while
    without it the entropy falls to ~0."""

    def train(floor: float) -> torch.Tensor:
        logits = torch.zeros(8, 3, dtype=F64, requires_grad=True)  # 8 states, 3 actions
        opt = torch.optim.Adam([logits], lr=0.1)
        act = torch.zeros(8, dtype=torch.long)
        adv = torch.ones(8, dtype=F64)
        v = torch.zeros(8, dtype=F64)
        for _ in range(300):
            d = torch.distributions.Categorical(logits=logits)
            logp = d.log_prob(act)
            parts = ppo_loss(logp, logp.detach(), d.entropy(), v, v, adv, v, clip_coef=0.2, clip_vloss=False,
                             ent_coef=0.0, vf_coef=0.0, ent_floor=floor)
            opt.zero_grad()
            parts.total.backward()
            opt.step()
        return torch.distributions.Categorical(logits=logits.detach()).entropy()

    floor = 0.3 * math.log(3)
    held, free = train(floor), train(0.0)
    assert float(free.max()) < 0.05 * floor
    assert float(held.min()) > 0.9 * floor and float(held.max()) < 1.1 * floor, held
