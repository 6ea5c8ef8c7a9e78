"""Run fedrl through real Flower processes on free localhost ports, and clean up after.

Each harness uses its own FLWR_HOME and its own ports, and stops only the processes it
started: the local SuperLink that ``flwr run`` spawned (found by its unique control port)
with its whole session, and any SuperLink/SuperNode it launched itself.
"""

from __future__ import annotations

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


def _pids_with(fragment: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if fragment in cmd:
                out.append(int(p.name))
    return out


def kill_session_of(pid: int) -> None:
    try:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class LocalFlower:
    """``flwr run`` against a private local SuperLink (Simulation Engine)."""

    def __init__(self, home: Path) -> None:
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
            ) -> subprocess.CompletedProcess[str]:
        cmd = [str(BIN / "flwr"), "run", str(app), "--stream", "--run-config", overrides,
               "--federation-config", f"num-supernodes={supernodes}"]
        return subprocess.run(cmd, env=self.env, cwd=cwd or app, capture_output=True, text=True, timeout=timeout, check=False)

    def popen(self, app: Path, overrides: str, supernodes: int = 2, cwd: Path | None = None) -> subprocess.Popen[str]:
        cmd = [str(BIN / "flwr"), "run", str(app), "--stream", "--run-config", overrides,
               "--federation-config", f"num-supernodes={supernodes}"]
        return subprocess.Popen(cmd, env=self.env, cwd=cwd or app, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def stop(self) -> None:
        stop_superlink_tree(f"127.0.0.1:{self.control_port}")


def stop_superlink_tree(fragment: str) -> None:
    """Kill the SuperLink(s) whose command line contains ``fragment``, with their sessions,
    and the SuperExec sessions (simulation runtime, Ray, app processes) started for them:
    SuperExec runs in its own session and names its parent with ``--parent-pid``."""
    links = _pids_with(fragment)
    execs = [p for link in links for p in _pids_with(f"--parent-pid {link}")]
    for pid in execs + links:
        kill_session_of(pid)
    time.sleep(0.5)
