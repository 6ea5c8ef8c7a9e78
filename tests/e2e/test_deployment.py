"""End to end on Flower's Deployment Engine: a real SuperLink and two real SuperNodes
(``tests.e2e.deploy``) on free localhost ports with a private FLWR_HOME. The plain deployment
round is covered over TLS in test_edge.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.deploy import Deployment

pytestmark = pytest.mark.slow

NODES = 2
STEPS = 256
ROUNDS = 2
RUN_TIMEOUT_S = 420  # `flwr run --stream`; one deployment round takes ~10 s on 2 cores


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    dep = Deployment(tmp_path / "deploy", NODES)
    try:
        yield dep
    finally:
        dep.stop()
    assert not dep.leftovers(), f"Flower processes left running: {dep.leftovers()}"


def test_secure_aggregation_and_downlink_deltas_across_processes(deployment: Deployment, tmp_path: Path) -> None:
    """Every stage message runs in a fresh ClientApp process here: the secure-aggregation session
    and the downlink broadcast model must survive in the SuperNode's context.state."""
    deployment.start()
    out = tmp_path / "runs"
    overrides = (f"num-server-rounds={ROUNDS} nodes.count={NODES} algo.local-steps={STEPS} eval.episodes=2 "
                 "secagg.enabled=true compression.up='quantize' compression.down='quantize' "
                 f"output-dir='{out}' run-name='sec'")
    code, _ = deployment.flwr_run(overrides, RUN_TIMEOUT_S)
    folder = out / "sec"
    context = f"flwr run exit code {code}\n{deployment.log_text()}"
    assert code == 0 and (folder / "summary.json").exists(), context
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == ROUNDS, context
    for r in rows:
        assert r["nodes_trained"] == list(range(NODES)) and r["secagg_aborted"] is None, context
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["env_steps_total"] == ROUNDS * NODES * STEPS, context  # the secure weight sum is exact
    # From round 2 on, plans carry an 8-bit delta instead of float32 weights.
    first, second = rows[0]["bytes_down"], rows[1]["bytes_down"] - rows[0]["bytes_down"]
    assert second < first / 2, (first, second)
