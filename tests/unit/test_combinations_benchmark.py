"""Every row of the combinations benchmark (issue 18) is a run config ``fedrl run`` accepts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from flwr.common.config import parse_config_args

from fedrl.checks.validate import check

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "simulations"))
from benchmark import _join
from combinations_benchmark import COMBINATIONS, EVERY


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_a_combination_passes_the_checks_and_says_what_it_composes(name: str) -> None:
    supernodes, rc = COMBINATIONS[name]
    assert "," not in name  # --only splits names on commas
    cfg = check(parse_config_args([_join(EVERY, rc, "seed=0")]))
    parts = name.split(" x ")
    if parts[0] in ("fedbuff", "fedasync"):
        assert cfg.strategy.name == parts[0]
    if parts[0] in ("gossip", "hierarchical"):
        assert cfg.topology.name == parts[0]
    if "secagg" in name:
        assert cfg.secagg.enabled
    if "DP" in name:
        assert cfg.privacy.mode != "off"
    assert cfg.algo.mirror == ("mirror" in name or "nodes)" in name)  # the crowd presets use it too
    assert (cfg.strategy.ema > 0) == ("ema" in name)
    if "(1000 nodes)" in name or "(2000 nodes)" in name:  # the crowd rows: their presets, at ε <= 8
        assert supernodes == 2 and cfg.privacy.target_epsilon <= 8 and cfg.nodes.cohort_size > 1
