"""Run fedrl through real Flower processes on free localhost ports, and clean up after.

Each harness uses its own FLWR_HOME and its own ports, and stops only the processes it
started: the local SuperLink that ``flwr run`` spawned (found by its unique control port)
with its whole session, and any SuperLink/SuperNode it launched itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pids_with_env(entry: str) -> list[int]:
    """Live processes (other than this one) whose environment holds ``entry`` (``KEY=value``)."""
    want = entry.encode()
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and p.name != str(os.getpid()):
            try:
                if want in (p / "environ").read_bytes().split(b"\0") and alive(int(p.name)):
                    out.append(int(p.name))
            except OSError:
                continue
    return out


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def pids_with_home(home: Path) -> list[int]:
    """Processes whose environment has FLWR_HOME=home: what a test started and everything
    those spawned (SuperLink, SuperExec, simulation runtime, Ray, app processes).

    Each harness has a private FLWR_HOME, so this never matches another session's processes
    (a port alone could: a stale process may still hold or retry a port we were handed).
    """
    return pids_with_env(f"FLWR_HOME={home}")


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class LocalFlower:
    """``flwr run`` against a private local SuperLink (Simulation Engine)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.control_port = free_port()
        self.http_port = free_port()
        self.env = {
            **os.environ,
            "FLWR_HOME": str(home),
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(self.http_port),
            "FLWR_LOCAL_CONTROL_API_PORT": str(self.control_port),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def run(self, app: Path, overrides: str, supernodes: int = 2, timeout: float = 480, cwd: Path | None = None,
            federation: str = "") -> subprocess.CompletedProcess[str]:
        """``flwr run --stream``; ``federation`` adds Flower federation-config settings."""
        cmd = [str(BIN / "flwr"), "run", str(app), "--stream", "--run-config", overrides,
               "--federation-config", f"num-supernodes={supernodes} {federation}".strip()]
        return subprocess.run(cmd, env=self.env, cwd=cwd or app, capture_output=True, text=True, timeout=timeout, check=False)

    def solve(self, overrides: str, out: Path, name: str, **kw: object) -> tuple[dict, list[dict]]:
        """Run the app into ``out/name`` and check that it solved every variant (>= 475, CartPole);
        return its summary and metrics rows."""
        res = self.run(REPO, f"{overrides} output-dir='{out}' run-name='{name}'", **kw)  # type: ignore[arg-type]
        folder = out / name
        assert (folder / "summary.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["solved"] and summary["eval_min_return"] >= 475, summary["eval"]
        return summary, [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]

    def popen(self, app: Path, overrides: str, supernodes: int = 2, cwd: Path | None = None) -> subprocess.Popen[str]:
        cmd = [str(BIN / "flwr"), "run", str(app), "--stream", "--run-config", overrides,
               "--federation-config", f"num-supernodes={supernodes}"]
        return subprocess.Popen(cmd, env=self.env, cwd=cwd or app, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def stop(self) -> None:
        """Kill every process started under this harness's FLWR_HOME (the local SuperLink is
        detached, and its SuperExec runs in yet another session, so groups would miss some)."""
        for _ in range(3):
            pids = pids_with_home(self.home)
            if not pids:
                return
            kill_all(pids)
            time.sleep(0.5)
