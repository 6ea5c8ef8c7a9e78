"""Network lab: hosts in separate Linux network namespaces, joined to a hub by shaped links.

A :class:`NetLab` is a star: the hub host and every other host (a node) each get their own namespace, and each
node is joined to the hub by its own point-to-point link shaped like netem (one-way ``delay_ms`` and ``loss`` and
``rate_mbit`` applied in each direction, so the round-trip time is ``2 * delay_ms``). Every node reaches the hub at
the one address :data:`HUB_ADDRESS` (on the hub's ``lo``, routed over the node's link); the hub reaches a node at
``lab.ip(node)``. Nodes cannot reach each other (the hub does not forward). Each namespace has ``lo`` up.

Two backends shape the links:

- ``netem``: a veth pair per link with a ``netem`` qdisc on both ends (needs the kernel's ``sch_netem``);
- ``tun``: two TUN devices per link, their packets forwarded by a userspace relay process (this module run with
  ``relay``) that drops, serializes at the rate (FIFO, tail drop at :data:`QUEUE_LIMIT`) and delays them. Used where
  the kernel lacks netem (as on the Firecracker VMs this project's CI runs on).

Needs root and iproute2. Linux only.
"""

from __future__ import annotations

import fcntl
import functools
import heapq
import itertools
import json
import math
import os
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from typing_extensions import Self

HUB_ADDRESS = "10.200.0.1"  # the hub as every node sees it; link i uses 10.200.i.1 (hub end) and 10.200.i.2 (node)
QUEUE_LIMIT = 1000  # packets held per direction (queued or in flight), netem's default limit
_TUNSETIFF = 0x400454CA
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000
_lab_numbers = itertools.count()


class NetLabError(RuntimeError):
    """A lab could not be built here (a command failed or a needed kernel feature is missing)."""


