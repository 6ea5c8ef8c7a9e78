"""Client-level DP: clipping, noise, accounting and the checks before round 1 (no Flower)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from opacus.accountants import PRVAccountant, RDPAccountant

from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.privacy import Ledger, clip_l2, epsilon_after, gaussian, noise_for_target, private_rng
from fedrl.privacy.node import privatize
from fedrl.privacy.plan import plan_for
from fedrl.privacy.server import ServerPrivacy


def test_clipping_scales_down_to_the_bound_and_leaves_small_updates_alone() -> None:
    out, norm = clip_l2(np.array([3.0, 4.0], np.float32), 1.0)
    assert norm == 5.0
    np.testing.assert_allclose(out, [0.6, 0.8], rtol=2e-6)
    small = np.array([0.1, -0.2], np.float32)
    out, norm = clip_l2(small, 1.0)
    np.testing.assert_array_equal(out, small)
    assert norm == pytest.approx(math.sqrt(0.05))
    rng = np.random.default_rng(0)
    for scale in (1e-3, 1.0, 1e3, 1e6):
        v = (rng.normal(size=9000) * scale).astype(np.float32)
        assert float(np.linalg.norm(clip_l2(v, 0.7)[0].astype(np.float64))) <= 0.7
    with pytest.raises(ValueError, match="clip_norm"):
        clip_l2(small, 0.0)
    with pytest.raises(ValueError, match="non-finite"):
        clip_l2(np.array([np.nan], np.float32), 1.0)


def test_gaussian_noise_has_the_asked_std_and_none_at_zero() -> None:
    x = gaussian(1_000_000, 2.5, np.random.default_rng(1))
    # Standard errors: mean 2.5e-3, std 1.8e-3; the bounds are about 6 of them.
    assert abs(float(x.mean())) < 0.015
    assert float(x.std()) == pytest.approx(2.5, rel=0.005)
    assert not gaussian(10, 0.0, np.random.default_rng(1)).any()
    with pytest.raises(ValueError, match="std"):
        gaussian(10, -1.0, np.random.default_rng(1))


def test_private_rng_streams_differ() -> None:
    assert private_rng().integers(0, 2**62) != private_rng().integers(0, 2**62)


def _rdp_epsilon_closed_form(z: float, steps: int, delta: float) -> float:
    """Without sampling the Gaussian mechanism's RDP is alpha / (2 z^2) per step (Mironov 2017);
    converted to (eps, delta) as Opacus does (Balle et al. 2020), over Opacus' default orders."""
    orders = np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)), np.float64)
    rdp = steps * orders / (2 * z * z)
    eps = rdp - (np.log(delta) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)
    return float(np.min(eps))


@pytest.mark.parametrize(("z", "steps"), [(1.0, 30), (3.5, 30), (0.8, 5), (10.0, 200)])
def test_rdp_epsilon_matches_opacus_and_the_closed_form(z: float, steps: int) -> None:
    led = Ledger("rdp", 1e-5)
    for _ in range(steps):
        led.step(z, 1.0)
    acc = RDPAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=z, sample_rate=1.0)
    assert led.epsilon() == acc.get_epsilon(delta=1e-5)
    assert led.epsilon() == pytest.approx(_rdp_epsilon_closed_form(z, steps, 1e-5), rel=1e-12)
    assert epsilon_after(z, 1.0, steps, 1e-5) == led.epsilon()


def test_golden_epsilon_values() -> None:
    # Written down from the closed form above; a changed accountant or conversion shows here.
    assert epsilon_after(1.0, 1.0, 30, 1e-5) == pytest.approx(39.83175401905626, rel=1e-9)
    assert epsilon_after(3.49609375, 1.0, 30, 1e-5) == pytest.approx(7.990593919433694, rel=1e-9)


def test_prv_epsilon_matches_opacus_and_subsampling_is_accounted() -> None:
    acc = PRVAccountant()
    for _ in range(20):
        acc.step(noise_multiplier=1.2, sample_rate=0.5)
    assert epsilon_after(1.2, 0.5, 20, 1e-5, "prv") == pytest.approx(acc.get_epsilon(delta=1e-5), rel=1e-6)
    assert epsilon_after(1.2, 0.5, 20, 1e-5) < epsilon_after(1.2, 1.0, 20, 1e-5)


