"""Edge deployment end to end with real Flower processes on localhost.

TLS on every link with SuperNode authentication (certificates and keys from ``fedrl certs``);
SuperNodes killed mid-round and restarted with their durable state (``state-dir``), one of them
with a corrupted state file; a ServerApp killed mid-run and resumed from its checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.deploy import Deployment, metrics_rows
from tests.e2e.harness import BIN, free_port

pytestmark = pytest.mark.slow

STEPS = 256
RUN_TIMEOUT_S = 420


def _overrides(out: Path, name: str, rounds: int, extra: str = "") -> str:
    return (f"num-server-rounds={rounds} nodes.count=2 algo.local-steps={STEPS} eval.episodes=2 "
            f"output-dir='{out}' run-name='{name}' {extra}").strip()


def _wait(cond: Callable[[], bool], timeout: float, what: str, dep: Deployment) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}\n{dep.log_text()}"
        time.sleep(0.2)


def test_tls_with_supernode_auth_admits_registered_nodes_only(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    made = subprocess.run([str(BIN / "fedrl"), "certs", "--out", str(certs), "--host", "127.0.0.1", "--nodes", "3"],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    for flag in ("--ssl-ca-certfile", "--enable-supernode-auth", "flwr supernode register", "--root-certificates",
                 "--auth-supernode-private-key"):  # what it prints is what this test runs
        assert flag in made.stdout, made.stdout
    dep = Deployment(tmp_path / "d", 2, certs=certs, auth=True)
    try:
        dep.start()  # registers node0.pub and node1.pub, starts both SuperNodes over TLS
        # A SuperNode with a valid key pair that was never registered, and one without TLS.
        dep.start_node(2, name="unregistered", wait=False, key=certs / "node2.key", retries=2, port=free_port())
        dep.start_node(0, name="plaintext", wait=False, insecure=True, keyless=True, retries=2, port=free_port())
        out = tmp_path / "runs"
        code, _ = dep.flwr_run(_overrides(out, "tls", 2), RUN_TIMEOUT_S)
        context = f"flwr run exit code {code}\n{dep.log_text()}"
        rows = metrics_rows(out / "tls")
        assert code == 0 and (out / "tls" / "summary.json").exists(), context
        assert [r["nodes_trained"] for r in rows] == [[0, 1], [0, 1]], context
        assert all(r["nodes_failed"] == {} for r in rows), context
        summary = json.loads((out / "tls" / "summary.json").read_text())
        assert summary["env_steps_total"] == 2 * 2 * STEPS, context
        assert summary["bytes_up_total"] > 0 and summary["bytes_down_total"] > 0, context
        # The SuperLink never listed the intruders: only the two registered nodes are online.
        listed = dep.cli("supernode", "list", dep.connection, "--format", "json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert listed.stdout.count('"online"') == 2, listed.stdout
        for name in ("unregistered", "plaintext"):
            _wait(lambda n=name: dep.procs[n].poll() is not None, 90, f"{name} to give up", dep)  # type: ignore[misc]
            assert dep.procs[name].returncode != 0, dep.log_text()
        # Refused by the SuperLink (Flower's exit code 305: "Failed to activate SuperNode"), not by a local check.
        assert "Failed to activate SuperNode" in dep.logs["unregistered"].read_text(errors="replace"), dep.log_text()
        assert "Connection attempt failed" in dep.logs["plaintext"].read_text(errors="replace"), dep.log_text()
        # The flwr CLI without TLS cannot talk to the SuperLink's Control API either.
        with (dep.home / "config.toml").open("a") as fh:
            fh.write(f'[superlink.plain]\naddress = "127.0.0.1:{dep.link_port}"\ninsecure = true\n')
        plain_cli = dep.cli("ls", "plain", timeout=120)
        assert plain_cli.returncode != 0, plain_cli.stdout
    finally:
        dep.stop()
    assert not dep.leftovers(), dep.leftovers()


def test_a_killed_supernode_and_a_killed_serverapp_recover_with_their_state(tmp_path: Path) -> None:
    """Fault recovery on one deployment, each node with a ``state-dir``:

    1. node 0's SuperNode is killed in round 2 and restarted: round 2 finishes without it
       (``round.timeout-s``, logged) and in round 3 its Adam step count continues from round 1;
    2. the ServerApp is killed after round 4 and the run resumed from its checkpoint: no round
       lost or run twice, and every node's optimizer continues (the resumed run has a new Flower
       run id, hence an empty ``context.state``: the state files carry it).
    (A corrupted state file: tests/component/test_durable_node.py.)"""
    states = [tmp_path / f"state{i}" for i in range(2)]
    dep = Deployment(tmp_path / "d", 2)
    try:
        dep.start(extra={i: f'state-dir="{states[i]}"' for i in range(2)})
        out = tmp_path / "runs"
        folder = out / "faults"
        settings = "min-train-nodes=1 round.timeout-s=20"
        first = dep.run_popen(_overrides(out, "faults", 5, settings))
        _wait(lambda: len(metrics_rows(folder)) >= 1, 240, "round 1", dep)
        dep.kill("supernode0")  # its plan for round 2 is out by now (or about to be)
        dep.restart_node("supernode0", 0)
        _wait(lambda: len(metrics_rows(folder)) >= 4, 240, "round 4", dep)
        assert dep.kill_serverapp(), dep.log_text()
        first.kill()  # the CLI would stream the dead run's logs until the SuperLink gives up on it
        first.wait(timeout=30)
        killed_at = len(metrics_rows(folder))
        assert killed_at == 4 and not (folder / "summary.json").exists(), dep.log_text()
        code, _ = dep.flwr_run(_overrides(out, "faults", 5, f"{settings} resume='{folder}'"), RUN_TIMEOUT_S)
        rows = metrics_rows(folder)
        context = f"flwr run exit code {code}\n" + "\n".join(map(str, rows)) + "\n" + dep.log_text()
        assert code == 0 and (folder / "summary.json").exists(), context
        assert [r["round"] for r in rows] == [1, 2, 3, 4, 5], context  # none lost, none twice
        steps = [{int(k): v for k, v in r["optimizer_steps"].items()} for r in rows]
        per = steps[0][0]
        assert per > 0 and steps[0] == {0: per, 1: per}, context
        # Round 2 went on with node 1 alone; the dead node was dropped and logged.
        assert rows[1]["nodes_trained"] == [1] and "round.timeout-s" in rows[1]["nodes_failed"]["0"], context
        assert "round 2: node 0 left out: no reply before round.timeout-s" in dep.logs["flwr-run"].read_text(), context
        assert "resumed its state saved after round 1" in dep.logs["supernode0"].read_text(errors="replace"), context
        assert "did not say which partition" not in dep.logs["flwr-run"].read_text(), context  # the dead id is not asked
        # Round 3 on: the restarted SuperNode holds partition 0; both optimizers continue, across the resume too.
        assert all(r["nodes_trained"] == [0, 1] for r in rows[2:]), context
        assert steps[2:] == [{0: (k - 1) * per, 1: k * per} for k in (3, 4, 5)], context
    finally:
        dep.stop()
    assert not dep.leftovers(), dep.leftovers()
