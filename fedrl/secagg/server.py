"""The server side of SecAgg / SecAgg+ as a state machine (Bonawitz et al. 2017, Fig. 4).

Node sets follow the paper: U1 advertised keys, U2 sent shares, U3 (``survivors``) sent a masked
input that no peer accused; ``dropped`` is U2 \\ U3. A malformed message, or one from another
round or session, counts as that node dropping out. When the round cannot finish with every
needed secret rebuilt from ``threshold`` shares, :class:`SecAggAbort` is raised and nothing is
returned.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import NoReturn

import numpy as np

from fedrl.secagg.crypto import KeyPair, is_valid_public_key, prg_mask
from fedrl.secagg.derive import mask_seed, pair_sign, self_mask_key
from fedrl.secagg.errors import SecAggAbort, StageError
from fedrl.secagg.messages import Keys, Masked
from fedrl.secagg.params import Params
from fedrl.secagg.ring import RingVector, ring_reduce, to_ring_vector
from fedrl.secagg.shamir import SEED_BYTES, SHARE_BYTES, combine

log = logging.getLogger("fedrl")

SERVER_STAGES = ("keys", "shares", "masked", "unmask", "done", "aborted")
_KEYS, _SHARES, _MASKED, _UNMASK, _DONE, _ABORTED = range(len(SERVER_STAGES))


class SecAggServer:
    """The server of one round: call the four ``collect``/``unmask`` methods in order, once each."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.survivors: tuple[int, ...] = ()
        self.dropped: tuple[int, ...] = ()
        self._stage = _KEYS
        self._keys: dict[int, tuple[bytes, bytes]] = {}  # U1 -> (c_pk, s_pk)
        self._u2: set[int] = set()
        self._holding: dict[int, set[int]] = {}  # v -> survivors that hold a share of v's secrets
        self._sum: RingVector | None = None

    @property
    def stage(self) -> str:
        """Name of the next call this server accepts (``"done"`` or ``"aborted"`` at the end)."""
        return SERVER_STAGES[self._stage]

    def _expect(self, stage: int) -> None:
        if self._stage != stage:
            raise StageError(f"server: {SERVER_STAGES[stage]} called while the server expects {self.stage}")

    def _abort(self, reason: str) -> NoReturn:
        self._stage, self._sum = _ABORTED, None
        log.warning("secagg round %d aborted: %s", self.params.round, reason)
        raise SecAggAbort(reason)

    def _exclude(self, node: int, why: str) -> None:
        log.warning("secagg round %d: excluding node %d: %s", self.params.round, node, why)

    def _stale(self, node: int, msg: Keys | Masked) -> str | None:
        if msg.node != node:
            return f"message names node {msg.node}"
        if msg.round != self.params.round:
            return f"message from round {msg.round} (replay?)"
        if msg.session != self.params.session:
            return "message from another session (replay?)"
        return None

    def _holders_u1(self, v: int) -> list[int]:
        # The holder set v split its secrets over: fixes every share's x-coordinate.
        return [w for w in self.params.holders(v) if w in self._keys]

    def collect_keys(self, keys: Mapping[int, Keys]) -> dict[int, dict[int, tuple[bytes, bytes]]]:
        """Stage 1: ``{u: {v: (c_pk_v, s_pk_v)}}`` for each responder ``u`` and its responding neighbours ``v``.

        Excludes a node whose message names another node, round or session, whose keys are not
        usable 32-byte X25519 keys, or whose key equals any other key in the round (both owners).

        Raises:
            SecAggAbort: if fewer than ``threshold`` nodes respond, or a responder has fewer than
                ``threshold`` responding holders.
        """
        self._expect(_KEYS)
        p = self.params
        valid: dict[int, tuple[bytes, bytes]] = {}
        for u, msg in keys.items():
            why = "unknown node" if u not in p.neighbours else None
            why = why or ("not a Keys message" if not isinstance(msg, Keys) else self._stale(u, msg))
            if why is None and not (is_valid_public_key(msg.c_pk) and is_valid_public_key(msg.s_pk)):
                why = "malformed or low-order public key"
            if why:
                self._exclude(u, why)
                continue
            valid[u] = (msg.c_pk, msg.s_pk)
        uses = Counter(k for pair in valid.values() for k in pair)
        for u in [u for u, pair in valid.items() if any(uses[k] > 1 for k in pair)]:
            self._exclude(u, "public key duplicates another")
            del valid[u]
        self._keys = valid
        if len(valid) < p.threshold:
            self._abort(f"{len(valid)} nodes advertised keys, threshold is {p.threshold}")
        for u in sorted(valid):
            if len(self._holders_u1(u)) < p.threshold:
                self._abort(f"node {u} has {len(self._holders_u1(u))} responding holders < threshold {p.threshold}")
        self._stage = _SHARES
        return {u: {v: valid[v] for v in p.neighbours[u] if v in valid} for u in sorted(valid)}

    def collect_shares(self, cts: Mapping[int, Mapping[int, bytes]]) -> dict[int, dict[int, bytes]]:
        """Stage 2: route ciphertexts, returning ``{receiver v: {sender u: ciphertext}}`` for v in U2.

        A sender counts (joins U2) only if it sent exactly one ciphertext to each responding
        neighbour. Senders with fewer than ``threshold`` holders in U2 can never be unmasked, so
        they are excluded too (repeatedly, as excluding one may starve another).

        Raises:
            SecAggAbort: if fewer than ``threshold`` senders remain.
        """
        self._expect(_SHARES)
        p = self.params
        u2: set[int] = set()
        for u, out in cts.items():
            if u not in self._keys:
                self._exclude(u, "sent shares without advertised keys")
            elif not isinstance(out, Mapping) or set(out) != {v for v in p.neighbours[u] if v in self._keys}:
                self._exclude(u, "ciphertexts not addressed to exactly its responding neighbours")
            elif not all(isinstance(c, bytes) for c in out.values()):
                self._exclude(u, "a ciphertext is not bytes")
            else:
                u2.add(u)
        while short := {u for u in u2 if sum(w in u2 for w in p.holders(u)) < p.threshold}:
            for u in sorted(short):
                self._exclude(u, f"fewer than {p.threshold} of its holders sent shares")
            u2 -= short
        if len(u2) < p.threshold:
            self._abort(f"{len(u2)} nodes sent shares, threshold is {p.threshold}")
        self._u2 = u2
        self._stage = _MASKED
        return {v: {u: cts[u][v] for u in p.neighbours[v] if u in u2} for v in sorted(u2)}

    def _masked_problem(self, u: int, msg: object) -> str | None:
        p = self.params
        if u not in self._u2:
            return "not among the nodes that sent shares"
        if not isinstance(msg, Masked):
            return "not a Masked message"
        why = self._stale(u, msg)
        if why:
            return why
        try:
            to_ring_vector(msg.y, p.bits, p.length, "y")
        except ValueError as err:
            return str(err)
        rej = msg.rejected
        senders = {v for v in p.neighbours[u] if v in self._u2}
        if not isinstance(rej, tuple) or len(set(rej)) != len(rej) or not set(rej) <= senders:
            return "rejected must list distinct nodes that sent it shares"
        return None

    def collect_masked(self, masked: Mapping[int, Masked]) -> tuple[list[int], list[int]]:
        """Stage 3: ``(survivors, dropped)``, both sorted, to send to every survivor for unmasking.

        A node that any valid masked message lists as ``rejected`` is moved to ``dropped`` (its
        input is discarded and its mask key rebuilt, so its peers' masks still cancel).

        Raises:
            SecAggAbort: if fewer than ``threshold`` nodes survive, or a secret the sum needs
                (``b`` of a survivor, the mask key of a dropped node with a surviving neighbour)
                has fewer than ``threshold`` surviving holders.
        """
        self._expect(_MASKED)
        p = self.params
        valid: dict[int, Masked] = {}
        for u, msg in masked.items():
            why = self._masked_problem(u, msg)
            if why:
                self._exclude(u, why)
            else:
                valid[u] = msg
        accused = {v for msg in valid.values() for v in msg.rejected}
        for v in sorted(accused):
            who = sorted(u for u, msg in valid.items() if v in msg.rejected)
            self._exclude(v, f"its encrypted share was rejected by node(s) {who}")
        alive = set(valid) - accused
        gone = self._u2 - alive
        if len(alive) < p.threshold:
            self._abort(f"{len(alive)} nodes survive, threshold is {p.threshold}")
        self._holding = {
            v: {w for w in p.holders(v) if w in alive and (w == v or v not in valid[w].rejected)} for v in self._u2
        }
        for v in sorted(alive | gone):
            needed = v in alive or any(w in alive for w in p.neighbours[v])
            if needed and len(self._holding[v]) < p.threshold:
                self._abort(
                    f"only {len(self._holding[v])} survivors hold shares of node {v}, threshold is {p.threshold}"
                )
        total = np.zeros(p.length, dtype=np.uint64)
        for u in sorted(alive):
            total += valid[u].y.astype(np.uint64, copy=False)
        self._sum = total
        self.survivors, self.dropped = tuple(sorted(alive)), tuple(sorted(gone))
        self._stage = _UNMASK
        return list(self.survivors), list(self.dropped)

    def _gather(self, responses: Mapping[int, Mapping[int, bytes]], wanted: set[int]) -> dict[int, dict[int, bytes]]:
        got: dict[int, dict[int, bytes]] = {v: {} for v in wanted}
        for w, resp in responses.items():
            if w not in self.survivors or not isinstance(resp, Mapping):
                self._exclude(w, "unmask response from a non-survivor or not a mapping")
                continue
            for v, share in resp.items():
                size = SEED_BYTES if v in self.survivors else SHARE_BYTES  # b of a survivor, else a mask key
                if v in got and w in self._holding[v] and isinstance(share, bytes) and len(share) == size:
                    got[v][w] = share
        return got

    def unmask(self, responses: Mapping[int, Mapping[int, bytes]]) -> RingVector:
        """Stage 4: the ``uint64`` ring sum of the survivors' inputs, from the survivors' shares.

        Rebuilds ``b_v`` of every survivor and the mask key of every dropped node with a surviving
        neighbour, then strips those masks from the sum of masked inputs.

        Raises:
            SecAggAbort: if a needed secret has fewer than ``threshold`` shares, or a rebuilt mask
                key does not match the public key its owner advertised.
        """
        self._expect(_UNMASK)
        p = self.params
        alive = set(self.survivors)
        gone = {v for v in self.dropped if any(w in alive for w in p.neighbours[v])}
        got = self._gather(responses, alive | gone)
        for v in sorted(got):
            if len(got[v]) < p.threshold:
                self._abort(
                    f"{len(got[v])} shares of node {v}'s {'seed' if v in alive else 'mask key'}, need {p.threshold}"
                )
        assert self._sum is not None
        total = self._sum.copy()
        for v in sorted(alive):
            total -= prg_mask(self_mask_key(combine(got[v], self._holders_u1(v), p.threshold)), p.length, p.bits)
        for v in sorted(gone):
            s_sk = combine(got[v], self._holders_u1(v), p.threshold)
            if KeyPair.from_private(s_sk).public != self._keys[v][1]:
                self._abort(f"rebuilt mask key of node {v} does not match its public key")
            for u in p.neighbours[v]:
                if u in alive:
                    pairwise = prg_mask(mask_seed(s_sk, self._keys[u][1], p), p.length, p.bits)
                    # survivor u added sign(u, v) * PRG(s_uv); take it back out (uint64 wrap-around).
                    if pair_sign(u, v) > 0:
                        total -= pairwise
                    else:
                        total += pairwise
        self._sum = None
        self._stage = _DONE
        return ring_reduce(total, p.bits)
