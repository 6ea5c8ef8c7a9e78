"""Unit tests for fedrl.features.compat (the rule loop, the table) and the declarations in fedrl.features."""

from __future__ import annotations

import dataclasses
from typing import get_args, get_type_hints

import pytest

from fedrl.cli import main
from fedrl.config import Config, StrategyConfig, from_run_config
from fedrl.features import FEATURES
from fedrl.features.compat import Feature, Rule, conflict, declaration_errors, table
from fedrl.features.secure import SECAGG_STAGES
from fedrl.inject import dropout

BY_NAME = {f.name: f for f in FEATURES}


def _on(name: str) -> Feature:
    return Feature(name, "seed", f"{name} is on", lambda cfg: True)


def _off(name: str) -> Feature:
    return Feature(name, "seed", f"{name} is off", lambda cfg: False)


def _rule(*features: str, key: str = "seed", why: str = "because") -> Rule:
    return Rule(features, key, why, lambda cfg: f"{why}: {', '.join(features)}")


def test_the_declarations_name_only_declared_features_once() -> None:
    assert declaration_errors(FEATURES) == []
    assert declaration_errors([_on("a"), _on("a"), Feature("b", "seed", "", lambda cfg: True, (_rule("c"),))]) == [
        "a is declared twice", "b: a rule names c, which is not declared"]


def test_a_requirement_is_met_by_any_of_its_features_and_an_exclusion_broken_by_any() -> None:
    cfg = Config()
    needs = Feature("needs", "seed", "", lambda cfg: True, requires=(_rule("x", "y", key="env.id"),))
    assert conflict(cfg, [needs, _off("x"), _on("y")]) is None
    err = conflict(cfg, [needs, _off("x"), _off("y")])
    assert err is not None and err.key == "env.id" and str(err) == "env.id: because: x, y"
    shuns = Feature("shuns", "seed", "", lambda cfg: True, excludes=(_rule("x", "y"),))
    assert conflict(cfg, [shuns, _off("x"), _off("y")]) is None
    assert str(conflict(cfg, [shuns, _off("x"), _on("y")])) == "seed: because: x, y"


def test_an_inactive_feature_s_rules_are_not_checked_and_the_first_broken_rule_wins() -> None:
    cfg = Config()
    idle = Feature("idle", "seed", "", lambda cfg: False, excludes=(_rule("on", why="idle"),))
    first = Feature("first", "seed", "", lambda cfg: True, requires=(_rule("off", why="first needs"),),
                    excludes=(_rule("on", why="first shuns"),))
    assert str(conflict(cfg, [idle, first, _on("on"), _off("off")])) == "seed: first needs: off"


def test_active_runs_at_most_once_per_check() -> None:
    calls: list[str] = []

    def counted(cfg: Config) -> bool:
        calls.append("x")
        return False

    rules = tuple(Feature(f"f{i}", "seed", "", lambda cfg: True, excludes=(_rule("x"),)) for i in range(3))
    assert conflict(Config(), [*rules, Feature("x", "seed", "", counted)]) is None
    assert calls == ["x"]


def test_the_table_lists_every_feature_and_what_it_requires_and_excludes() -> None:
    lines = table(FEATURES)
    listed = [line.split()[0] for line in lines[1:] if not line.startswith(" ")]
    assert listed == [f.name for f in FEATURES]
    block = lines[lines.index(next(x for x in lines if x.startswith("secagg "))):]
    block = block[:next(i for i, x in enumerate(block[1:], 1) if not x.startswith(" "))]
    assert any("excludes robust-rule (a robust rule looks at each update" in line for line in block)
    assert any("requires up-quantize or privacy-distributed" in line for line in block)
    assert any(line.strip().startswith("excluded by") and "unmaskable-uplink" in line and "rule-without-sums" in line
               for line in block)  # what the compressors and the rule declare (fedrl.features.components)


def test_check_list_prints_the_keys_then_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--list"]) == 0
    out = capsys.readouterr().out
    assert out.index("secagg.enabled") < out.index("Feature compatibility")
    assert out.index("Feature compatibility") < out.index("Components (their declarations")
    assert "topk             no            no: each node keeps different coordinates" in out


def test_every_strategy_but_fedavg_belongs_to_exactly_one_family() -> None:
    families = ("fedprox", "server-optimizer", "robust-rule", "asynchronous-rule", "local")
    for name in get_args(get_type_hints(StrategyConfig)["name"]):
        cfg = dataclasses.replace(Config(), strategy=dataclasses.replace(StrategyConfig(), name=name))
        member = [f for f in families if BY_NAME[f].active(cfg)]
        assert len(member) == (0 if name == "fedavg" else 1), (name, member)


def test_the_secure_aggregation_stages_are_those_of_fedrl_dropout() -> None:
    assert SECAGG_STAGES == dropout.SECAGG_STAGES


@pytest.mark.parametrize(("over", "feature"), [
    ({"secagg.enabled": True}, "secagg"),
    ({"strategy.name": "krum"}, "robust-rule"),
    ({"compression.up": "topk"}, "up-topk"),
    ({"compression.down": "fp16"}, "downlink-compression"),
    ({"privacy.mode": "central"}, "privacy-central"),
    ({"round.deadline-s": 5.0}, "round-deadline"),
    ({"fraction-train": 0.5}, "partial-rounds"),
    ({"attack.name": "huge-weights", "attack.fraction": 0.25}, "hostile-reply-attack"),
    ({"algo.name": "sac"}, "replay"),
    ({"algo.name": "dqn"}, "replay"),
])
def test_a_setting_turns_its_feature_on(over: dict[str, object], feature: str) -> None:
    assert not BY_NAME[feature].active(from_run_config({}))
    assert BY_NAME[feature].active(from_run_config(over))


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_dp_sgd_with_a_replay_learner_is_refused_naming_the_algorithm(algo: str) -> None:
    cfg = from_run_config({"algo.name": algo, "privacy.dpsgd": True, "algo.norm-obs": "off",
                           "algo.norm-reward": "off"})
    err = conflict(cfg, FEATURES)
    assert err is not None and err.key == "privacy.dpsgd"
    assert f"algo.name = {algo}" in str(err) and "docs/privacy.md" in str(err)
