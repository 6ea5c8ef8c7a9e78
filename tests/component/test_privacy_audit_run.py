"""The one-run audit on DP-FedAvg's server step: it flags a run without noise, not a noised one."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.model.layout import unflatten
from fedrl.server.federation import Federation
from fedrl.wire import Reply

AUDITED = {"nodes.count": 8, "num-server-rounds": 10, "privacy.mode": "central", "privacy.clip-norm": 0.5,
           "privacy.target-epsilon": 1.0, "privacy.audit-canaries": 500}


def _audited_run(**over: object) -> Federation:
    """Ten rounds of the real server step on random node updates (norms around 2, so all are clipped)."""
    fed = Federation(from_run_config({**AUDITED, **over}))
    rng = np.random.default_rng(0)
    for rnd in range(1, 11):
        g = fed.models[0]
        replies = [Reply(n, unflatten(rng.normal(0, 2 / np.sqrt(fed.n_params), fed.n_params).astype(np.float32), g),
                         256, None, {}) for n in range(8)]
        fed.aggregate([Reply(r.node, [a + b for a, b in zip(g, r.weights, strict=True)], 256, None, {})
                       for r in replies], rnd)
        fed.round = rnd
    return fed


def test_a_properly_noised_run_is_not_flagged() -> None:
    res = _audited_run().audit_result()
    assert res is not None and res.rounds == 10 and res.canaries == 500
    assert res.epsilon_claimed == pytest.approx(1.0, abs=0.01)
    assert not res.flagged and res.epsilon_lower < 1.0, res


def test_a_run_with_its_noise_switched_off_is_flagged() -> None:
    res = _audited_run(**{"privacy.unsafe-no-noise": True}).audit_result()
    assert res is not None and res.flagged and res.epsilon_lower > 2.0, res
    assert res.correct == res.guesses


@pytest.mark.parametrize(("over", "key"), [
    ({"privacy.unsafe-no-noise": True, "privacy.audit-canaries": 0}, "privacy.unsafe-no-noise"),
    ({"privacy.mode": "local", "privacy.noise-multiplier": 1.0, "privacy.target-epsilon": 0.0},
     "privacy.audit-canaries"),
    ({"privacy.adaptive-clip": True, "privacy.count-noise": 20.0}, "privacy.audit-canaries"),
    ({"privacy.mode": "off", "privacy.target-epsilon": 0.0}, "privacy.audit-canaries"),
    ({"privacy.audit-canaries": 1}, "privacy.audit-canaries"),
])
def test_audit_settings_that_cannot_work_fail_before_round_1(over: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        Federation(from_run_config({**AUDITED, **over}))