@dataclass(frozen=True)
class Link:
    """Shaping of one direction of a link, applied to both directions (as netem on both veth ends).

    ``delay_ms``: one-way delay (RTT = 2 * delay_ms); ``loss``: probability that a packet is dropped, in [0, 1];
    ``rate_mbit``: rate in Mbit/s (1e6 bit/s) counted on IP packet bytes, 0 = unlimited.
    """

    delay_ms: float = 0.0
    loss: float = 0.0
    rate_mbit: float = 0.0

    def __post_init__(self) -> None:
        for name, top in (("delay_ms", math.inf), ("loss", 1.0), ("rate_mbit", math.inf)):
            value = getattr(self, name)
            # `not (a <= v <= b)` also rejects NaN; bools are numbers to Python but never meant here
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= top:
                raise ValueError(f"Link.{name} must be a number in [0, {top}], got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"Link.{name} must be finite, got {value!r}")


def _run(*args: str) -> None:
    """Run a command; a failure raises NetLabError with the command and its stderr."""
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetLabError(f"`{' '.join(args)}` failed: {done.stderr.strip()}")


def _ok(*args: str) -> bool:
    return subprocess.run(args, capture_output=True, check=False).returncode == 0


def _open_tun(name: str) -> int:
    """Create TUN device `name` (raw IP packets, no packet-info header); it lives as long as the returned fd."""
    fd = os.open("/dev/net/tun", os.O_RDWR)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


@functools.cache
def netem_available() -> bool:
    """True when the kernel has the netem qdisc: tried on a veth pair in a scratch namespace, then removed."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        return False
    ns = f"nlprobe{os.getpid()}"
    if not _ok("ip", "netns", "add", ns):
        return False
    try:
        return _ok("ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1") and _ok(
            "tc", "-n", ns, "qdisc", "add", "dev", "p0", "root", "netem", "delay", "1ms"
        )
    finally:
        _ok("ip", "netns", "del", ns)  # takes the veth pair and its qdisc with it


@functools.cache
def unavailable() -> str | None:
    """Why a lab cannot be built here (not root, no `ip`, no namespaces, neither TUN nor netem), else None."""
    if os.geteuid() != 0:
        return "a network lab needs root (network namespaces, TUN devices)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    ns = f"nlprobe{os.getpid()}"
    if not _ok("ip", "netns", "add", ns):
        return "`ip netns add` fails here (no network namespaces?)"
    _ok("ip", "netns", "del", ns)
    try:
        os.close(_open_tun(ns[:15]))
    except OSError as err:
        if not netem_available():
            return f"neither TUN devices ({err}) nor the netem qdisc are available"
    return None


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    return digits[n] if n < 36 else _b36(n // 36) + digits[n % 36]


class NetLab:
    """A star of namespaces: `hub` and each other host (node) in its own, each node joined to the hub by a link.

    Use as a context manager: ``__enter__`` builds everything (on failure it removes what it built and re-raises),
    ``__exit__`` stops the relay and deletes the namespaces, which deletes the links in them. Stop the processes you
    started in the namespaces first: a namespace outlives its name while a process runs in it.
    Names are ``{prefix}-{i}`` (namespaces, hub i = 0, nodes i = 1.. in `hosts` order), ``{prefix}h{i}`` and
    ``{prefix}n{i}`` (hub and node end of link i); the default prefix is unique per process and lab.
    ``backend``: "auto" takes netem when the kernel has it, else tun; "netem" raises NetLabError without it.
    """

    def __init__(
        self,
        hosts: Sequence[str],
        link: Link,
        hub: str = "server",
        backend: Literal["auto", "netem", "tun"] = "auto",
        seed: int = 0,
        prefix: str | None = None,
    ) -> None:
        if hub not in hosts or len(set(hosts)) != len(hosts):
            raise ValueError(f"hosts must be distinct and include the hub {hub!r}, got {list(hosts)}")
        self.hub, self.link, self.seed = hub, link, seed
        self.nodes = [h for h in hosts if h != hub]
        if not 1 <= len(self.nodes) <= 250:  # one 10.200.i.0 block per link, and interface names stay short
            raise ValueError(f"a lab has 1 to 250 nodes besides the hub, got {len(self.nodes)}")
        self.prefix = prefix or f"nl{_b36(os.getpid())}{_b36(next(_lab_numbers) % 36**3)}"
        if not re.fullmatch(r"[a-zA-Z0-9]{1,10}", self.prefix):  # {prefix}h250 must fit IFNAMSIZ (15 chars)
            raise ValueError(f"prefix must be 1 to 10 letters or digits, got {self.prefix!r}")
        if backend not in ("auto", "netem", "tun"):
            raise ValueError(f"backend must be 'auto', 'netem' or 'tun', got {backend!r}")
        if backend == "netem" and not netem_available():
            raise NetLabError(
                "backend='netem' needs root and the kernel's netem qdisc (sch_netem), not here; use 'tun'"
            )
        if backend == "auto":
            backend = "netem" if netem_available() else "tun"
        self.backend: str = backend  # the backend in use: "netem" or "tun"
        self._ns = {h: f"{self.prefix}-{i}" for i, h in enumerate([hub, *self.nodes])}
        self._created: list[str] = []  # namespaces this lab added, deleted by close()
        self._relay: subprocess.Popen[bytes] | None = None

    def ip(self, host: str) -> str:
        """The address other hosts reach `host` at: HUB_ADDRESS for the hub (from every node), 10.200.i.2 for node i."""
        return HUB_ADDRESS if host == self.hub else f"10.200.{self.nodes.index(host) + 1}.2"

    def netns(self, host: str) -> str:
        """The name of `host`'s network namespace."""
        return self._ns[host]

    def wrap(self, host: str, cmd: Sequence[str]) -> list[str]:
        """`cmd` run in `host`'s namespace (as root)."""
        return ["ip", "netns", "exec", self._ns[host], *cmd]

    def __enter__(self) -> Self:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        for ns in self._ns.values():
            _run("ip", "netns", "add", ns)
            self._created.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        hub_ns = self._ns[self.hub]
        _run("ip", "-n", hub_ns, "addr", "add", f"{HUB_ADDRESS}/32", "dev", "lo")
        fds: list[int] = []  # TUN fds; a TUN device vanishes when its last fd closes
        try:
            for i, node in enumerate(self.nodes, 1):
                hub_dev, node_dev, node_ns = f"{self.prefix}h{i}", f"{self.prefix}n{i}", self._ns[node]
                if self.backend == "tun":
                    for dev, ns in ((hub_dev, hub_ns), (node_dev, node_ns)):
                        fds.append(_open_tun(dev))  # created here, moved: the fd keeps working after the move
                        _run("ip", "link", "set", dev, "netns", ns)
                else:
                    veth = ["type", "veth", "peer", "name", node_dev, "netns", node_ns]
                    _run("ip", "-n", hub_ns, "link", "add", hub_dev, *veth)
                hub_a, node_a = f"10.200.{i}.1", f"10.200.{i}.2"
                for ns, dev, local, peer in ((hub_ns, hub_dev, hub_a, node_a), (node_ns, node_dev, node_a, hub_a)):
                    _run("ip", "-n", ns, "addr", "add", local, "peer", peer, "dev", dev)
                    # no IPv6 link-local address: no router solicitations etc. drawing on the link's loss and rate
                    _run("ip", "-n", ns, "link", "set", dev, "addrgenmode", "none", "mtu", "1500", "up")
                    if self.backend == "netem":
                        _run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "netem", *_netem_args(self.link))
                _run("ip", "-n", node_ns, "route", "add", HUB_ADDRESS, "via", hub_a, "dev", node_dev)
            if fds:
                self._start_relay(fds)
        finally:
            for fd in fds:  # the relay holds its own copies
                os.close(fd)

    def _start_relay(self, fds: list[int]) -> None:
        links = [
            {"fds": fds[i : i + 2], "link": asdict(self.link), "seed": f"{self.seed}:{i // 2 + 1}"}
            for i in range(0, len(fds), 2)
        ]
        # -I: the script's folder (simulations/tooling/) must not shadow stdlib modules. The relay exits when its stdin
        # closes, so it also ends when this process dies without close(); its own session keeps Ctrl-C from killing it
        # first.
        command = [sys.executable, "-I", os.path.abspath(__file__), "relay", json.dumps(links)]
        self._relay = subprocess.Popen(
            command, pass_fds=fds, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
        )
        assert self._relay.stdout is not None
        if not select.select([self._relay.stdout], [], [], 30)[0] or self._relay.stdout.readline() != b"ready\n":
            raise NetLabError("the link relay did not start (see its stderr)")

    def close(self) -> None:
        """Stop the relay and delete the namespaces this lab created; idempotent, safe after a failed build."""
        if self._relay is not None:
            assert self._relay.stdin is not None and self._relay.stdout is not None
            self._relay.stdin.close()
            try:
                self._relay.wait(5)
            except subprocess.TimeoutExpired:
                self._relay.kill()
                self._relay.wait()
            self._relay.stdout.close()
            self._relay = None
        while self._created:
            _ok("ip", "netns", "del", self._created.pop())


