"""Byzantine nodes and robust rules in the Federation, and the checks before round 1."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.inject.attacks import attack_update, attackers
from fedrl.model.layout import flatten, unflatten
from fedrl.server.federation import Federation
from fedrl.wire import Reply

SMALL = {"nodes.count": 8, "algo.local-steps": 256, "eval.episodes": 1, "strategy.server-lr": 1.0}


def test_attackers_are_explicit_or_drawn_by_seed() -> None:
    assert attackers(from_run_config({**SMALL, "attack.name": "sign-flip", "attack.nodes": "1, 5"})) == {1, 5}
    drawn = attackers(from_run_config({**SMALL, "attack.name": "gaussian", "attack.fraction": 0.25}))
    assert len(drawn) == 2 and drawn == attackers(from_run_config({**SMALL, "attack.name": "gaussian",
                                                                   "attack.fraction": 0.25}))
    assert attackers(from_run_config(SMALL)) == frozenset()
    for over, key in (({"attack.name": "sign-flip", "attack.nodes": "1,x"}, "attack.nodes"),
                      ({"attack.name": "sign-flip", "attack.nodes": "8"}, "attack.nodes"),
                      ({"attack.fraction": 0.25}, "attack.fraction")):
        with pytest.raises(ConfigError) as err:
            attackers(from_run_config({**SMALL, **over}))
        assert err.value.key == key


def test_what_an_attacker_sends() -> None:
    d = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(attack_update("sign-flip", d, 3.0, np.random.default_rng(0)), [-3.0, 6.0])
    g = attack_update("gaussian", np.zeros(100_000, np.float32), 2.0, np.random.default_rng(0))
    assert g.std() == pytest.approx(2.0, rel=0.02)


def _aggregate(rule: str) -> np.ndarray:
    fed = Federation(from_run_config({**SMALL, "strategy.name": rule, "attack.name": "sign-flip",
                                      "attack.nodes": "0,1", "strategy.trim": 0.25}))
    g = fed.models[0]
    honest = np.full(fed.n_params, 0.01, np.float32)
    deltas = [attack_update("sign-flip", honest, 100.0, np.random.default_rng(0)) if n in (0, 1)
              else honest + np.float32(0.001 * n) for n in range(8)]
    fed.aggregate([Reply(n, unflatten(flatten(g) + d, g), 256, None, {}) for n, d in enumerate(deltas)], 1)
    return flatten(fed.models[0]) - flatten(g)


@pytest.mark.parametrize("rule", ["median", "trimmed-mean", "krum", "multi-krum"])
def test_robust_rules_shrug_off_two_sign_flippers_that_ruin_fedavg(rule: str) -> None:
    moved = _aggregate(rule)
    assert np.all(moved > 0.005) and np.all(moved < 0.02), (rule, moved[:3])
    assert np.all(_aggregate("fedavg") < -0.1)


@pytest.mark.parametrize(("over", "key", "words"), [
    ({"strategy.name": "krum", "attack.name": "sign-flip", "attack.fraction": 0.375}, "attack.fraction", "2f + 2"),
    ({"strategy.name": "median", "attack.name": "sign-flip", "attack.nodes": "0,1,2,3"}, "attack.nodes", "half"),
    ({"strategy.name": "trimmed-mean", "attack.name": "gaussian", "attack.nodes": "0"}, "strategy.trim", "raise"),
    ({"strategy.name": "trimmed-mean", "strategy.trim": 0.5}, "strategy.trim", "leaves none"),
    ({"strategy.name": "multi-krum", "strategy.krum-m": 9}, "strategy.krum-m", "at most"),
    ({"strategy.name": "median", "secagg.enabled": True, "compression.up": "quantize"}, "strategy.name", "masking"),
    ({"strategy.name": "median", "privacy.mode": "central", "privacy.noise-multiplier": 1.0}, "strategy.name",
     "sensitivity"),
])
def test_rules_that_cannot_tolerate_the_attack_fail_before_round_1(over: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**SMALL, **over})
    assert err.value.key == key and words in str(err.value), str(err.value)
