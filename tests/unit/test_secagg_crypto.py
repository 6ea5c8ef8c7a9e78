"""Key agreement, authenticated share encryption and the mask PRG."""

from __future__ import annotations

import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from fedrl.secagg.crypto import (
    KeyPair,
    ShareRejected,
    agree,
    decrypt_share,
    encrypt_share,
    is_valid_public_key,
    prg_mask,
)


def test_keypair_raw_and_private_hidden() -> None:
    kp = KeyPair.generate()
    assert len(kp.private) == 32 and len(kp.public) == 32
    assert KeyPair.from_private(kp.private) == kp
    assert kp.private.hex() not in repr(kp)
    assert KeyPair.generate().public != kp.public


def test_agree_symmetric_and_bound_to_info() -> None:
    a, b, c = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()
    k_ab = agree(a.private, b.public, b"label" + bytes(16))
    assert len(k_ab) == 32
    assert k_ab == agree(b.private, a.public, b"label" + bytes(16))
    assert k_ab != agree(a.private, b.public, b"label" + bytes(15) + b"\x01")
    assert k_ab != agree(a.private, c.public, b"label" + bytes(16))


def test_agree_rejects_bad_keys() -> None:
    a = KeyPair.generate()
    with pytest.raises(ValueError):
        agree(a.private[:31], a.public, b"x")
    with pytest.raises(ValueError):
        agree(a.private, a.public + b"\x00", b"x")
    with pytest.raises(ValueError):  # low-order point: the shared secret would be all zeros
        agree(a.private, bytes(32), b"x")


def test_is_valid_public_key() -> None:
    assert is_valid_public_key(KeyPair.generate().public)
    assert not is_valid_public_key(bytes(32))
    assert not is_valid_public_key(b"\x01" + bytes(31))  # order-1 point (u = 1)
    assert not is_valid_public_key(KeyPair.generate().public[:31])
    assert not is_valid_public_key("not bytes")


def test_encrypt_round_trip_with_random_nonce() -> None:
    key, ad = os.urandom(32), b"ad"
    blob = encrypt_share(key, b"secret share", ad)
    assert decrypt_share(key, blob, ad) == b"secret share"
    assert encrypt_share(key, b"secret share", ad) != blob  # fresh nonce each time
    assert len(blob) == 12 + len(b"secret share") + 16


@pytest.mark.parametrize("position", [0, 5, 11, 12, 20, -1])
def test_flipped_byte_rejected(position: int) -> None:
    key = os.urandom(32)
    blob = bytearray(encrypt_share(key, bytes(96), b"ad"))
    blob[position] ^= 0x01
    with pytest.raises(ShareRejected):
        decrypt_share(key, bytes(blob), b"ad")


def test_wrong_key_ad_or_short_blob_rejected() -> None:
    key = os.urandom(32)
    blob = encrypt_share(key, b"x" * 10, b"ad")
    for k, b, ad in [(os.urandom(32), blob, b"ad"), (key, blob, b"ad2"), (key, blob[:27], b"ad"), (key, b"", b"ad")]:
        with pytest.raises(ShareRejected):
            decrypt_share(k, b, ad)
    with pytest.raises(ShareRejected):
        decrypt_share(key, "text", b"ad")  # type: ignore[arg-type]


def test_prg_regression_values() -> None:
    # Pins the PRG layout (ChaCha20, counter 0, nonce b"fedrl-secagg", little-endian uint32s):
    # clients and servers of different versions must expand a seed identically.
    seed = bytes(range(32))
    assert prg_mask(seed, 4, 32).tolist() == [1660783777, 463864404, 2327187421, 1718346345]
    assert prg_mask(seed, 4, 8).tolist() == [161, 84, 221, 105]


def test_prg_is_chacha20_keystream() -> None:
    seed = os.urandom(32)
    stream = Cipher(algorithms.ChaCha20(seed, bytes(4) + b"fedrl-secagg"), mode=None).encryptor().update(bytes(4000))
    expected = np.frombuffer(stream, dtype="<u4").astype(np.uint64)
    np.testing.assert_array_equal(prg_mask(seed, 1000, 32), expected)


def test_prg_deterministic_prefix_stable_and_reduced() -> None:
    seed = os.urandom(32)
    full = prg_mask(seed, 1000, 32)
    assert full.dtype == np.uint64 and full.shape == (1000,)
    np.testing.assert_array_equal(prg_mask(seed, 1000, 32), full)
    np.testing.assert_array_equal(prg_mask(seed, 10, 32), full[:10])
    for bits in (1, 5, 17):
        np.testing.assert_array_equal(prg_mask(seed, 1000, bits), full % (1 << bits))
    assert not np.array_equal(prg_mask(os.urandom(32), 1000, 32), full)
    assert prg_mask(seed, 0, 8).shape == (0,)


def test_prg_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        prg_mask(bytes(31), 4, 8)
    with pytest.raises(ValueError):
        prg_mask(bytes(32), -1, 8)
    with pytest.raises(ValueError):
        prg_mask(bytes(32), 4, 33)
