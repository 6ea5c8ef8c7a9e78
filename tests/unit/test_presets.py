"""Every experiment preset in ``simulations/configs`` passes the checks ``fedrl run`` makes first."""

from __future__ import annotations

from pathlib import Path

import pytest
from flwr.common.config import parse_config_args

from fedrl.checks.validate import check
from fedrl.cli import _pairs_for_flower
from fedrl.config.overrides import as_pairs, check_override
from fedrl.errors import ConfigError
from fedrl.flower.runconfig import merged_run_config

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted((REPO / "simulations" / "configs").glob("*.toml"))


def test_there_are_presets() -> None:
    assert {p.name for p in PRESETS} >= {"cartpole_dp.toml", "cartpole_1000.toml", "cartpole_1000_fedbuff.toml",
                                         "cartpole_2000_hierarchical.toml"}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_a_preset_passes_the_checks(preset: Path) -> None:
    cfg = check(merged_run_config(REPO, [str(preset)]))
    if preset.name == "cartpole_1000.toml":
        assert cfg.nodes.count == 1000 and cfg.nodes_per_round == 100 and cfg.secagg.enabled
        assert cfg.privacy.mode == "central" and cfg.privacy.target_epsilon <= 8 and cfg.compression.bits == 8
        # the symmetric policy needs uncentred statistics (fedrl.checks.validate refuses it otherwise)
        assert cfg.algo.mirror and not cfg.algo.norm_obs_center and cfg.ppo.gamma == 0.995
    if preset.name == "cartpole_2000_hierarchical.toml":  # DP at the edge, each edge its own secure sum
        assert cfg.topology.name == "hierarchical" and cfg.nodes.count == 2000 and cfg.secagg.enabled
        assert cfg.privacy.mode == "central" and cfg.privacy.target_epsilon <= 8 and cfg.algo.norm_obs == "server"
    if preset.name == "cartpole_1000_fedbuff.toml":  # DP-FedBuff: the buffer is the crowd
        assert cfg.strategy.name == "fedbuff" and cfg.strategy.buffer == 400 and cfg.nodes.count == 1000
        assert cfg.privacy.mode == "central" and cfg.privacy.target_epsilon <= 8


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_fedrl_run_hands_a_preset_to_flower_as_pairs_it_reads_back_exactly(preset: Path) -> None:
    # flwr run refuses a TOML file next to the output-dir pair fedrl run adds ("TOML files cannot
    # be passed alongside key-value pairs"), so fedrl run passes the preset's values as pairs.
    rest = _pairs_for_flower([str(REPO), "--run-config", str(preset), "--stream"])
    assert rest[0] == str(REPO) and rest[1] == "--run-config" and rest[3] == "--stream"
    assert not rest[2].endswith(".toml")
    check_override(rest[2])
    flower_reads = parse_config_args([rest[2], "output-dir='/tmp/x'"])
    assert flower_reads == {**parse_config_args([str(preset)]), "output-dir": "/tmp/x"}


def test_pairs_carry_quotes_spaces_and_numbers_exactly() -> None:
    values = {"env.vary": "length=uniform(0.2, 0.9); masscart=linspace(0.5, 2.0)", "run-name": "it's",
              "privacy.delta": 1e-05, "seed": 3, "secagg.enabled": False, "note": 'say "hi"', "x": -0.5}
    assert parse_config_args([as_pairs(values)]) == values


def test_a_value_no_pair_can_carry_is_refused_with_its_key() -> None:
    with pytest.raises(ConfigError, match="run-name"):
        as_pairs({"run-name": "it's \"both\""})
    with pytest.raises(ConfigError, match="run-name"):
        as_pairs({"run-name": "two\nlines"})
    with pytest.raises(ConfigError, match="seed"):
        as_pairs({"seed": float("nan")})
    assert _pairs_for_flower([".", "--run-config", "seed=2"]) == [".", "--run-config", "seed=2"]
