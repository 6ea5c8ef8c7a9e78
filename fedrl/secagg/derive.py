"""Round-bound derivations shared by client and server: KDF labels, AEAD data, mask signs.

Binding the round and session into every key and every associated-data string makes a
ciphertext or seed from one round useless in any other (Bonawitz et al. 2017: replay protection).
"""

from __future__ import annotations

import struct

from fedrl.secagg.crypto import agree
from fedrl.secagg.params import Params

_SHARE_LABEL = b"fedrl-secagg share"
_MASK_LABEL = b"fedrl-secagg mask"
_AD_LABEL = b"fedrl-secagg"


def _round_bytes(params: Params) -> bytes:
    return params.session + struct.pack(">Q", params.round)


def share_key(c_sk: bytes, peer_c_pk: bytes, params: Params) -> bytes:
    """AES key for shares between a node and a peer (the same key in both directions)."""
    return agree(c_sk, peer_c_pk, _SHARE_LABEL + _round_bytes(params))


def mask_seed(s_sk: bytes, peer_s_pk: bytes, params: Params) -> bytes:
    """PRG seed ``s_uv`` of the pairwise mask between a node and a peer (symmetric in the pair)."""
    return agree(s_sk, peer_s_pk, _MASK_LABEL + _round_bytes(params))


def share_ad(params: Params, sender: int, receiver: int) -> bytes:
    """Associated data of the share ``sender`` encrypts for ``receiver`` in this round."""
    return _AD_LABEL + _round_bytes(params) + struct.pack(">QQ", sender, receiver)


def pair_sign(u: int, v: int) -> int:
    """Sign with which ``u`` adds its pairwise mask with ``v``: +1 if ``u < v`` else -1, so pairs cancel."""
    return 1 if u < v else -1
