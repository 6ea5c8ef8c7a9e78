"""Topologies beyond the star end to end through Flower's Simulation Engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.harness import REPO, LocalFlower

pytestmark = pytest.mark.slow


def test_hierarchical_solves_heterogeneous_cartpole_and_counts_the_cloud_tier(flower: LocalFlower,
                                                                              tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, "topology.name='hierarchical' topology.edges=2 topology.cloud-every=2 eval.every=2 "
                           f"eval.episodes=3 eval.stop-at-target=true output-dir='{out}' run-name='h'", timeout=900)
    assert (out / "h" / "summary.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((out / "h" / "summary.json").read_text())
    assert summary["solved"] and summary["eval_min_return"] >= 475, summary["eval"]
    rows = [json.loads(x) for x in (out / "h" / "metrics.jsonl").read_text().splitlines()]
    # every second round each of the 2 edges sends its model up and gets the cloud's back (float32)
    assert all(r["bytes_cloud"] == (r["round"] // 2) * 2 * 2 * 4 * 9155 for r in rows), rows
    assert summary["bytes_cloud_total"] == rows[-1]["bytes_cloud"]
