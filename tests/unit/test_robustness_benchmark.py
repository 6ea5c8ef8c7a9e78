"""The robustness benchmark (issue 43) draws its cases from the seed it prints, every drawn case
is a run config ``fedrl check`` accepts, and a run passes exactly at its family's target."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from flwr.common.config import parse_config_args

from fedrl.checks.validate import check
from fedrl.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "simulations"))
from robustness_benchmark import FAMILIES, SETTINGS, draw, kept_passes, narrow, passes


@pytest.fixture(scope="module")
def drawn():  # type: ignore[no-untyped-def]
    return draw(1, 40, 3)


def test_the_same_seed_draws_the_same_cases(drawn) -> None:  # type: ignore[no-untyped-def]
    again, refused = draw(1, 40, 3)
    assert again == drawn[0] and refused == drawn[1]
    assert draw(2, 40, 3)[0] != drawn[0]


def test_the_cases_span_what_a_user_changes(drawn) -> None:  # type: ignore[no-untyped-def]
    cases, _ = drawn
    assert len(cases) == 40 and all(len(c.seeds) == 3 for c in cases)
    assert {c.family for c in cases} == set(FAMILIES)
    assert len({c.setting for c in cases}) >= 6
    assert all(1.5 <= c.factor <= 5 for c in cases) and max(c.factor for c in cases) == 5
    assert {c.nodes for c in cases} <= {4, 8, 16, 1000}
    for c in cases:  # the main parameter spans exactly the drawn factor
        lo, hi = (float(x) for x in c.vary.split(";")[0].split("(")[1].rstrip(")").split(","))
        assert math.isclose(hi / lo, c.factor, rel_tol=1e-4)


def test_every_drawn_case_passes_the_checks(drawn) -> None:  # type: ignore[no-untyped-def]
    for c in drawn[0]:
        cfg = check(parse_config_args([c.run_config + " seed=0"]))
        assert cfg.nodes.count == c.nodes and cfg.algo.name == c.algo
        if c.setting.startswith("gossip"):
            assert cfg.topology.name == "gossip"
        if c.setting.startswith("secagg"):
            assert cfg.secagg.enabled
        if c.setting == "central-dp":
            assert cfg.privacy.mode == "central" and cfg.privacy.target_epsilon <= 8
    assert set(SETTINGS) >= {c.setting for c in drawn[0]}


def test_a_run_passes_at_its_family_target(drawn) -> None:  # type: ignore[no-untyped-def]
    by_family = {c.family: c for c in drawn[0]}
    assert passes(by_family["cartpole"], 475.0, 480.0) and not passes(by_family["cartpole"], 474.9, 500.0)
    assert passes(by_family["acrobot"], -100.0, -80.0) and not passes(by_family["acrobot"], -100.1, -80.0)
    assert passes(by_family["mountaincar"], 90.0, 93.0) and not passes(by_family["mountaincar"], 89.9, 93.0)
    pend = by_family["pendulum"]
    assert passes(pend, -350.0, -250.0) and not passes(pend, -350.1, -200.0) and not passes(pend, -300.0, -250.1)
    # the kept model is the best one where the run saved it, else the final one
    r = {"final_min": 500.0, "final_mean": 500.0, "best_min": 300.0, "best_mean": 400.0}
    assert not kept_passes(by_family["cartpole"], r)
    assert kept_passes(by_family["cartpole"], {**r, "best_min": None, "best_mean": None})
    assert not kept_passes(by_family["cartpole"], {"error": "crashed"})


def test_an_ablation_narrows_the_cases_and_adds_its_setting_to_each(drawn) -> None:  # type: ignore[no-untyped-def]
    cases = drawn[0]
    picked = narrow(cases, numbers="3, 12", extra="ppo.ent-floor=0.3")
    assert [c.name[:2] for c in picked] == ["03", "12"]
    assert all(c.run_config.endswith("ppo.ent-floor=0.3") for c in picked)
    assert all(check(parse_config_args([c.run_config])).ppo.ent_floor == 0.3 for c in picked)
    assert [c.name for c in picked] == [c.name for c in cases if c.name[:2] in ("03", "12")]  # names, seeds kept
    assert {c.group for c in narrow(cases, groups="acrobot/ppo")} == {"acrobot/ppo"}
    assert {c.setting for c in narrow(cases, settings="plain,quantize-8")} == {"plain", "quantize-8"}
    assert narrow(cases) == cases
    with pytest.raises(ConfigError, match=r"ppo\.ent-flor"):  # a typo is refused before any run
        narrow(cases, numbers="3", extra="ppo.ent-flor=0.3")
