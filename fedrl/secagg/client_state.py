"""A client's between-stage state and its plain-array form.

Each stage may run in a fresh process, so the state round-trips through ``dict[str, np.ndarray]``
(int64 and uint8 arrays only, no pickle). The arrays hold the client's secrets: keep them local.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fedrl.secagg.crypto import KEY_BYTES
from fedrl.secagg.params import Params
from fedrl.secagg.shamir import SEED_BYTES, SHARE_BYTES

STAGES = ("advertise", "share", "mask", "unmask", "done")
"""Client stages in order; the state's ``stage`` is the index of the next call allowed."""


@dataclass
class ClientState:
    """What a client remembers between stages.

    ``peers``: responding neighbour -> (c_pk, s_pk). ``held``: owner -> (b share, s-key share) of
    the shares this client holds (its own included). ``senders``: neighbours whose ciphertext
    arrived (rejected ones included). ``rejected``: senders whose ciphertext was refused.
    """

    stage: int
    c_sk: bytes
    s_sk: bytes
    peers: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    b_seed: bytes = b""
    held: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    senders: tuple[int, ...] = ()
    rejected: tuple[int, ...] = ()


def _u8(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.uint8).copy()


def _rows(pairs: list[tuple[bytes, bytes]], size_a: int, size_b: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.frombuffer(b"".join(p[0] for p in pairs), dtype=np.uint8).reshape(len(pairs), size_a).copy()
    b = np.frombuffer(b"".join(p[1] for p in pairs), dtype=np.uint8).reshape(len(pairs), size_b).copy()
    return a, b


def state_to_arrays(node: int, params: Params, state: ClientState) -> dict[str, np.ndarray]:
    """Arrays from which :func:`state_from_arrays` rebuilds ``state`` for the same node and round."""
    peer_ids = sorted(state.peers)
    held_ids = sorted(state.held)
    peer_c, peer_s = _rows([state.peers[v] for v in peer_ids], KEY_BYTES, KEY_BYTES)
    held_b, held_s = _rows([state.held[v] for v in held_ids], SEED_BYTES, SHARE_BYTES)
    return {
        "bind": np.array([node, params.round, state.stage], dtype=np.int64),
        "session": _u8(params.session),
        "c_sk": _u8(state.c_sk),
        "s_sk": _u8(state.s_sk),
        "b_seed": _u8(state.b_seed),
        "peer_ids": np.array(peer_ids, dtype=np.int64),
        "peer_c_pk": peer_c,
        "peer_s_pk": peer_s,
        "held_ids": np.array(held_ids, dtype=np.int64),
        "held_b": held_b,
        "held_s": held_s,
        "senders": np.array(state.senders, dtype=np.int64),
        "rejected": np.array(state.rejected, dtype=np.int64),
    }


def _ids(arrays: Mapping[str, np.ndarray], key: str) -> list[int]:
    a = np.asarray(arrays[key])
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{key} must be a 1-D integer array")
    return [int(v) for v in a]


def _table(arrays: Mapping[str, np.ndarray], key: str, n: int, size: int) -> list[bytes]:
    a = np.asarray(arrays[key])
    if a.dtype != np.uint8 or a.shape != (n, size):
        raise ValueError(f"{key} must be a uint8 array of shape ({n}, {size})")
    return [bytes(row) for row in a]


def state_from_arrays(node: int, params: Params, arrays: Mapping[str, np.ndarray]) -> ClientState:
    """Inverse of :func:`state_to_arrays`.

    Raises:
        ValueError: on missing or malformed arrays, or arrays saved by another node, round or session.
    """
    try:
        bind = _ids(arrays, "bind")
        if len(bind) != 3:
            raise ValueError("bind must hold node, round and stage")
        saved_node, saved_round, stage = bind
        if saved_node != node or saved_round != params.round:
            raise ValueError(
                f"state belongs to node {saved_node} round {saved_round}, not node {node} round {params.round}"
            )
        if np.asarray(arrays["session"], dtype=np.uint8).tobytes() != params.session:
            raise ValueError("state belongs to another session")
        if not 0 <= stage < len(STAGES):
            raise ValueError(f"unknown stage {stage}")
        secrets = {}
        for key in ("c_sk", "s_sk", "b_seed"):
            a = np.asarray(arrays[key])
            if a.dtype != np.uint8 or a.ndim != 1:
                raise ValueError(f"{key} must be a 1-D uint8 array")
            secrets[key] = a.tobytes()
        peer_ids = _ids(arrays, "peer_ids")
        held_ids = _ids(arrays, "held_ids")
        peer_c = _table(arrays, "peer_c_pk", len(peer_ids), KEY_BYTES)
        peer_s = _table(arrays, "peer_s_pk", len(peer_ids), KEY_BYTES)
        held_b = _table(arrays, "held_b", len(held_ids), SEED_BYTES)
        held_s = _table(arrays, "held_s", len(held_ids), SHARE_BYTES)
        return ClientState(
            stage=stage,
            c_sk=secrets["c_sk"],
            s_sk=secrets["s_sk"],
            peers=dict(zip(peer_ids, zip(peer_c, peer_s))),
            b_seed=secrets["b_seed"],
            held=dict(zip(held_ids, zip(held_b, held_s))),
            senders=tuple(_ids(arrays, "senders")),
            rejected=tuple(_ids(arrays, "rejected")),
        )
    except KeyError as err:
        raise ValueError(f"client state arrays lack {err}") from err
