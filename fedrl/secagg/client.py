"""The client side of SecAgg / SecAgg+ as a state machine (Bonawitz et al. 2017, Fig. 4).

One :class:`ClientSession` per node per round. Stages must run in order
(advertise -> share -> mask -> unmask), each at most once; the state survives between stages
as plain arrays (:meth:`ClientSession.to_arrays`). Refusals raise :class:`ClientRefused`
without changing the stage; calls out of order raise :class:`StageError`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from fedrl.secagg.client_state import STAGES, ClientState, state_from_arrays, state_to_arrays
from fedrl.secagg.crypto import KEY_BYTES, KeyPair, decrypt_share, encrypt_share, is_valid_public_key, prg_mask
from fedrl.secagg.derive import mask_seed, pair_sign, self_mask_key, share_ad, share_key
from fedrl.secagg.errors import ClientRefused, ShareRejected, StageError
from fedrl.secagg.messages import Keys, Masked, SharePayload, decode_payload, encode_payload
from fedrl.secagg.params import Params
from fedrl.secagg.ring import ring_reduce, to_ring_vector
from fedrl.secagg.shamir import SEED_BYTES, split_secret

log = logging.getLogger("fedrl")

_ADVERTISE, _SHARE, _MASK, _UNMASK, _DONE = range(len(STAGES))


def _node_ids(name: str, ids: Iterable[int]) -> list[int]:
    out = list(ids)
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in out):
        raise ClientRefused(f"{name} must be node ids")
    if len(set(out)) != len(out):
        raise ClientRefused(f"{name} repeats a node")
    return [int(v) for v in out]


class ClientSession:
    """One node's side of one SecAgg round."""

    def __init__(self, node: int, params: Params, state: ClientState) -> None:
        """Wrap an existing state; use :meth:`new` or :meth:`from_arrays` instead."""
        if node not in params.neighbours:
            raise ValueError(f"node {node} is not in the round's nodes")
        self.node = int(node)
        self.params = params
        self._state = state

    @classmethod
    def new(cls, node: int, params: Params, keys: tuple[bytes, bytes] | None = None) -> ClientSession:
        """A fresh session with two X25519 key pairs (c: share encryption, s: pairwise masks).

        ``keys`` are the two private keys when the node generated and advertised them ahead of
        the round (``fedrl.flower.secure_exchange``); each pair must serve one session only.
        """
        c_sk, s_sk = keys if keys is not None else (KeyPair.generate().private, KeyPair.generate().private)
        return cls(node, params, ClientState(_ADVERTISE, c_sk, s_sk))

    @classmethod
    def from_arrays(cls, node: int, params: Params, arrays: Mapping[str, np.ndarray]) -> ClientSession:
        """Restore a session saved by :meth:`to_arrays` for the same node, round and session."""
        return cls(node, params, state_from_arrays(node, params, arrays))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The session state as int64/uint8 arrays (contains secrets: keep it local to the node)."""
        return state_to_arrays(self.node, self.params, self._state)

    @property
    def stage(self) -> str:
        """Name of the next call this session accepts (``"done"`` after unmask)."""
        return STAGES[self._state.stage]

    def _expect(self, stage: int) -> None:
        if self._state.stage != stage:
            raise StageError(f"node {self.node}: {STAGES[stage]} called while the session expects {self.stage}")

    def advertise(self) -> Keys:
        """Stage 1: the two public keys."""
        self._expect(_ADVERTISE)
        st = self._state
        keys = Keys(
            node=self.node,
            round=self.params.round,
            session=self.params.session,
            c_pk=KeyPair.from_private(st.c_sk).public,
            s_pk=KeyPair.from_private(st.s_sk).public,
        )
        st.stage = _SHARE
        return keys

    def _check_neighbour_keys(self, neigh_keys: Mapping[int, tuple[bytes, bytes]]) -> dict[int, tuple[bytes, bytes]]:
        p, st = self.params, self._state
        ids = _node_ids("neighbour keys", neigh_keys)
        stray = set(ids) - set(p.neighbours[self.node])
        if stray:
            raise ClientRefused(f"node {self.node} got keys for non-neighbours {sorted(stray)}")
        if len(ids) < p.threshold - 1:
            raise ClientRefused(f"node {self.node} got {len(ids)} neighbour keys, needs {p.threshold - 1}")
        peers: dict[int, tuple[bytes, bytes]] = {}
        seen = {KeyPair.from_private(st.c_sk).public, KeyPair.from_private(st.s_sk).public}
        for v in ids:
            pair = neigh_keys[v]
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ClientRefused(f"keys of node {v} must be a (c_pk, s_pk) pair")
            for key in pair:
                # A low-order point would make the agreed key public (all-zero X25519 output).
                if not is_valid_public_key(key):
                    raise ClientRefused(f"keys of node {v} must be usable {KEY_BYTES}-byte X25519 keys")
                if key in seen:
                    raise ClientRefused(f"node {self.node} got a duplicate public key (node {v})")
                seen.add(key)
            peers[v] = (pair[0], pair[1])
        return peers

    def share(self, neigh_keys: Mapping[int, tuple[bytes, bytes]]) -> dict[int, bytes]:
        """Stage 2: ``{neighbour: ciphertext}`` carrying that neighbour's shares of ``b_u`` and ``s_sk_u``.

        ``neigh_keys`` maps each responding neighbour to its ``(c_pk, s_pk)``. The secrets are
        split t-of-|holders| among the responding holders (this node included; it keeps its own).

        Raises:
            ClientRefused: on keys for non-neighbours, duplicate or malformed keys, a low-order
                key, or fewer than ``threshold - 1`` neighbours.
        """
        self._expect(_SHARE)
        p, st = self.params, self._state
        peers = self._check_neighbour_keys(neigh_keys)
        keys = {v: share_key(st.c_sk, peers[v][0], p) for v in peers}
        b_seed = os.urandom(SEED_BYTES)
        holders = sorted((*peers, self.node))
        b_shares = split_secret(b_seed, p.threshold, holders)
        s_shares = split_secret(st.s_sk, p.threshold, holders)
        out: dict[int, bytes] = {}
        for i, v in enumerate(holders):
            if v == self.node:
                continue
            payload = SharePayload(b_shares[v], s_shares[v], i + 1, self.node, v, p.round)
            out[v] = encrypt_share(keys[v], encode_payload(payload), share_ad(p, self.node, v))
        st.peers, st.b_seed = peers, b_seed
        st.held = {self.node: (b_shares[self.node], s_shares[self.node])}
        st.stage = _MASK
        return out

    def _open(self, sender: int, blob: bytes) -> SharePayload:
        p = self.params
        key = share_key(self._state.c_sk, self._state.peers[sender][0], p)
        payload = decode_payload(decrypt_share(key, blob, share_ad(p, sender, self.node)))
        if (payload.sender, payload.receiver, payload.round) != (sender, self.node, p.round):
            raise ShareRejected("share names the wrong sender, receiver or round")
        if not 1 <= payload.x <= len(p.holders(sender)):
            raise ShareRejected(f"share x-coordinate {payload.x} out of range")
        return payload

    def mask(self, x: npt.ArrayLike, received: Mapping[int, bytes]) -> Masked:
        """Stage 3: the masked input ``y = x + PRG(b_u) + sum_v sign(u, v) PRG(s_uv) mod 2**bits``.

        ``received`` maps each sender to the ciphertext it addressed to this node. The pairwise sum
        runs over every sender, including those whose ciphertext is rejected (listed in
        ``Masked.rejected``): the server removes those masks after reconstructing the sender's key.

        Raises:
            ValueError: if ``x`` is not ``params.length`` integers in ``[0, 2**bits)``.
            ClientRefused: on a ciphertext from a node this node did not share with, or when fewer
                than ``threshold`` holders (this node included) sent shares.
        """
        self._expect(_MASK)
        p, st = self.params, self._state
        y = to_ring_vector(x, p.bits, p.length)
        senders = _node_ids("senders", received)
        stray = set(senders) - set(st.peers)
        if stray:
            raise ClientRefused(f"node {self.node} got ciphertexts from non-peers {sorted(stray)}")
        if len(senders) + 1 < p.threshold:
            raise ClientRefused(f"node {self.node} got shares from {len(senders)} peers, needs {p.threshold - 1}")
        held = dict(st.held)
        rejected = []
        for v in sorted(senders):
            try:
                payload = self._open(v, received[v])
            except ShareRejected as err:
                log.warning("secagg round %d: node %d rejects the share from node %d: %s", p.round, self.node, v, err)
                rejected.append(v)
                continue
            held[v] = (payload.b_share, payload.s_share)
        y += prg_mask(self_mask_key(st.b_seed), p.length, p.bits)
        for v in senders:
            pairwise = prg_mask(mask_seed(st.s_sk, st.peers[v][1], p), p.length, p.bits)
            if pair_sign(self.node, v) > 0:
                y += pairwise
            else:
                y -= pairwise  # uint64 wrap-around; 2**bits divides 2**64
        st.held, st.senders, st.rejected = held, tuple(sorted(senders)), tuple(rejected)
        st.stage = _UNMASK
        return Masked(self.node, p.round, p.session, ring_reduce(y, p.bits), tuple(rejected))

    def unmask(self, survivors: Iterable[int], dropped: Iterable[int]) -> dict[int, bytes]:
        """Stage 4: ``{v: share}`` with the b share of each surviving holder-peer and the s-key share
        of each dropped one (own shares included; shares from rejected senders are not held).

        Callable once, so no node ever sees both kinds of share for the same ``v`` from this client.
        The session is spent afterwards and its secrets are erased.

        Raises:
            ClientRefused: if the lists overlap, this node is not a survivor, or fewer than
                ``threshold`` nodes survive overall or among this node's holders.
        """
        self._expect(_UNMASK)
        p, st = self.params, self._state
        alive, gone = set(_node_ids("survivors", survivors)), set(_node_ids("dropped", dropped))
        if alive & gone:
            raise ClientRefused(f"node {self.node}: survivors and dropped overlap on {sorted(alive & gone)}")
        if self.node not in alive:
            raise ClientRefused(f"node {self.node} is asked to unmask but not listed as a survivor")
        mine = set(p.holders(self.node))
        # With fewer than t surviving holders b_u cannot be rebuilt anyway, and in a sparse graph a
        # node whose neighbours all dropped would have its input unmasked alone (Bell et al. 2020).
        if len(alive) < p.threshold or len(alive & mine) < p.threshold:
            raise ClientRefused(
                f"node {self.node}: {len(alive)} survivors, {len(alive & mine)} of its holders; threshold {p.threshold}"
            )
        out = {v: st.held[v][0] for v in sorted(alive & mine) if v in st.held}
        out.update({v: st.held[v][1] for v in sorted(gone & mine) if v in st.held})
        self._state = ClientState(_DONE, b"", b"")
        return out