def test_ledger_composes_changing_steps_and_round_trips() -> None:
    led = Ledger("rdp", 1e-5)
    led.step(2.0, 1.0)
    led.step(2.0, 1.0)
    led.step(3.0, 1.0)
    assert led.history == [(2.0, 1.0, 2), (3.0, 1.0, 1)] and led.steps == 3
    acc = RDPAccountant()
    acc.history = [(2.0, 1.0, 2), (3.0, 1.0, 1)]
    assert led.epsilon() == acc.get_epsilon(delta=1e-5)
    assert led.epsilon((3.0, 1.0)) > led.epsilon()
    back = Ledger("rdp", 1e-5)
    back.load_list(led.to_list())
    assert back.history == led.history and back.epsilon() == led.epsilon()
    assert Ledger("rdp", 1e-5).epsilon() == 0.0


def test_noise_for_a_target_meets_it_tightly() -> None:
    z = noise_for_target(8.0, 1e-5, 1.0, 30)
    assert 7.9 <= epsilon_after(z, 1.0, 30, 1e-5) <= 8.0


def test_budget_stop_round_is_the_first_that_would_exceed() -> None:
    led = Ledger("rdp", 1e-5)
    z, budget = 2.0, 5.0
    rounds = 0
    while led.epsilon((z, 1.0)) <= budget:
        led.step(z, 1.0)
        rounds += 1
    assert epsilon_after(z, 1.0, rounds, 1e-5) <= budget < epsilon_after(z, 1.0, rounds + 1, 1e-5)
    assert rounds == 4  # at z = 2: eps 4.73 after 4 rounds; a 5th would give 5.38


CARTPOLE = {"env.id": "CartPole-v1", "env.vary": "length=linspace(0.4, 1.2)"}


def _plan(**over: object):  # type: ignore[no-untyped-def]
    return plan_for(from_run_config({**CARTPOLE, **over}), continuous=False, dim=9155)


def test_plan_resolves_the_noise_and_states_the_sampling_assumption() -> None:
    assert _plan() is None
    p = _plan(**{"privacy.mode": "central", "privacy.target-epsilon": 8.0, "num-server-rounds": 30})
    assert p is not None and p.budget == 8.0 and p.q == 1.0
    assert p.z == pytest.approx(noise_for_target(8.0, 1e-5, 1.0, 30))
    assert "ε = 7.9" in p.line(30) and "sampling rate 1" in p.line(30)
    p = _plan(**{"privacy.mode": "local", "privacy.noise-multiplier": 1.5, "fraction-train": 0.5})
    assert p is not None and p.z == 1.5 and p.budget is None and "no amplification" in p.note


DIST = {"privacy.mode": "distributed", "privacy.noise-multiplier": 1.0, "secagg.enabled": True,
        "compression.up": "quantize"}


SECURE_CENTRAL = {"privacy.mode": "central", "privacy.noise-multiplier": 1.0, "secagg.enabled": True,
                  "compression.up": "quantize", "compression.bits": 8, "secagg.clip-range": 0.05}


def test_central_dp_under_secure_aggregation_counts_the_rounding_in_the_sensitivity() -> None:
    plan = _plan(**SECURE_CENTRAL)  # the default CartPole model: 9,155 parameters
    assert plan is not None and plan.mode == "central"
    assert plan.ring_slack == pytest.approx(2 * 0.05 * math.sqrt(9155) / 255, rel=1e-12)
    assert plan.sensitivity == pytest.approx(1.0 + plan.ring_slack, rel=1e-12)
    assert plan.sensitivity_at(0.25) == 0.25 + plan.ring_slack  # an annealed round's clip, the same slack
    assert f"sensitivity {plan.sensitivity:.4g}" in plan.line(10)
    plain = _plan(**{"privacy.mode": "central", "privacy.noise-multiplier": 1.0})
    assert plain is not None and plain.ring_slack == 0.0 and plain.sensitivity == plain.clip


