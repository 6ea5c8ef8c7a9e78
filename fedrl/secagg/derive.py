"""Round-bound derivations shared by client and server: KDF labels, AEAD data, mask signs.

Binding the round and session into every key and every associated-data string makes a
ciphertext or seed from one round useless in any other (Bonawitz et al. 2017: replay protection).
"""

from __future__ import annotations

import struct

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedrl.secagg.crypto import KEY_BYTES, agree
from fedrl.secagg.params import Params

_SHARE_LABEL = b"fedrl-secagg share"
_MASK_LABEL = b"fedrl-secagg mask"
_AD_LABEL = b"fedrl-secagg"
_SELF_LABEL = b"fedrl-secagg self mask"


def _round_bytes(params: Params) -> bytes:
    return params.session + struct.pack(">Q", params.round)


def share_key(c_sk: bytes, peer_c_pk: bytes, params: Params) -> bytes:
    """AES key for shares between a node and a peer (the same key in both directions)."""
    return agree(c_sk, peer_c_pk, _SHARE_LABEL + _round_bytes(params))


def mask_seed(s_sk: bytes, peer_s_pk: bytes, params: Params) -> bytes:
    """PRG seed ``s_uv`` of the pairwise mask between a node and a peer (symmetric in the pair)."""
    return agree(s_sk, peer_s_pk, _MASK_LABEL + _round_bytes(params))


def self_mask_key(b_seed: bytes) -> bytes:
    """The 32-byte PRG key of a node's self mask, from its 16-byte seed ``b`` (HKDF-SHA256)."""
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=_SELF_LABEL).derive(b_seed)


def share_ad(params: Params, sender: int, receiver: int) -> bytes:
    """Associated data of the share ``sender`` encrypts for ``receiver`` in this round."""
    return _AD_LABEL + _round_bytes(params) + struct.pack(">QQ", sender, receiver)


def pair_sign(u: int, v: int) -> int:
    """Sign with which ``u`` adds its pairwise mask with ``v``: +1 if ``u < v`` else -1, so pairs cancel."""
    return 1 if u < v else -1
