"""Flower's Deployment Engine for tests: a real SuperLink and real SuperNodes as processes.

Everything runs on free ports with a private FLWR_HOME. Options: TLS with the certificates of
``fedrl certs`` and SuperNode authentication; per-node extra node config; a ``wrap`` that starts
each process inside a network namespace (``simulations/tooling/netlab.py``). Each process started
here carries ``FEDRL_TEST_PROC=<name>`` in its environment, which its children inherit, so one
SuperNode with its ClientApp processes can be killed exactly; teardown stops everything under the
FLWR_HOME.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.e2e.harness import BIN, REPO, alive, free_port, kill_all, pids_with_env, pids_with_home

Wrap = Callable[[str, list[str]], list[str]]  # (host, command) -> command run on that host


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Deployment:
    """A SuperLink and SuperNodes, each logging to ``root/<name>.log``.

    ``certs``: a ``fedrl certs`` folder, for TLS on every link; ``auth``: SuperNode authentication
    (nodes use ``certs/node{i}.key``). ``wrap`` and ``hosts`` place processes: the SuperLink and
    the CLI on host ``"server"``, SuperNode i on ``hosts[i]``, reaching the SuperLink at ``link_ip``.
    """

    def __init__(self, root: Path, nodes: int, certs: Path | None = None, auth: bool = False,
                 wrap: Wrap | None = None, hosts: list[str] | None = None, link_ip: str = "127.0.0.1") -> None:
        self.root = root
        self.home = root / "flwr-home"
        self.home.mkdir(parents=True)
        self.nodes = nodes
        self.certs, self.auth = certs, auth
        self.wrap: Wrap = wrap or (lambda host, cmd: cmd)
        self.hosts = hosts or ["local"] * nodes
        self.link_ip = link_ip
        ports: set[int] = set()
        while len(ports) < nodes + 1:  # distinct: free_port() may hand the same port out twice
            ports.add(free_port())
        # Flower 1.42 serves the Fleet, Control and Runtime APIs over HTTP(S) on one port.
        self.link_port, *self.node_ports = sorted(ports)
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.home),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.node_args: dict[str, list[str]] = {}
        self.connection = "fedrl-test-deploy"

    # -- processes ---------------------------------------------------------------------------
    def _start(self, name: str, host: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        log = self.root / f"{name}.log"
        self.logs[name] = log
        with log.open("ab") as fh:
            proc = subprocess.Popen(self.wrap(host, cmd), env={**self.env, "FEDRL_TEST_PROC": name}, cwd=self.root,
                                    stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.procs[name] = proc
        return proc

    def healthy(self, host: str, port: int, tls: bool = False) -> bool:
        url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/health"
        ctx = f"ssl.create_default_context(cafile={str(self.certs / 'ca.crt')!r})" if tls else "None"  # type: ignore[operator]
        probe = [sys.executable, "-c", ("import ssl, sys, urllib.request as u; "
                 f"sys.exit(0 if u.urlopen({url!r}, timeout=2, context={ctx}).status == 200 else 1)")]
        if host == "local":
            return subprocess.run(probe, capture_output=True, check=False).returncode == 0
        return subprocess.run(self.wrap(host, probe), capture_output=True, check=False).returncode == 0

    def wait_healthy(self, name: str, host: str, port: int, timeout: float = 90, tls: bool = False) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.procs[name].poll() is None, f"{name} exited early\n{self.log_text()}"
            if self.healthy(host, port, tls):
                return
            time.sleep(0.3)
        raise AssertionError(f"{name} not healthy on port {port} after {timeout} s\n{self.log_text()}")

    def start_link(self) -> None:
        tls = (["--ssl-ca-certfile", str(self.certs / "ca.crt"), "--ssl-certfile", str(self.certs / "server.pem"),
                "--ssl-keyfile", str(self.certs / "server.key")] if self.certs else ["--insecure"])
        bind = "0.0.0.0" if self.link_ip != "127.0.0.1" else "127.0.0.1"
        self._start("superlink", "server", [
            str(BIN / "flower-superlink"), *tls, *(["--enable-supernode-auth"] if self.auth else []),
            "--host", bind, "--port", str(self.link_port)])
        self.wait_healthy("superlink", "server", self.link_port, tls=self.certs is not None)
        tls_line = f'root-certificates = "{self.certs / "ca.crt"}"' if self.certs else "insecure = true"
        (self.home / "config.toml").write_text(
            f'[superlink.{self.connection}]\naddress = "127.0.0.1:{self.link_port}"\n{tls_line}\n')

    def node_cmd(self, i: int, *, key: Path | None = None, insecure: bool | None = None, extra: str = "",
                 port: int | None = None, retries: int | None = None, keyless: bool = False) -> list[str]:
        plain = self.certs is None if insecure is None else insecure
        tls = ["--insecure"] if plain else ["--root-certificates", str(self.certs / "ca.crt")]  # type: ignore[operator]
        if key is None and self.auth and not keyless:
            key = self.certs / f"node{i}.key"  # type: ignore[operator]
        return [str(BIN / "flower-supernode"), *tls, "--superlink", f"{self.link_ip}:{self.link_port}",
                *(["--auth-supernode-private-key", str(key)] if key else []),
                *(["--max-retries", str(retries)] if retries is not None else []),
                "--node-config", f"partition-id={i} num-partitions={self.nodes} {extra}".strip(),
                "--port", str(port or self.node_ports[i % len(self.node_ports)])]

    def start_node(self, i: int, name: str | None = None, wait: bool = True, **kw: object) -> str:
        name = name or f"supernode{i}"
        cmd = self.node_cmd(i, **kw)  # type: ignore[arg-type]
        self.node_args[name] = cmd
        self._start(name, self.hosts[i % len(self.hosts)], cmd)
        if wait:
            self.wait_healthy(name, self.hosts[i % len(self.hosts)], int(cmd[-1]))
        return name

    def start(self, extra: dict[int, str] | None = None) -> None:
        self.start_link()
        if self.auth:
            for i in range(self.nodes):
                self.register(self.certs / f"node{i}.pub")  # type: ignore[operator]
        for i in range(self.nodes):
            self.start_node(i, extra=(extra or {}).get(i, ""))

    def kill(self, name: str) -> None:
        """SIGKILL process ``name`` and everything it spawned (its ClientApp processes too)."""
        for _ in range(3):
            pids = pids_with_env(f"FEDRL_TEST_PROC={name}")
            if not pids:
                break
            kill_all(pids)
            time.sleep(0.3)
        self.procs[name].wait(timeout=10)

    def restart_node(self, name: str, i: int) -> None:
        self._start(name, self.hosts[i], self.node_args[name])
        self.wait_healthy(name, self.hosts[i], int(self.node_args[name][-1]))

    def kill_serverapp(self) -> list[int]:
        """SIGKILL the ServerApp process(es) of the running run; the SuperLink stays up."""
        pids = [p for p in pids_with_home(self.home) if "flwr-serverapp" in _cmdline(p)]
        kill_all(pids)
        return pids

    # -- the flwr CLI ------------------------------------------------------------------------
    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.wrap("server", [str(BIN / "flwr"), *args]), env=self.env, cwd=self.root,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def register(self, pub: Path) -> None:
        res = self.cli("supernode", "register", str(pub), self.connection)
        assert res.returncode == 0, f"register {pub}: {res.stdout}\n{res.stderr}"

    def run_popen(self, overrides: str) -> subprocess.Popen[bytes]:
        """``flwr run REPO <connection> --stream`` in the background (log: flwr-run.log)."""
        log = self.root / "flwr-run.log"
        self.logs["flwr-run"] = log
        cmd = [str(BIN / "flwr"), "run", str(REPO), self.connection, "--stream", "--run-config", overrides]
        with log.open("ab") as fh:
            proc = subprocess.Popen(self.wrap("server", cmd), env=self.env, cwd=self.root, stdout=fh,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs["flwr-run"] = proc
        return proc

    def flwr_run(self, overrides: str, timeout: float) -> tuple[int | None, str]:
        """Run to the end; (exit code or None on timeout, output). ``flwr run --stream`` exits 0
        even when the ServerApp failed: the run folder is the verdict."""
        proc = self.run_popen(overrides)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        return code, self.logs["flwr-run"].read_text(errors="replace")

    def log_text(self) -> str:
        parts = []
        for name, path in self.logs.items():
            text = path.read_text(errors="replace") if path.exists() else "(no log)"
            parts.append(f"----- {name} ({path}) -----\n{text[-5000:]}")
        return "\n".join(parts)

    # -- teardown ----------------------------------------------------------------------------
    def leftovers(self) -> list[str]:
        pids = {p.pid for p in self.procs.values() if p.poll() is None} | set(pids_with_home(self.home))
        return [f"{pid} {_cmdline(pid)}" for pid in sorted(pids) if alive(pid)]

    def stop(self) -> None:
        """SIGTERM the CLI and the SuperNodes, then the SuperLink; SIGKILL whatever is left."""
        names = ["flwr-run", *(n for n in self.procs if n not in ("flwr-run", "superlink")), "superlink"]
        for name in names:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        deadline = time.time() + 5  # SuperExecs notice their parent is gone and exit on their own
        while self.leftovers() and time.time() < deadline:
            time.sleep(0.3)
        for _ in range(3):  # a ClientApp can ignore SIGTERM; SuperExecs run in sessions of their own
            pids = [p.pid for p in self.procs.values() if p.poll() is None] + pids_with_home(self.home)
            if not pids:
                break
            kill_all(pids)
            time.sleep(0.3)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def metrics_rows(folder: Path) -> list[dict]:
    path = folder / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
