"""A rule or compressor registered from this file is held to what it declares, before round 1.

Nothing in fedrl names these components: the run's checks read their class attributes
(``ServerRule.privatizable``/``own_privacy``/``accepts_sums``, ``Compressor.summable``/``unmaskable``)
through the registries (``fedrl.features.components``). A rule that keeps the default
``privatizable = False`` once ran under central DP with no noise and reported epsilon 0.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fedrl.aggregation.fedavg import weighted_mean
from fedrl.checks.validate import check
from fedrl.cli import main
from fedrl.compression import compressors
from fedrl.compression.base import Compressed, Compressor
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.registry.rules import register, unregister
from fedrl.rules.base import ServerRule, Update
from fedrl.rules.private import Private
from fedrl.server.federation import Federation

SMALL = {"nodes.count": 3, "num-server-rounds": 2, "algo.local-steps": 256, "eval.episodes": 1,
         "algo.norm-obs": "off"}
CENTRAL = {"privacy.mode": "central", "privacy.noise-multiplier": 1.0, "privacy.clip-norm": 0.5}


class PlainMean(ServerRule):
    """The env-step-weighted mean, stepped; declares nothing (the defaults: not privatizable, no sums)."""

    def aggregate(self, updates: list[Update], rnd: int) -> None:
        if updates:
            self.step(weighted_mean([u.delta for u in updates], [u.reply.env_steps for u in updates]), rnd)


class DeclaredMean(PlainMean):
    """The same rule, declaring what it is: a mean and a step, and steppable with a secure sum."""

    privatizable = True
    accepts_sums = True


class Halves(Compressor):
    """float16 values: a real compressor whose payload sums overflow and lose precision (not summable)."""

    name = "halves"

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> Compressed:
        return Compressed(self.name, {"values": x.astype(np.float16)}, int(x.size))

    def decode(self, c: Compressed) -> np.ndarray:
        self._check_payload(c, ("values",))
        return c.arrays["values"].astype(np.float32)


@pytest.fixture
def rules() -> Iterator[None]:
    register("plain-mean", PlainMean)
    register("declared-mean", DeclaredMean)
    yield
    unregister("plain-mean")
    unregister("declared-mean")


@pytest.fixture
def halves() -> Iterator[None]:
    compressors.register("halves", Halves)
    yield
    compressors.unregister("halves")


@pytest.mark.usefixtures("rules")
def test_a_rule_that_is_not_privatizable_is_refused_under_central_dp_naming_the_rule_and_the_key() -> None:
    check({**SMALL, "strategy.name": "plain-mean"})  # without DP it is a fine rule
    with pytest.raises(ConfigError) as err:
        check({**SMALL, **CENTRAL, "strategy.name": "plain-mean"})
    assert err.value.key == "strategy.name"
    assert str(err.value).startswith("strategy.name: plain-mean with privacy.mode = central: it does not declare "
                                     "privatizable = True")
    # a caller that skips the checks cannot build the non-private run either
    with pytest.raises(ConfigError, match="plain-mean with privacy.mode = central"):
        Federation(from_run_config({**SMALL, **CENTRAL, "strategy.name": "plain-mean"}))
    # local DP: the rule would keep no ledger of the nodes' noise
    with pytest.raises(ConfigError, match="plain-mean with privacy.mode = local"):
        check({**SMALL, **CENTRAL, "privacy.mode": "local", "strategy.name": "plain-mean"})


@pytest.mark.usefixtures("rules")
def test_a_rule_that_declares_privatizable_is_wrapped_by_central_dp() -> None:
    cfg = check({**SMALL, **CENTRAL, "strategy.name": "declared-mean"})
    fed = Federation(cfg)
    assert isinstance(fed.rule, Private) and isinstance(fed.rule.inner, DeclaredMean)
    fed.begin_round(1)
    g = [w.copy() for w in fed.models[0]]
    from fedrl.wire import Reply

    fed.aggregate([Reply(n, [w + np.float32(0.01) for w in g], 256, None, {}) for n in range(3)])
    fed.completed(1)
    assert fed.epsilon() is not None and fed.epsilon() > 0  # the round was released with noise, and accounted


@pytest.mark.usefixtures("rules")
def test_a_rule_without_sums_is_refused_under_secure_aggregation() -> None:
    secure = {**SMALL, "secagg.enabled": True, "compression.up": "quantize"}
    check({**secure, "strategy.name": "declared-mean"})
    with pytest.raises(ConfigError) as err:
        check({**secure, "strategy.name": "plain-mean"})
    assert err.value.key == "strategy.name"
    assert "secagg.enabled = true with strategy.name = plain-mean: it does not declare accepts_sums = True" in str(
        err.value)


@pytest.mark.usefixtures("halves")
def test_a_compressor_that_is_not_summable_is_refused_under_secure_aggregation() -> None:
    cfg = check({**SMALL, "compression.up": "halves"})  # a registered name is a valid compression.up
    up = compressors.make_compressor(cfg.compression.up)
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    np.testing.assert_allclose(up.decode(up.encode(x, np.random.default_rng(0))), x, atol=1e-3)
    with pytest.raises(ConfigError) as err:
        check({**SMALL, "secagg.enabled": True, "compression.up": "halves"})
    assert err.value.key == "compression.up"
    assert str(err.value) == ("compression.up: secagg.enabled = true with compression.up = halves: it declares "
                              "summable = False, so the sum of its payloads does not decode to the sum of the "
                              "updates; use compression.up = quantize")
    with pytest.raises(ConfigError, match="compression.up"):
        check({**SMALL, "compression.up": "halvez"})


def test_the_registries_refuse_replacing_a_built_in_compressor() -> None:
    with pytest.raises(ValueError, match="built-in compressor topk"):
        compressors.register("topk", Halves)
    with pytest.raises(ValueError, match="letters, digits"):
        compressors.register("no spaces", Halves)


@pytest.mark.usefixtures("rules", "halves")
def test_check_list_renders_the_declarations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in out[out.index(
        "Components (their declarations, read when a run is checked):") + 1:] if line.strip()}
    assert rows["plain-mean"] == ["no", "no", "-"]
    assert rows["declared-mean"] == ["yes", "yes", "-"]
    assert rows["fedbuff"] == ["no", "no", "central,", "local"]
    assert rows["halves"][:2] == ["no", "no:"] and rows["quantize"] == ["yes", "yes"]
