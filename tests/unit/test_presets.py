"""Every experiment preset in ``simulations/configs`` passes the checks ``fedrl run`` makes first."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrl.flower.runconfig import merged_run_config
from fedrl.validate import check

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted((REPO / "simulations" / "configs").glob("*.toml"))


def test_there_are_presets() -> None:
    assert {p.name for p in PRESETS} >= {"cartpole_dp.toml", "cartpole_1000.toml"}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_a_preset_passes_the_checks(preset: Path) -> None:
    cfg = check(merged_run_config(REPO, [str(preset)]))
    if preset.name == "cartpole_1000.toml":
        assert cfg.nodes.count == 1000 and cfg.nodes_per_round == 100 and cfg.secagg.enabled
        assert cfg.privacy.mode == "central" and cfg.privacy.target_epsilon <= 8 and cfg.compression.bits == 8
