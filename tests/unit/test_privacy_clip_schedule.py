"""privacy.clip-norm-end: the clip norm (and the noise with it) annealed linearly over the rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.privacy import epsilon_after
from fedrl.privacy.plan import plan_for
from fedrl.privacy.server import ServerPrivacy

CARTPOLE = {"env.id": "CartPole-v1", "env.vary": "length=linspace(0.4, 1.2)", "num-server-rounds": 30}
SCHEDULED = {**CARTPOLE, "privacy.mode": "central", "privacy.noise-multiplier": 1.0, "privacy.clip-norm": 0.3,
             "privacy.clip-norm-end": 0.05}


def _plan(**over: object):  # type: ignore[no-untyped-def]
    return plan_for(from_run_config({**SCHEDULED, **over}), continuous=False, dim=9155)


def test_the_clip_norm_goes_linearly_from_start_to_end() -> None:
    p = _plan()
    assert p is not None
    assert p.clip_at(1) == 0.3 and p.clip_at(30) == pytest.approx(0.05, rel=1e-12)
    assert p.clip_at(16) == pytest.approx(0.3 - 0.25 * 15 / 29, rel=1e-12)
    assert p.clip_at(31) == pytest.approx(0.05, rel=1e-12)  # a resumed run past the plan stays at the end
    assert "annealed linearly to 0.05 by round 30" in p.line(30)
    constant = _plan(**{"privacy.clip-norm-end": -1.0})
    assert constant is not None and constant.clip_at(1) == constant.clip_at(30) == 0.3


def test_each_round_noises_for_its_own_clip_norm_at_the_same_epsilon() -> None:
    plan = _plan()
    assert plan is not None
    dp = ServerPrivacy(plan, 100_000)
    dp.schedule(30)
    assert dp.clip == pytest.approx(0.05, rel=1e-12)
    big = np.zeros(100_000)
    big[0] = 10.0  # norm 10: clipped to 0.05 this round
    mean = dp.mean([big, np.zeros(100_000)], selected=2, rnd=30)
    assert float(np.std(mean[1:])) == pytest.approx(0.05 / 2, rel=0.02)  # z C_30 / selected
    assert float(mean[0]) == pytest.approx(0.05 / 2, abs=4 * 0.05 / 2)
    assert dp.epsilon() == pytest.approx(epsilon_after(1.0, 1.0, 1, 1e-5, "rdp"), rel=1e-9)  # the mechanism's z


def test_the_secure_sum_is_noised_for_the_rounds_clip_plus_the_rounding() -> None:
    plan = _plan(**{"secagg.enabled": True, "compression.up": "quantize", "compression.bits": 8,
                    "secagg.clip-range": 0.05})
    assert plan is not None and plan.ring_slack == pytest.approx(2 * 0.05 * math.sqrt(9155) / 255, rel=1e-12)
    dp = ServerPrivacy(plan, 200_000)
    dp.schedule(30)
    mean = dp.secure_mean(np.zeros(200_000), selected=4)
    assert float(mean.std()) == pytest.approx((0.05 + plan.ring_slack) / 4, rel=0.01)


@pytest.mark.parametrize(("over", "words"), [
    ({"privacy.adaptive-clip": True}, "adaptive-clip"),
    ({"privacy.mode": "distributed", "secagg.enabled": True, "compression.up": "quantize"}, "distributed"),
])
def test_a_schedule_is_refused_where_the_clip_norm_is_not_one_per_round(over: dict, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        _plan(**over)
    assert err.value.key == "privacy.clip-norm-end" and words in str(err.value) and "-1" in str(err.value)


@pytest.mark.parametrize("value", [0.0, -0.5])
def test_a_clip_norm_end_that_is_not_positive_or_off_names_the_key(value: float) -> None:
    with pytest.raises(ConfigError) as err:
        from_run_config({"privacy.clip-norm-end": value})
    assert err.value.key == "privacy.clip-norm-end" and "-1 (off)" in str(err.value)
