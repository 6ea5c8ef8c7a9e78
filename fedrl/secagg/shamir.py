"""t-of-n Shamir sharing of 16- and 32-byte secrets over GF(2^128), keyed by holder node id.

pycryptodome shares 16-byte secrets; a 32-byte secret (a private key) is split as two
independent 16-byte halves that use the same x-coordinates, so one 32-byte share is
``share(lo) || share(hi)``. A share is as long as its secret. The self-mask seed ``b`` is 16
bytes (128 bits of entropy, expanded by ``derive.self_mask_key``), so it costs one split and one
combine, not two: the server rebuilds one per survivor every round.
Holder ``h`` gets x-coordinate ``1 + sorted(holders).index(h)``, so the dealer and whoever
reconstructs agree on coordinates from the holder set alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from Crypto.Protocol.SecretSharing import Shamir

SECRET_BYTES = 32
SHARE_BYTES = 32
SEED_BYTES = 16
"""Secrets are SEED_BYTES (the self-mask seed) or SECRET_BYTES (a private key) long."""
_HALF = 16
_SIZES = (SEED_BYTES, SECRET_BYTES)


def _sorted_holders(holders: Iterable[int]) -> list[int]:
    hs = list(holders)
    if not hs:
        raise ValueError("holders must not be empty")
    if any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in hs):
        raise ValueError(f"holders must be ints >= 0, got {hs!r}")
    if len(set(hs)) != len(hs):
        raise ValueError(f"holders must be distinct, got {hs!r}")
    return sorted(hs)


def _check_threshold(t: int, n: int) -> None:
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= n:
        raise ValueError(f"threshold t must be an int in [1, {n}], got {t!r}")


def share_x(holder: int, holders: Iterable[int]) -> int:
    """The x-coordinate of ``holder``'s share: ``1 + sorted(holders).index(holder)``."""
    hs = _sorted_holders(holders)
    if holder not in hs:
        raise ValueError(f"{holder} is not a holder")
    return 1 + hs.index(holder)


def split_secret(secret: bytes, t: int, holders: Iterable[int]) -> dict[int, bytes]:
    """Split a 16- or 32-byte secret so that any ``t`` of the holders' shares reconstruct it.

    Returns ``{holder: share}`` (shares as long as the secret); fewer than ``t`` shares reveal
    nothing about the secret.

    Raises:
        ValueError: on a secret of another length, repeated or negative holders, or ``t``
            outside ``[1, len(holders)]``.
    """
    if not isinstance(secret, bytes) or len(secret) not in _SIZES:
        raise ValueError(f"secret must be {SEED_BYTES} or {SECRET_BYTES} bytes")
    hs = _sorted_holders(holders)
    _check_threshold(t, len(hs))
    halves = [Shamir.split(t, len(hs), secret[i:i + _HALF], ssss=False) for i in range(0, len(secret), _HALF)]
    # pycryptodome numbers shares 1..n in order, which is exactly our 1 + sorted index.
    return {h: b"".join(part[i][1] for part in halves) for i, h in enumerate(hs)}


def combine(shares: Mapping[int, bytes], holders: Iterable[int], t: int) -> bytes:
    """Reconstruct a secret split by :func:`split_secret` from at least ``t`` holders' shares.

    Uses the ``t`` shares of the smallest holder ids (pycryptodome wants exactly ``t``). A wrong
    share yields a wrong secret, not an error: callers that can must verify the result.

    Raises:
        ValueError: on fewer than ``t`` shares, a share from a non-holder, or shares that are not
            all 16 or all 32 bytes.
    """
    hs = _sorted_holders(holders)
    _check_threshold(t, len(hs))
    if len(shares) < t:
        raise ValueError(f"need {t} shares, got {len(shares)}")
    sizes = set()
    for h, s in shares.items():
        if h not in hs:
            raise ValueError(f"share from non-holder {h}")
        if not isinstance(s, bytes) or len(s) not in _SIZES:
            raise ValueError(f"share from {h} must be {SEED_BYTES} or {SECRET_BYTES} bytes")
        sizes.add(len(s))
    if len(sizes) != 1:
        raise ValueError("shares of one secret must all have the same length")
    size = sizes.pop()
    chosen = sorted(shares)[:t]
    x = {h: 1 + hs.index(h) for h in chosen}
    return b"".join(Shamir.combine([(x[h], shares[h][i:i + _HALF]) for h in chosen], ssss=False)
                    for i in range(0, size, _HALF))
