"""The network lab: shaped links between namespaces (RTT, rate, loss), cleanup, and its checks on arguments.

The lab tests force backend="tun" (the userspace relay), as CI kernels lack netem; they need root.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator

import pytest
from tooling.netlab import HUB_ADDRESS, Link, NetLab, NetLabError, netem_available, unavailable

needs_lab = pytest.mark.skipif(unavailable() is not None, reason=f"no network lab here: {unavailable()}")

# Each server prints its port once it listens, then one result line.
ECHO_SERVER = """
import socket
s = socket.create_server(("0.0.0.0", 0))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while data := c.recv(65536):
    c.sendall(data)
"""
ECHO_CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(10):
    t = time.perf_counter()
    c.sendall(b"x")
    assert c.recv(1) == b"x"
    print((time.perf_counter() - t) * 1e3)
"""
SINK_SERVER = """
import socket, time
s = socket.create_server(("0.0.0.0", 0))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
n = len(c.recv(65536))
t = time.perf_counter()  # from the first data to the end: excludes the handshake
while data := c.recv(65536):
    n += len(data)
print(n, time.perf_counter() - t, flush=True)
"""
BULK_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
c.sendall(bytes(int(sys.argv[3])))
c.close()
"""
UDP_SERVER = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
s.bind(("0.0.0.0", 0))
print(s.getsockname()[1], flush=True)
seen = set()
s.settimeout(10)
try:
    while True:
        seen.add(s.recv(100))
        s.settimeout(0.5)  # the sender is done after half a second of silence
except TimeoutError:
    print(len(seen), flush=True)
"""
UDP_CLIENT = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
start = time.perf_counter()
for i in range(int(sys.argv[3])):
    s.sendto(i.to_bytes(4, "big") + bytes(60), (sys.argv[1], int(sys.argv[2])))
    if i % 20 == 19:  # 20 datagrams each 10 ms: well under the rate, so only `loss` drops them
        time.sleep(max(0.0, start + (i + 1) / 2000 - time.perf_counter()))
"""


def _serve(lab: NetLab, host: str, code: str) -> tuple[subprocess.Popen[str], str]:
    """Start `code` in `host`'s namespace; the port it printed."""
    proc = subprocess.Popen(lab.wrap(host, [sys.executable, "-c", code]), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def _client(lab: NetLab, host: str, code: str, *args: str) -> str:
    cmd = lab.wrap(host, [sys.executable, "-c", code, HUB_ADDRESS, *args])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout


@pytest.fixture(scope="module")
def lab() -> Iterator[NetLab]:
    with NetLab(["server", "a", "b"], Link(delay_ms=50, loss=0.0, rate_mbit=2), backend="tun") as built:
        yield built


@needs_lab
def test_round_trip_is_twice_the_one_way_delay(lab: NetLab) -> None:
    server, port = _serve(lab, "server", ECHO_SERVER)
    try:
        rtts = [float(line) for line in _client(lab, "a", ECHO_CLIENT, port).split()]
    finally:
        server.wait(10)
    print(f"RTT median {statistics.median(rtts):.1f} ms over {len(rtts)}")
    assert len(rtts) == 10 and 95 <= statistics.median(rtts) <= 150


@needs_lab
@pytest.mark.slow
def test_bulk_transfer_runs_at_the_link_rate(lab: NetLab) -> None:
    server, port = _serve(lab, "server", SINK_SERVER)
    try:
        _client(lab, "b", BULK_CLIENT, port, "500000")
        assert server.stdout is not None
        received, seconds = server.stdout.readline().split()
    finally:
        server.wait(10)
    rate = int(received) * 8 / float(seconds) / 1e6  # TCP payload: IP and TCP headers take ~3.5% of the 2 Mbit/s
    print(f"bulk {received} B in {float(seconds):.2f} s: {rate:.2f} Mbit/s")
    assert int(received) == 500_000 and 1.5 <= rate <= 2.3


@needs_lab
@pytest.mark.slow
def test_loss_drops_the_given_fraction() -> None:
    n, loss = 2000, 0.05
    with NetLab(["server", "a", "b"], Link(delay_ms=50, loss=loss, rate_mbit=2), backend="tun", seed=3) as lab:
        server, port = _serve(lab, "server", UDP_SERVER)
        _client(lab, "a", UDP_CLIENT, port, str(n))
        assert server.stdout is not None
        delivered = int(server.stdout.readline())
        server.wait(10)
    sd = math.sqrt(n * loss * (1 - loss))
    print(f"delivered {delivered}/{n} = {delivered / n:.4f} (expected {1 - loss}, sd {sd / n:.4f})")
    assert abs(delivered - n * (1 - loss)) <= 5 * sd


def _names() -> str:
    """Every namespace and every interface of the root namespace."""
    commands = (["ip", "netns", "list"], ["ip", "-o", "link"])
    return " ".join(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout for cmd in commands)


@needs_lab
def test_exit_removes_everything_it_created() -> None:
    with NetLab(["a", "hub", "b"], Link(delay_ms=1), hub="hub", backend="tun") as lab:
        assert lab.ip("hub") == HUB_ADDRESS and lab.ip("a") == "10.200.1.2" and lab.ip("b") == "10.200.2.2"
        assert {lab.netns(h) for h in ("a", "hub", "b")} <= set(_names().split())
        links = subprocess.run(lab.wrap("hub", ["ip", "-o", "link"]), capture_output=True, text=True, check=True).stdout
        assert f"{lab.prefix}h1:" in links and f"{lab.prefix}h2:" in links and "lo: <LOOPBACK,UP" in links
    assert lab.prefix not in _names()


@needs_lab
def test_a_failed_build_removes_what_it_made() -> None:
    prefix = f"nlf{os.getpid() % 10**7}"
    lab = NetLab(["server", "a", "b"], Link(), backend="tun", prefix=prefix)
    taken = lab.netns("b")  # a name in use: the build fails at the last namespace
    subprocess.run(["ip", "netns", "add", taken], check=True)
    try:
        with pytest.raises(NetLabError, match=taken), lab:
            pass
        assert _names().split().count(taken) == 1 and lab.netns("a") not in _names()
    finally:
        subprocess.run(["ip", "netns", "del", taken], check=True)
    assert prefix not in _names()


@pytest.mark.skipif(netem_available(), reason="the kernel has netem")
def test_netem_backend_without_netem_says_so() -> None:
    with pytest.raises(NetLabError, match="netem"):
        NetLab(["server", "a"], Link(delay_ms=50), backend="netem")


@pytest.mark.parametrize(
    ("field", "value"),
    [("delay_ms", -1.0), ("delay_ms", math.inf), ("loss", 1.5), ("loss", math.nan), ("rate_mbit", -2.0)],
)
def test_bad_link_values_name_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"Link.{field} "):
        Link(**{field: value})


@pytest.mark.parametrize(
    ("hosts", "kwargs", "message"),
    [
        (["a", "b"], {}, "include the hub"),
        (["server", "a", "a"], {}, "distinct"),
        (["server", "a"], {"prefix": "has-dash"}, "prefix"),
        (["server", "a"], {"prefix": "elevenchars"}, "prefix"),
        (["server", "a"], {"backend": "ns3"}, "backend"),
    ],
)
def test_bad_lab_arguments(hosts: list[str], kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NetLab(hosts, Link(), **kwargs)  # type: ignore[arg-type]
