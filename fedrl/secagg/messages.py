"""Messages between clients and server, and the byte layout of an encrypted share's plaintext.

Message dataclasses hold only ints, bytes, tuples of ints and numpy arrays so that transport code
can map them one-to-one onto Flower records. Every message carries the round and session; the
server treats a message from another round or session like a dropout (replay protection).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from fedrl.secagg.errors import ShareRejected
from fedrl.secagg.shamir import SEED_BYTES, SHARE_BYTES


@dataclass(frozen=True)
class Keys:
    """Stage 1, client to server: the node's two X25519 public keys (raw 32 bytes each).

    ``c_pk`` encrypts shares sent to the node; ``s_pk`` seeds the node's pairwise masks.
    """

    node: int
    round: int
    session: bytes
    c_pk: bytes
    s_pk: bytes


@dataclass(frozen=True, eq=False)
class Masked:
    """Stage 3, client to server: the masked input and the senders whose shares it rejected.

    ``y`` is a ``uint64`` vector of ``params.length`` ring elements in ``[0, 2**bits)``.
    """

    node: int
    round: int
    session: bytes
    y: np.ndarray
    rejected: tuple[int, ...]


# Stage 2 (share) and stage 4 (unmask) messages are plain dicts:
#   share ciphertexts     {receiver: bytes}             (client -> server)
#   routed ciphertexts    {sender: bytes}               (server -> client)
#   unmask shares         {owner: share}                (client -> server; 16 bytes of b, 32 of a key)


class SharePayload(NamedTuple):
    """Plaintext of one encrypted share: ``owner``'s shares of ``b`` and of its mask key for ``holder``."""

    b_share: bytes
    s_share: bytes
    x: int
    sender: int
    receiver: int
    round: int


# 16-byte b share, 32-byte s share, then the share's x-coordinate, sender, receiver, round as big-endian uint64.
_PAYLOAD = struct.Struct(f">{SEED_BYTES}s{SHARE_BYTES}sQQQQ")


def encode_payload(p: SharePayload) -> bytes:
    """Fixed-size (80-byte) encoding of ``p``; raises ``ValueError`` on a wrong share size."""
    if len(p.b_share) != SEED_BYTES or len(p.s_share) != SHARE_BYTES:
        raise ValueError(f"shares must be {SEED_BYTES} (b) and {SHARE_BYTES} (s) bytes")
    return _PAYLOAD.pack(*p)


def decode_payload(raw: bytes) -> SharePayload:
    """Inverse of :func:`encode_payload`; raises :class:`ShareRejected` on a wrong size."""
    if len(raw) != _PAYLOAD.size:
        raise ShareRejected(f"share plaintext must be {_PAYLOAD.size} bytes, got {len(raw)}")
    return SharePayload(*_PAYLOAD.unpack(raw))