def _netem_args(link: Link) -> list[str]:
    args = ["limit", str(QUEUE_LIMIT)]
    if link.delay_ms:
        args += ["delay", f"{round(link.delay_ms * 1000)}us"]
    if link.loss:
        args += ["loss", f"{link.loss * 100:.6g}%"]
    if link.rate_mbit:
        args += ["rate", f"{round(link.rate_mbit * 1e6)}bit"]
    return args


class _Direction:
    """One direction of a relayed link: loss, then a FIFO at the rate (tail drop), then the one-way delay."""

    def __init__(self, dst: int, link: Link, rng: random.Random) -> None:
        self.dst, self.loss, self.rng = dst, link.loss, rng
        self.delay_s = link.delay_ms / 1e3
        self.bit_s = 1 / (link.rate_mbit * 1e6) if link.rate_mbit else 0.0  # seconds per bit
        self.last_depart = 0.0
        self.held = 0  # packets admitted and not yet delivered (netem counts delayed packets against its limit)

    def admit(self, size: int, now: float) -> float | None:
        """When the packet of `size` bytes arriving `now` is delivered, or None when it is dropped."""
        if (self.loss and self.rng.random() < self.loss) or self.held >= QUEUE_LIMIT:
            return None
        depart = now
        if self.bit_s:
            depart = self.last_depart = max(now, self.last_depart) + size * 8 * self.bit_s
        self.held += 1
        return depart + self.delay_s


def _relay(links: list[dict[str, Any]]) -> None:
    """Forward packets between the TUN fds of each link until stdin reaches end of file."""
    route: dict[int, _Direction] = {}
    for spec in links:
        a, b = spec["fds"]
        for way, (src, dst) in enumerate(((a, b), (b, a))):  # way 0: hub to node, 1: node to hub
            route[src] = _Direction(dst, Link(**spec["link"]), random.Random(f"{spec['seed']}:{way}"))
            os.set_blocking(src, False)
    stdin = sys.stdin.fileno()
    due: list[tuple[float, int, _Direction, bytes]] = []  # heap of (delivery time, arrival number, ...)
    arrivals = itertools.count()
    print("ready", flush=True)
    while True:
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, d, packet = heapq.heappop(due)
            d.held -= 1
            try:
                os.write(d.dst, packet)
            except OSError:  # the device is down or gone: the packet is lost, as on a real link
                pass
        ready = select.select([stdin, *route], [], [], max(0.0, due[0][0] - now) if due else None)[0]
        for fd in ready:
            if fd == stdin:
                if not os.read(stdin, 4096):
                    return
                continue
            d = route[fd]
            for _ in range(64):  # a bounded batch, so that due deliveries are not held back by a busy sender
                try:
                    packet = os.read(fd, 65536)
                except OSError:  # BlockingIOError: nothing more to read now
                    break
                at = d.admit(len(packet), time.monotonic())
                if at is not None:
                    heapq.heappush(due, (at, next(arrivals), d, packet))


def main(argv: Sequence[str] | None = None) -> None:
    """`relay JSON` (the lab's link relay), or `DELAY_MS LOSS RATE_MBIT`: a hub + 2 node lab held until Ctrl-C."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["relay"]:
        _relay(json.loads(args[1]))
        return
    delay_ms, loss, rate_mbit = (float(a) for a in args or ["50", "0.01", "2"])
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` cleans up too, as Ctrl-C does
    with NetLab(["server", "node1", "node2"], Link(delay_ms, loss, rate_mbit)) as lab:
        print(f"{lab.backend} lab; the hub is {HUB_ADDRESS}; e.g. {' '.join(lab.wrap('node1', ['bash']))}")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
