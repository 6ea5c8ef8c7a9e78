"""``fedrl certs``: development TLS certificates and SuperNode authentication keys, with ``cryptography``.

Writes into ``--out``:

- ``ca.crt``, ``ca.key``: a self-signed development CA (P-384, 1 year). Keep ``ca.key`` off the
  nodes; anyone holding it can mint server certificates your nodes will trust.
- ``server.pem``, ``server.key``: the SuperLink's certificate, signed by the CA, whose subject
  alternative names cover ``--host`` (an IP address or a DNS name) and ``localhost``/127.0.0.1.
- ``node{i}.key``, ``node{i}.pub`` for i < ``--nodes``: each SuperNode's authentication key pair
  on NIST P-384, in the OpenSSH formats Flower 1.42 reads (``--auth-supernode-private-key`` on the
  SuperNode, ``flwr supernode register <node{i}.pub>`` on the CLI).

Private keys are written with mode 0600. Then it prints the commands that start each process.
This is for development and tests: a production deployment should use its organisation's CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedrl.errors import ConfigError

_CURVE = ec.SECP384R1()


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(host: str) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    try:
        ip = ipaddress.ip_address(host)
        if x509.IPAddress(ip) not in names:
            names.append(x509.IPAddress(ip))
    except ValueError:
        if host != "localhost":
            names.append(x509.DNSName(host))
    return names


def make(out: Path, host: str, nodes: int, days: int = 365) -> list[Path]:
    """Write the CA, the server certificate and ``nodes`` node key pairs; return the files written.

    Raises:
        ConfigError: naming ``--host`` or ``--nodes`` on a bad value.
    """
    if not host or any(c.isspace() for c in host):
        raise ConfigError("--host", f"got {host!r}; an IP address or a DNS name the nodes will dial")
    if nodes < 0:
        raise ConfigError("--nodes", f"got {nodes}; a count >= 0")
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(_CURVE)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedrl development CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA384()))
    server_key = ec.generate_private_key(_CURVE)
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
              .issuer_name(ca_name).public_key(server_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
              .not_valid_after(now + dt.timedelta(days=days))
              .add_extension(x509.SubjectAlternativeName(_san(host)), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA384()))
    written = [out / "ca.crt", out / "ca.key", out / "server.pem", out / "server.key"]
    _write(written[0], ca.public_bytes(serialization.Encoding.PEM))
    _write(written[1], _pem_key(ca_key), private=True)
    _write(written[2], server.public_bytes(serialization.Encoding.PEM))
    _write(written[3], _pem_key(server_key), private=True)
    for i in range(nodes):
        key = ec.generate_private_key(_CURVE)
        priv, pub = out / f"node{i}.key", out / f"node{i}.pub"
        _write(priv, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()), private=True)
        _write(pub, key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                  serialization.PublicFormat.OpenSSH) + b"\n")
        written += [priv, pub]
    return written


def commands(out: Path, host: str, nodes: int, port: int = 9092) -> str:
    """The commands that start a TLS SuperLink with node authentication and its SuperNodes.

    Flower 1.42 serves the Fleet, Control and runtime APIs on the SuperLink's one ``--port``."""
    d = out.resolve()
    lines = [
        "# SuperLink (TLS, only registered SuperNodes may connect). Its Control API is not",
        "# authenticated: expose this port only to your devices (docs/deployment.md).",
        (f"flower-superlink --ssl-ca-certfile {d}/ca.crt --ssl-certfile {d}/server.pem --ssl-keyfile {d}/server.key "
         f"--enable-supernode-auth --host 0.0.0.0 --port {port}"),
        "# The flwr CLI connection, in $FLWR_HOME/config.toml (default ~/.flwr/config.toml):",
        f'#   [superlink.fedrl]  address = "{host}:{port}"  root-certificates = "{d}/ca.crt"',
        "# Register each SuperNode's public key (once):",
        *(f"flwr supernode register {d}/node{i}.pub fedrl" for i in range(nodes)),
        "# Each SuperNode (its own --port when several share a machine):",
        *(f"flower-supernode --superlink {host}:{port} --root-certificates {d}/ca.crt "
          f"--auth-supernode-private-key {d}/node{i}.key "
          f"--node-config \"partition-id={i} num-partitions={nodes}\" --port {9210 + i}" for i in range(nodes)),
        "# Then: fedrl run . fedrl",
    ]
    return "\n".join(lines)
