"""Shamir sharing of 32-byte secrets keyed by holder id."""

from __future__ import annotations

import itertools
import os

import pytest

from fedrl.secagg.shamir import combine, share_x, split_secret

HOLDERS = [42, 3, 10, 7, 0]  # deliberately unsorted and non-contiguous


def test_share_x_is_one_plus_sorted_position() -> None:
    assert [share_x(h, HOLDERS) for h in (0, 3, 7, 10, 42)] == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError):
        share_x(5, HOLDERS)


@pytest.mark.parametrize("size", [16, 32])
@pytest.mark.parametrize("t", [1, 2, 3, 5])
def test_any_t_shares_reconstruct(t: int, size: int) -> None:
    secret = os.urandom(size)
    shares = split_secret(secret, t, HOLDERS)
    assert sorted(shares) == sorted(HOLDERS)
    assert all(len(s) == size for s in shares.values())
    for count in range(t, len(HOLDERS) + 1):
        for subset in itertools.combinations(HOLDERS, count):
            assert combine({h: shares[h] for h in subset}, HOLDERS, t) == secret


def test_t_equal_one_shares_are_the_secret() -> None:
    # A degree-0 polynomial: every share is the secret itself.
    secret = os.urandom(32)
    assert set(split_secret(secret, 1, HOLDERS).values()) == {secret}


@pytest.mark.parametrize("t", [2, 3, 5])
def test_fewer_than_t_shares_do_not_give_the_secret(t: int) -> None:
    secret = os.urandom(32)
    shares = split_secret(secret, t, HOLDERS)
    for subset in itertools.combinations(HOLDERS, t - 1):
        part = {h: shares[h] for h in subset}
        with pytest.raises(ValueError, match="need"):
            combine(part, HOLDERS, t)
        # Interpolating the t-1 points anyway lands on some other value (probability 2^-128 of a hit).
        assert combine(part, HOLDERS, t - 1) != secret


def test_halves_are_independent() -> None:
    secret = bytes(16) + os.urandom(16)
    shares = split_secret(secret, 2, HOLDERS)
    assert len({s[:16] for s in shares.values()}) == len(HOLDERS)  # low half random too, not zero shares


def test_split_validation() -> None:
    for secret, t, holders in [
        (bytes(31), 2, HOLDERS),
        (bytes(24), 2, HOLDERS),
        (bytes(32), 0, HOLDERS),
        (bytes(32), 6, HOLDERS),
        (bytes(32), 2, [1, 1, 2]),
        (bytes(32), 1, [-1, 2]),
        (bytes(32), 1, []),
    ]:
        with pytest.raises(ValueError):
            split_secret(secret, t, holders)


def test_combine_validation() -> None:
    shares = split_secret(os.urandom(32), 2, HOLDERS)
    with pytest.raises(ValueError, match="non-holder"):
        combine({0: shares[0], 99: shares[3]}, HOLDERS, 2)
    with pytest.raises(ValueError, match="same length"):
        combine({0: shares[0], 3: shares[3][:16]}, HOLDERS, 2)
    with pytest.raises(ValueError, match="16 or 32 bytes"):
        combine({0: shares[0], 3: shares[3][:20]}, HOLDERS, 2)
    with pytest.raises(ValueError):
        combine(shares, HOLDERS, 6)


def test_wrong_holder_set_gives_wrong_secret() -> None:
    # The x-coordinates come from the holder set: reconstructing against another set must fail.
    secret = os.urandom(32)
    shares = split_secret(secret, 2, HOLDERS)
    assert combine({3: shares[3], 7: shares[7]}, [3, 7, 10, 42], 2) != secret
