"""``fedrl certs``: development TLS certificates and SuperNode authentication keys, with ``cryptography``.

Writes into ``--out``:

- ``ca.crt``, ``ca.key``: a self-signed development CA (P-384, 1 year). Keep ``ca.key`` off the
  nodes; anyone holding it can mint server certificates your nodes will trust.
- ``server.pem``, ``server.key``: the SuperLink's certificate, signed by the CA, whose subject
  alternative names cover ``--host`` (an IP address or a DNS name) and ``localhost``/127.0.0.1.
- ``node{i}.key``, ``node{i}.pub`` for i < ``--nodes``: each SuperNode's authentication key pair
  on NIST P-384, in the OpenSSH formats Flower 1.42 reads (``--auth-supernode-private-key`` on the
  SuperNode, ``flwr supernode register <node{i}.pub>`` on the CLI).

Every file is written atomically through ``fedrl.storage.atomic`` (a random temporary name, never a
planted symlink); private keys are created with mode 0600, never readable by others even for a
moment. A folder that already holds files is refused unless ``--force`` (replacing a CA silently
would lock out every node that trusts the old one). Then it prints the commands that start each
process. Bad arguments are one line naming the argument, exit status 2.
This is for development and tests: a production deployment should use its organisation's CA.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import re
import sys
from pathlib import Path
from typing import NoReturn

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedrl.errors import ConfigError
from fedrl.storage.atomic import PRIVATE, PUBLIC, write_bytes

_CURVE = ec.SECP384R1()
MAX_NODES = 1000
_CN_MAX = 64  # x509's upper bound on a common name (RFC 5280); longer DNS names go in the SAN only
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")  # RFC 1123 host name label


def check_host(host: str) -> None:
    """``host`` is an IP address or an ASCII DNS name (RFC 1123), else a ConfigError on ``--host``."""
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    if not host:
        raise ConfigError("--host", "is empty; an IP address or a DNS name the nodes will dial")
    if not host.isascii():
        try:
            hint = f"pass its IDNA form, --host {host.encode('idna').decode()}"
        except UnicodeError:
            hint = "it has no IDNA form either"
        raise ConfigError("--host", f"{host!r} is not ASCII; {hint}")
    if len(host) > 253:
        raise ConfigError("--host", f"is {len(host)} characters; a DNS name has at most 253")
    for label in host.split("."):
        if not _LABEL.fullmatch(label):
            raise ConfigError("--host", f"{host!r} is not an IP address or a DNS name: label {label[:70]!r} must be "
                                        "1-63 letters, digits or inner hyphens")


def check_args(out: Path, host: str, nodes: int, force: bool) -> None:
    """Refuse bad arguments before anything is generated or written (ConfigError naming the argument)."""
    check_host(host)
    if not 0 <= nodes <= MAX_NODES:
        raise ConfigError("--nodes", f"got {nodes}; a count of SuperNode key pairs in [0, {MAX_NODES}]")
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} is a file; a folder for the certificates and keys")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError("--out", f"{out} is not empty; pick an empty folder, or pass --force to replace "
                                   "its CA and keys (nodes that trust the old CA will not connect)")


def _write(path: Path, data: bytes, private: bool = False) -> None:
    write_bytes(path, data, PRIVATE if private else PUBLIC)  # a key is 0600 from its first byte


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


def make(out: Path, host: str, nodes: int, days: int = 365, force: bool = False) -> list[Path]:
    """Write the CA, the server certificate and ``nodes`` node key pairs; return the files written.

    Raises:
        ConfigError: naming ``--host``, ``--nodes`` or ``--out`` on a bad value, a non-empty
            ``out`` without ``force``, or a folder that cannot be written.
    """
    check_args(out, host, nodes, force)
    try:
        return _make(out, host, nodes, days)
    except OSError as err:
        raise ConfigError("--out", f"cannot write to {out}: {err.strerror or err}") from None


def _make(out: Path, host: str, nodes: int, days: int) -> list[Path]:
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
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                          host if len(host) <= _CN_MAX else "fedrl SuperLink")]))
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


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print the usage too: one line is enough
        raise _UsageError(message)


def main(argv: list[str]) -> int:
    """``fedrl certs``: 0 when written, 2 with one line on stderr for a bad argument."""
    ap = _Parser(prog="fedrl certs")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--host", required=True, help="the address SuperNodes dial (IP or DNS name)")
    ap.add_argument("--nodes", type=int, default=2, help=f"SuperNode key pairs to create (0..{MAX_NODES})")
    ap.add_argument("--force", action="store_true", help="replace the certificates and keys in a non-empty --out")
    try:
        args = ap.parse_args(argv)
        files = make(args.out, args.host, args.nodes, force=args.force)
    except (_UsageError, ConfigError) as err:
        print(f"fedrl certs: {err}", file=sys.stderr)
        return 2
    print(f"fedrl: wrote {len(files)} files to {args.out} (private keys 0600; keep ca.key off the nodes)\n")
    print(commands(args.out, args.host, args.nodes))
    return 0
