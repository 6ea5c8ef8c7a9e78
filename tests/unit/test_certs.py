"""``fedrl certs``: a CA, a server certificate that verifies for the host, node keys Flower's own loaders accept."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key
from cryptography.x509.verification import PolicyBuilder, Store
from flwr.cli.supernode.register import try_load_public_key

from fedrl.cli import main
from fedrl.errors import ConfigError
from fedrl.flower.certs import make


def test_the_server_certificate_verifies_for_its_host_under_the_ca(tmp_path: Path) -> None:
    make(tmp_path, "fl.example.org", 2)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((tmp_path / "server.pem").read_bytes())
    store = Store([ca])
    for name in (x509.DNSName("fl.example.org"), x509.DNSName("localhost")):
        PolicyBuilder().store(store).build_server_verifier(name).verify(server, [])
    with pytest.raises(Exception, match="(?i)san|name|match"):
        PolicyBuilder().store(store).build_server_verifier(x509.DNSName("other.example.org")).verify(server, [])
    for key in ("ca.key", "server.key", "node0.key", "node1.key"):
        assert stat.S_IMODE((tmp_path / key).stat().st_mode) == 0o600


def test_node_keys_are_p384_in_the_formats_flower_loads(tmp_path: Path) -> None:
    make(tmp_path, "127.0.0.1", 3)
    for i in range(3):
        key = load_ssh_private_key((tmp_path / f"node{i}.key").read_bytes(), None)  # as flower-supernode does
        assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
        assert try_load_public_key(tmp_path / f"node{i}.pub")  # Flower's own `flwr supernode register` loader
    assert not (tmp_path / "node3.key").exists()


def test_a_real_tls_handshake_with_the_ca_and_the_ip_host(tmp_path: Path) -> None:
    make(tmp_path, "127.0.0.1", 0)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(tls.recv(5))

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"hello")
            assert tls.recv(5) == b"hello"
        t.join(5)
    # a client that does not trust our CA refuses the server
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        threading.Thread(target=lambda: listener.accept(), daemon=True).start()
        with socket.create_connection(("127.0.0.1", port)) as raw, pytest.raises(ssl.SSLError):
            ssl.create_default_context().wrap_socket(raw, server_hostname="127.0.0.1").do_handshake()


def test_bad_input_and_the_printed_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError) as err:
        make(tmp_path, "two words", 1)
    assert err.value.key == "--host"
    assert main(["certs", "--out", str(tmp_path / "c"), "--host", "10.0.0.5", "--nodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "--enable-supernode-auth" in out and "flwr supernode register" in out and out.count("flower-supernode") == 2
    assert "10.0.0.5:9092" in out


def _certs(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["certs", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_second_run_into_the_same_folder_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--out", str(tmp_path), "--host", "127.0.0.1", "--nodes", "1"]
    assert _certs(args, capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(before) == ["ca.crt", "ca.key", "node0.key", "node0.pub", "server.key", "server.pem"]
    rc, out, err = _certs(args, capsys)
    assert (rc, out) == (2, "")
    assert err == (f"fedrl certs: --out: {tmp_path} is not empty; pick an empty folder, or pass --force to replace "
                   "its CA and keys (nodes that trust the old CA will not connect)\n")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing replaced
    assert _certs([*args, "--force"], capsys)[0] == 0
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert after.keys() == before.keys() and after["ca.key"] != before["ca.key"]


def test_keys_are_0600_and_certificates_0644_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        make(tmp_path, "127.0.0.1", 1)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"ca.crt": 0o644, "ca.key": 0o600, "server.pem": 0o644, "server.key": 0o600,
                     "node0.key": 0o600, "node0.pub": 0o644}


BAD_ARGS = [
    (["--host", "exämple.com"], "--host: 'exämple.com' is not ASCII; pass its IDNA form, --host xn--exmple-cua.com"),
    (["--host", "a" * 70 + ".example.org"],
     (f"--host: '{'a' * 70}.example.org' is not an IP address or a DNS name: label '{'a' * 70}' must be 1-63 letters, "
     "digits or inner hyphens")),
    (["--host", ""], "--host: is empty; an IP address or a DNS name the nodes will dial"),
    (["--host", "two words"], ("--host: 'two words' is not an IP address or a DNS name: label 'two words' must be "
                              "1-63 letters, digits or inner hyphens")),
    (["--host", ("a" * 60 + ".") * 5 + "org"], "--host: is 308 characters; a DNS name has at most 253"),
    (["--host", "h", "--nodes", "-1"], "--nodes: got -1; a count of SuperNode key pairs in [0, 1000]"),
    (["--host", "h", "--nodes", "1001"], "--nodes: got 1001; a count of SuperNode key pairs in [0, 1000]"),
    (["--host", "h", "--nodes", "two"], "argument --nodes: invalid int value: 'two'"),
    ([], "the following arguments are required: --host"),
]


@pytest.mark.parametrize(("args", "line"), BAD_ARGS, ids=[str(i) for i in range(len(BAD_ARGS))])
def test_each_bad_argument_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  args: list[str], line: str) -> None:
    out_dir = tmp_path / "c"
    rc, out, err = _certs(["--out", str(out_dir), *args], capsys)
    assert (rc, out, err) == (2, "", f"fedrl certs: {line}\n")
    assert not out_dir.exists()  # refused before anything is created


def test_out_naming_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "certs.txt"
    f.write_text("x")
    rc, out, err = _certs(["--out", str(f), "--host", "h"], capsys)
    assert (rc, out, err) == (2, "", f"fedrl certs: --out: {f} is a file; a folder for the certificates and keys\n")
    assert f.read_text() == "x"


def test_the_command_line_prints_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "fedrl.cli", "certs", "--out", str(tmp_path / "c"), "--host",
                           "exämple.com"], capture_output=True, text=True, timeout=120, check=False)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [("fedrl certs: --host: 'exämple.com' is not ASCII; pass its IDNA form, "
                                        "--host xn--exmple-cua.com")]


def test_a_dns_name_longer_than_a_common_name_goes_in_the_san(tmp_path: Path) -> None:
    host = ".".join(["a" * 60, "b" * 60, "example", "org"])  # 133 characters: a valid name, too long for a CN
    make(tmp_path, host, 0)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((tmp_path / "server.pem").read_bytes())
    PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName(host)).verify(server, [])
