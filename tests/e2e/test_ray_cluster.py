"""The Simulation Engine on an existing Ray cluster: two raylets on this machine (``ray start --head``
and ``ray start --address``, each with a resource of its own), a fedrl run whose SuperLink has
``RAY_ADDRESS`` set, and Ray's own record of where the ClientApp actors ran (docs/scaling.md).

Everything binds to 127.0.0.1 on free ports, in a private Ray temp dir (so no other Ray user on the
machine attaches to this cluster); the harness kills exactly the processes it started.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.e2e.harness import BIN, REPO, LocalFlower, free_port

pytestmark = pytest.mark.slow

ACTORS = """
import json, sys, ray
from ray._private import state
ray.init(address=sys.argv[1], logging_level="ERROR")
nodes = {n["NodeID"]: [r for r in n["Resources"] if r.startswith("raylet_")] for n in ray.nodes() if n["Alive"]}
actors = [a["Address"]["NodeID"] for a in state.actors().values() if a["ActorClassName"] == "ClientAppActor"]
print(json.dumps({"nodes": nodes, "actors": actors}))
"""


def _ray_start(env: dict[str, str], temp: str, *args: str) -> None:
    cmd = [str(BIN / "ray"), "start", "--node-ip-address=127.0.0.1", "--num-cpus=2", "--disable-usage-stats",
           f"--temp-dir={temp}", f"--dashboard-agent-listen-port={free_port()}", *args]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


def test_supernodes_train_on_both_raylets_of_an_existing_cluster(tmp_path: Path) -> None:
    flower = LocalFlower(tmp_path / "flwr")
    temp = tempfile.mkdtemp(prefix="fr-ray-", dir="/tmp")  # short: Ray's socket paths are length-limited
    port = free_port()
    try:
        _ray_start(flower.env, temp, "--head", f"--port={port}", "--include-dashboard=false",
                   f"--ray-client-server-port={free_port()}", '--resources={"raylet_a": 1}')
        _ray_start(flower.env, temp, f"--address=127.0.0.1:{port}", '--resources={"raylet_b": 1}')
        flower.env["RAY_ADDRESS"] = f"127.0.0.1:{port}"  # the SuperLink's simulation runtime attaches to the cluster
        out = tmp_path / "runs"
        res = flower.run(REPO, f"num-server-rounds=2 nodes.count=4 algo.local-steps=256 eval.episodes=1 "
                               f"output-dir='{out}' run-name='ray'", supernodes=4,
                         federation="client-resources-num-cpus=1")
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        rows = [json.loads(x) for x in (out / "ray" / "metrics.jsonl").read_text().splitlines()]
        assert [r["nodes_trained"] for r in rows] == [[0, 1, 2, 3]] * 2
        seen = subprocess.run([sys.executable, "-c", ACTORS, f"127.0.0.1:{port}"], env=flower.env,
                              capture_output=True, text=True, timeout=120, check=True)
        placed = json.loads(seen.stdout.strip().splitlines()[-1])
        labels = sorted(label for node in set(placed["actors"]) for label in placed["nodes"].get(node, []))
        assert labels == ["raylet_a", "raylet_b"], placed  # ClientApp actors ran on both raylets
    finally:
        flower.stop()  # the SuperLink, the simulation and both raylets: everything under its FLWR_HOME
        shutil.rmtree(temp, ignore_errors=True)
