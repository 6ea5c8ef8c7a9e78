"""End to end on Flower's Deployment Engine: a real SuperLink and two real SuperNodes.

Everything runs on free localhost ports with a private FLWR_HOME; teardown stops exactly
the processes this test started (their process groups, plus the SuperExec/ServerApp/
ClientApp helpers they spawned, found by the test's private FLWR_HOME in their environment).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import BIN, REPO, free_port, pids_with_home

pytestmark = pytest.mark.slow

NODES = 2
STEPS = 256
ROUNDS = 2
RUN_TIMEOUT_S = 420  # `flwr run --stream`; one deployment round takes ~10 s on 2 cores


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Deployment:
    """A SuperLink and SuperNodes on free localhost ports, each logging to a file in ``root``."""

    def __init__(self, root: Path, nodes: int) -> None:
        self.root = root
        self.home = root / "flwr-home"
        self.home.mkdir(parents=True)
        self.nodes = nodes
        ports: list[int] = []
        while len(ports) < nodes + 1:  # distinct: free_port() may hand the same port out twice
            if (port := free_port()) not in ports:
                ports.append(port)
        self.link_port, *self.node_ports = ports
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.home),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.connection = "fedrl-test-deploy"

    def _start(self, name: str, cmd: list[str]) -> None:
        log = self.root / f"{name}.log"
        self.logs[name] = log
        with log.open("wb") as fh:
            self.procs[name] = subprocess.Popen(cmd, env=self.env, cwd=self.root, stdout=fh, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait_health(self, name: str, port: int, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.procs[name].poll() is None, f"{name} exited early\n{self.log_text()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"{name} not healthy on port {port} after {timeout} s\n{self.log_text()}")

    def start(self) -> None:
        self._start("superlink", [str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1",
                                  "--port", str(self.link_port)])
        self._wait_health("superlink", self.link_port, 90)
        for i, port in enumerate(self.node_ports):
            self._start(f"supernode{i}", [
                str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{self.link_port}",
                "--node-config", f"partition-id={i} num-partitions={self.nodes}", "--port", str(port)])
        for i, port in enumerate(self.node_ports):
            self._wait_health(f"supernode{i}", port, 90)
        (self.home / "config.toml").write_text(
            f'[superlink.{self.connection}]\naddress = "127.0.0.1:{self.link_port}"\ninsecure = true\n')

    def flwr_run(self, overrides: str, timeout: float) -> tuple[int | None, str]:
        """``flwr run REPO <connection> --stream``; (exit code or None on timeout, output)."""
        log = self.root / "flwr-run.log"
        self.logs["flwr-run"] = log
        cmd = [str(BIN / "flwr"), "run", str(REPO), self.connection, "--stream", "--run-config", overrides]
        with log.open("wb") as fh:
            proc = subprocess.Popen(cmd, env=self.env, cwd=self.root, stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            self.procs["flwr-run"] = proc
            try:
                code: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = None
        return code, log.read_text(errors="replace")

    def log_text(self) -> str:
        parts = []
        for name, path in self.logs.items():
            text = path.read_text(errors="replace") if path.exists() else "(no log)"
            parts.append(f"----- {name} ({path}) -----\n{text[-6000:]}")
        return "\n".join(parts)

    def _groups(self) -> set[int]:
        own = os.getpgid(0)
        groups = set()
        for pid in [p.pid for p in self.procs.values()] + pids_with_home(self.home):
            try:
                g = os.getpgid(pid)
            except ProcessLookupError:
                continue
            if g != own:  # never our own (pytest's) group
                groups.add(g)
        return groups

    def leftovers(self) -> list[str]:
        pids = {p.pid for p in self.procs.values() if p.poll() is None} | set(pids_with_home(self.home))
        return [f"{pid} {_cmdline(pid)}" for pid in sorted(pids) if _alive(pid)]

    def stop(self) -> None:
        """SIGTERM flwr run and the SuperNodes, then the SuperLink; SIGKILL what is left of their groups."""
        order = ["flwr-run", *(f"supernode{i}" for i in range(self.nodes)), "superlink"]
        for name in order:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.time() + 5  # SuperExecs notice their parent is gone and exit on their own
        while self.leftovers() and time.time() < deadline:
            time.sleep(0.3)
        for g in self._groups():  # groups that still hold one of our processes (a ClientApp can ignore SIGTERM)
            try:
                os.killpg(g, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.time() + 10
        while self.leftovers() and time.time() < deadline:
            time.sleep(0.2)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    dep = Deployment(tmp_path / "deploy", NODES)
    try:
        yield dep
    finally:
        dep.stop()
    assert not dep.leftovers(), f"Flower processes left running: {dep.leftovers()}"


def test_two_supernodes_train_every_round(deployment: Deployment, tmp_path: Path) -> None:
    deployment.start()
    out = tmp_path / "runs"  # absolute: a relative output-dir resolves against the SuperLink's cwd
    overrides = (f"num-server-rounds={ROUNDS} nodes.count={NODES} algo.local-steps={STEPS} eval.episodes=2 "
                 f"output-dir='{out}' run-name='dep'")
    code, _ = deployment.flwr_run(overrides, RUN_TIMEOUT_S)
    # `flwr run --stream` exits 0 even when the ServerApp failed: the run folder is the verdict.
    folder = out / "dep"
    context = f"flwr run exit code {code}\n{deployment.log_text()}"
    assert code == 0, context
    assert (folder / "summary.json").exists(), context
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["rounds_completed"] == ROUNDS, context
    assert summary["env_steps_total"] == ROUNDS * NODES * STEPS, context
    assert summary["bytes_up_total"] > 0 and summary["bytes_down_total"] > 0, context
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == list(range(1, ROUNDS + 1)), context
    for r in rows:
        assert r["nodes_trained"] == list(range(NODES)), context
        assert r["nodes_failed"] == {}, context


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
