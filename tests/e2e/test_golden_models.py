"""Same-seed runs give the model.npz saved in tests/golden/, bit for bit.

Each case is one tiny run through ``flwr run`` and Flower's Simulation Engine (2 SuperNodes, the
harness's default); its final ``model.npz`` must equal ``tests/golden/<name>.npz`` exactly (same
keys, same arrays). The reference models came from a commit before the redesign of the server
aggregation, algorithms and node pipeline; tests/golden/README.md names it and says how to
regenerate them. Every other setting is the default (observation normalization, the annealed
server step), so a change of default shows up here too.

FedBuff is run with ``strategy.concurrency=1`` (one node training at a time): with several nodes in
flight the buffer's order and the staleness depend on which reply arrives first, and the model
differs run to run.

``FEDRL_WRITE_GOLDEN=1`` writes the produced models into tests/golden/ instead of comparing (only
ever on a checkout whose behaviour is the reference; see the README).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.harness import REPO, LocalFlower

pytestmark = pytest.mark.slow

GOLDEN = REPO / "tests" / "golden"
BASE = "num-server-rounds=2 seed=0 nodes.count=4 algo.local-steps=256 eval.episodes=1"

# name -> run-config overrides (on top of BASE); tests/golden/<name>.npz is its reference model
CASES = {
    "fedavg": "",
    "fedadam": "strategy.name='fedadam' strategy.server-lr=0.01",
    "trimmed-mean": "strategy.name='trimmed-mean' strategy.trim=0.25",
    "hierarchical": "topology.name='hierarchical' topology.edges=2 topology.cloud-every=2",
    "gossip": "topology.name='gossip' topology.graph='ring'",
    "fedbuff": "strategy.name='fedbuff' strategy.buffer=3 strategy.concurrency=1",
}
SUPERNODES = 2
# Through the engine in CI: one synchronous case (tests/component/test_golden_inprocess.py checks
# the others in seconds, through the same ClientApp handler) and FedBuff, whose loop needs Flower.
# FEDRL_GOLDEN_ALL=1 (or FEDRL_WRITE_GOLDEN=1) runs every case here.
ENGINE = list(CASES) if "1" in (os.environ.get("FEDRL_GOLDEN_ALL"), os.environ.get("FEDRL_WRITE_GOLDEN")) \
    else ["fedavg", "fedbuff"]


@pytest.mark.parametrize("name", ENGINE)
def test_same_seed_gives_the_golden_model(flower: LocalFlower, tmp_path: Path, name: str) -> None:
    out = tmp_path / "runs"
    res = flower.run(REPO, f"{BASE} {CASES[name]} output-dir='{out}' run-name='{name}'".replace("  ", " "),
                     supernodes=SUPERNODES, timeout=300)
    model = out / name / "model.npz"
    assert res.returncode == 0 and model.exists(), res.stdout[-3000:] + res.stderr[-3000:]
    golden = GOLDEN / f"{name}.npz"
    if os.environ.get("FEDRL_WRITE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        shutil.copyfile(model, golden)
        pytest.skip(f"wrote {golden}")
    with np.load(model, allow_pickle=False) as got, np.load(golden, allow_pickle=False) as want:
        assert got.files == want.files
        for key in want.files:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{name}: {key}")
