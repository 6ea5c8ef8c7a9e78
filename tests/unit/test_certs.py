"""``fedrl certs``: a CA, a server certificate that verifies for the host, node keys Flower's own loaders accept."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key
from cryptography.x509.verification import PolicyBuilder, Store
from flwr.cli.supernode.register import try_load_public_key

from fedrl.certs import make
from fedrl.cli import main
from fedrl.errors import ConfigError


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