def test_the_secure_central_mean_noises_the_sum_for_clip_plus_slack() -> None:
    plan = _plan(**SECURE_CENTRAL)
    assert plan is not None
    dp = ServerPrivacy(plan, 200_000)
    total = np.full(200_000, 3.0)
    mean = dp.secure_mean(total, selected=4)
    assert mean.dtype == np.float32
    assert float(mean.mean()) == pytest.approx(0.75, abs=0.01)
    assert float(mean.std()) == pytest.approx(plan.sensitivity / 4, rel=0.01)  # z * S / selected, z = 1
    assert dp.ledger.epsilon() == pytest.approx(epsilon_after(1.0, 1.0, 1, 1e-5, "rdp"), rel=1e-9)


def test_poisson_selection_claims_amplification_and_refuses_what_it_cannot_cover() -> None:
    over = {"privacy.mode": "central", "privacy.target-epsilon": 8.0, "num-server-rounds": 30, "nodes.count": 1000,
            "fraction-train": 0.1, "selection.name": "poisson"}
    plan = _plan(**over)
    assert plan is not None and plan.q == 0.1 and "Poisson sampling" in plan.note and "expected 100" in plan.note
    assert plan.z == pytest.approx(noise_for_target(8.0, 1e-5, 0.1, 30))
    assert plan.z < 0.25 * noise_for_target(8.0, 1e-5, 1.0, 30)  # amplification: 0.78 against 3.5
    with pytest.raises(ConfigError) as err:  # 8 nodes at q = 0.1: some round draws nobody, far too likely
        _plan(**{**over, "nodes.count": 8})
    assert err.value.key == "fraction-train" and "draws nobody" in str(err.value)
    with pytest.raises(ConfigError) as err:
        _plan(**{**over, **DIST, "privacy.noise-multiplier": 1.0, "privacy.target-epsilon": 0.0})
    assert err.value.key == "selection.name"


def test_distributed_plan_splits_the_noise_over_the_fewest_nodes_a_sum_can_have() -> None:
    plan = _plan(**DIST)  # 8 nodes, all selected, plain SecAgg with threshold 0.6: a sum has 5 to 8 nodes
    assert plan is not None and plan.dist is not None
    d = plan.dist
    assert (d.bits, d.nodes, d.share, d.dim) == (24, 8, 5, 9155) and plan.z == pytest.approx(1.0, rel=1e-9)
    assert plan.next_round_cost() == (d.mu, 1.0)
    assert d.mu_with(8) == pytest.approx(d.mu * 8 / 5)
    assert "distributed DP" in plan.line(30) and "5 of 8 nodes" in plan.line(30)
    assert _plan(**DIST, **{"secagg.neighbors": 4}).dist.share == 3  # type: ignore[union-attr]


