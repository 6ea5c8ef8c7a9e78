"""Cryptographic primitives: X25519 + HKDF-SHA256 agreement, AES-GCM shares, a ChaCha20 mask PRG.

Secrets come from the OS (``os.urandom`` and ``X25519PrivateKey.generate``), never from numpy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedrl.secagg.errors import ShareRejected
from fedrl.secagg.ring import RingVector, ring_mask

__all__ = ["KEY_BYTES", "KeyPair", "ShareRejected", "agree", "decrypt_share", "encrypt_share", "prg_mask"]

KEY_BYTES = 32
"""Length of X25519 keys, agreed keys and PRG seeds."""

NONCE_BYTES = 12
"""AES-GCM nonce length (random per message, prepended to the ciphertext)."""

_TAG_BYTES = 16

# cryptography's ChaCha20 takes a 16-byte nonce: a 32-bit little-endian block counter, then the
# 96-bit RFC 8439 nonce. Counter 0 and a constant nonce are safe because every seed is used for one
# mask only (b_u is fresh per round; pairwise seeds bind the round and session through HKDF).
_PRG_NONCE = bytes(4) + b"fedrl-secagg"


def _check_bytes(name: str, value: bytes, size: int) -> None:
    if not isinstance(value, bytes) or len(value) != size:
        got = f"{len(value)} bytes" if isinstance(value, bytes) else type(value).__name__
        raise ValueError(f"{name} must be {size} bytes, got {got}")


@dataclass(frozen=True, repr=False)
class KeyPair:
    """An X25519 key pair as raw 32-byte strings."""

    private: bytes
    public: bytes

    @classmethod
    def generate(cls) -> KeyPair:
        """A fresh pair from the OS random source."""
        return cls.from_private(X25519PrivateKey.generate().private_bytes_raw())

    @classmethod
    def from_private(cls, private: bytes) -> KeyPair:
        """The pair whose private key is ``private`` (32 raw bytes, clamped by X25519)."""
        _check_bytes("private key", private, KEY_BYTES)
        sk = X25519PrivateKey.from_private_bytes(private)
        return cls(private=private, public=sk.public_key().public_bytes_raw())

    def __repr__(self) -> str:  # keep the private key out of logs and tracebacks
        return f"KeyPair(public={self.public.hex()})"


def agree(private_raw: bytes, public_raw: bytes, info: bytes) -> bytes:
    """32-byte key shared by the owners of ``private_raw`` and of the pair behind ``public_raw``.

    X25519 followed by HKDF-SHA256 (no salt) with ``info``, which must name the purpose and the
    session so keys never repeat across purposes or rounds. Symmetric: ``agree(a.private, b.public,
    i) == agree(b.private, a.public, i)``.

    Raises:
        ValueError: on a key that is not 32 bytes or a low-order public key (all-zero secret).
    """
    _check_bytes("private key", private_raw, KEY_BYTES)
    _check_bytes("public key", public_raw, KEY_BYTES)
    shared = X25519PrivateKey.from_private_bytes(private_raw).exchange(X25519PublicKey.from_public_bytes(public_raw))
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(shared)


def is_valid_public_key(public_raw: object) -> bool:
    """Whether ``public_raw`` is 32 bytes and not a low-order X25519 point (which forces a known secret)."""
    if not isinstance(public_raw, bytes) or len(public_raw) != KEY_BYTES:
        return False
    try:
        X25519PrivateKey.generate().exchange(X25519PublicKey.from_public_bytes(public_raw))
    except ValueError:
        return False
    return True


def encrypt_share(key: bytes, plaintext: bytes, ad: bytes) -> bytes:
    """AES-256-GCM encryption of ``plaintext`` bound to ``ad``: ``nonce (12 random bytes) || ciphertext+tag``."""
    _check_bytes("key", key, KEY_BYTES)
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, ad)


def decrypt_share(key: bytes, blob: bytes, ad: bytes) -> bytes:
    """Inverse of :func:`encrypt_share`.

    Raises:
        ShareRejected: when ``blob`` is not bytes, is too short, or fails authentication under
            ``key`` and ``ad`` (tampered, misrouted, or from another round or session).
    """
    _check_bytes("key", key, KEY_BYTES)
    if not isinstance(blob, bytes) or len(blob) < NONCE_BYTES + _TAG_BYTES:
        raise ShareRejected("ciphertext is not bytes or too short")
    try:
        return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], ad)
    except InvalidTag as err:
        raise ShareRejected("ciphertext failed authentication") from err


def prg_mask(seed32: bytes, length: int, bits: int) -> RingVector:
    """``length`` pseudo-random ring elements in ``[0, 2**bits)`` expanded from a 32-byte seed.

    Element ``i`` is the little-endian ``uint32`` at bytes ``[4i, 4i+4)`` of the ChaCha20 keystream
    (key ``seed32``, counter 0, nonce ``b"fedrl-secagg"``), reduced mod ``2**bits``. The reduction
    keeps elements uniform because ``2**bits`` divides ``2**32``. Deterministic in ``seed32``; the
    first ``m`` elements do not depend on ``length``.
    """
    _check_bytes("seed", seed32, KEY_BYTES)
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueError(f"length must be an int >= 0, got {length!r}")
    mask = ring_mask(bits)
    stream = Cipher(algorithms.ChaCha20(seed32, _PRG_NONCE), mode=None).encryptor().update(bytes(4 * int(length)))
    out: RingVector = np.frombuffer(stream, dtype="<u4").astype(np.uint64)
    out &= mask
    return out