@pytest.mark.parametrize(("over", "key", "words"), [
    ({"privacy.mode": "central"}, "privacy.noise-multiplier", "needs noise"),
    ({"privacy.target-epsilon": 3.0}, "privacy.target-epsilon", "privacy.mode = off"),
    ({"privacy.mode": "central", "privacy.target-epsilon": 1e-4}, "privacy.target-epsilon", "cannot be met"),
    ({"privacy.mode": "central", "privacy.noise-multiplier": 0.5, "privacy.target-epsilon": 1.0},
     "privacy.target-epsilon", "one round"),
    ({"privacy.mode": "local", "privacy.noise-multiplier": 1.0, "secagg.enabled": True,
      "compression.up": "quantize"}, "privacy.mode", "secagg.enabled"),
    ({**SECURE_CENTRAL, "privacy.adaptive-clip": True, "privacy.count-noise": 2.0}, "privacy.adaptive-clip",
     "only the sum"),
    ({**SECURE_CENTRAL, "privacy.audit-canaries": 100}, "privacy.audit-canaries", "only the sum"),
    ({"privacy.mode": "central", "privacy.noise-multiplier": 1.0, "strategy.name": "local"}, "privacy.mode", "local"),
    ({"privacy.mode": "central", "privacy.noise-multiplier": 1.0, "algo.norm-obs": "on"}, "algo.norm-obs", "without noise"),
    ({"privacy.mode": "distributed", "privacy.noise-multiplier": 1.0}, "privacy.mode", "needs secagg.enabled"),
    ({**DIST, "secagg.bits": 12}, "secagg.bits", "16 to 32 bits"),
    ({**DIST, "secagg.bits": 16, "privacy.noise-multiplier": 3000.0}, "secagg.bits", "cannot hold"),
    ({**DIST, "privacy.noise-multiplier": 0.0, "privacy.target-epsilon": 1e-4}, "privacy.target-epsilon",
     "cannot be met"),
    ({**DIST, "privacy.adaptive-clip": True}, "privacy.adaptive-clip", "distributed"),
    ({**DIST, "privacy.audit-canaries": 100}, "privacy.audit-canaries", "distributed"),
])
def test_impossible_privacy_settings_fail_before_round_one(over: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        _plan(**over)
    assert err.value.key == key and words in str(err.value), str(err.value)


@pytest.mark.parametrize(("key", "value"), [("privacy.noise-multiplier", -0.1), ("privacy.clip-norm", 0.0),
                                            ("privacy.delta", 0.0), ("privacy.delta", 1.0),
                                            ("privacy.mode", "distributed-ish")])
def test_malformed_privacy_values_name_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as err:
        from_run_config({key: value})
    assert err.value.key == key


def test_privatize_clips_and_local_mode_adds_noise_of_the_right_size() -> None:
    central = _plan(**{"privacy.mode": "central", "privacy.noise-multiplier": 2.0, "privacy.clip-norm": 0.5})
    local = _plan(**{"privacy.mode": "local", "privacy.noise-multiplier": 2.0, "privacy.clip-norm": 0.5})
    assert central is not None and local is not None
    v = np.full(100_000, 1.0, np.float32)
    c, below = privatize(v, central)
    assert float(np.linalg.norm(c.astype(np.float64))) <= 0.5 and not below
    np.testing.assert_allclose(c, np.full_like(v, 0.5 / math.sqrt(v.size)), rtol=2e-6)
    noisy, _ = privatize(v, local)
    assert float((noisy - c).std()) == pytest.approx(1.0, rel=0.02)  # z * C
    small, below = privatize(v * 1e-4, central, clip=0.5)
    assert below and np.array_equal(small, v * np.float32(1e-4))
    wider, below = privatize(v, central, clip=2.0)  # adaptive clipping's norm of the round
    assert float(np.linalg.norm(wider.astype(np.float64))) == pytest.approx(2.0, rel=1e-5) and not below


def test_adaptive_clipping_splits_the_noise_as_andrew_et_al() -> None:
    p = _plan(**{"privacy.mode": "central", "privacy.noise-multiplier": 1.0, "privacy.adaptive-clip": True,
                 "privacy.count-noise": 2.0})
    assert p is not None and p.adaptive and p.count_std == 2.0
    assert p.z_update == pytest.approx((1.0 - 1 / 16) ** -0.5)  # z^-2 = z_update^-2 + (2 sigma_b)^-2
    assert "adaptive" in p.line(30)
    default = _plan(**{"privacy.mode": "central", "privacy.noise-multiplier": 0.5, "privacy.adaptive-clip": True,
                       "nodes.count": 40})
    assert default is not None and default.count_std == 2.0  # 40 nodes a round / 20
    with pytest.raises(ConfigError) as err:
        _plan(**{"privacy.mode": "central", "privacy.noise-multiplier": 1.0, "privacy.adaptive-clip": True})
    assert err.value.key == "privacy.count-noise"  # 8 nodes: 0.4, and 2 x 0.4 <= 1
    with pytest.raises(ConfigError) as err:
        _plan(**{"privacy.mode": "local", "privacy.noise-multiplier": 1.0, "privacy.adaptive-clip": True})
    assert err.value.key == "privacy.adaptive-clip"
