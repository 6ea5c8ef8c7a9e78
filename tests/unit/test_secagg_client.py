"""Client state machine: stage order, refusals, state persistence and what unmask reveals."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fedrl.secagg import ClientRefused, ClientSession, KeyPair, Params, StageError, make_params
from fedrl.secagg.server import SecAggServer
from fedrl.secagg.shamir import combine


def setup(n: int = 5, k: int = 0, fraction: float = 0.6) -> tuple[Params, SecAggServer, dict[int, ClientSession]]:
    p = make_params(1, os.urandom(16), range(n), k, fraction, 8, 4, 0)
    return p, SecAggServer(p), {u: ClientSession.new(u, p) for u in p.nodes}


def to_mask(n: int = 5, k: int = 0, fraction: float = 0.6):  # type: ignore[no-untyped-def]
    p, server, clients = setup(n, k, fraction)
    keys = server.collect_keys({u: c.advertise() for u, c in clients.items()})
    routed = server.collect_shares({u: c.share(keys[u]) for u, c in clients.items()})
    return p, server, clients, keys, routed


X = np.array([1, 2, 3, 4], dtype=np.uint64)


def test_stages_in_order_and_once() -> None:
    p, server, clients = setup()
    c = clients[0]
    assert c.stage == "advertise"
    with pytest.raises(StageError):
        c.share({})
    with pytest.raises(StageError):
        c.mask(X, {})
    with pytest.raises(StageError):
        c.unmask(list(p.nodes), [])
    keys = server.collect_keys({u: s.advertise() for u, s in clients.items()})
    with pytest.raises(StageError):
        c.advertise()
    with pytest.raises(StageError):
        c.mask(X, {})
    routed = server.collect_shares({u: s.share(keys[u]) for u, s in clients.items()})
    with pytest.raises(StageError):
        c.share(keys[0])
    with pytest.raises(StageError):
        c.unmask(list(p.nodes), [])
    survivors, dropped = server.collect_masked({u: s.mask(X, routed[u]) for u, s in clients.items()})
    with pytest.raises(StageError):
        c.mask(X, routed[0])
    c.unmask(survivors, dropped)
    assert c.stage == "done"
    with pytest.raises(StageError):  # asked twice: could reveal both kinds of share for some node
        c.unmask(survivors[:-1], survivors[-1:])


def test_advertise_returns_public_keys_of_its_round() -> None:
    p, _, clients = setup()
    keys = clients[2].advertise()
    assert (keys.node, keys.round, keys.session) == (2, p.round, p.session)
    assert len(keys.c_pk) == 32 and len(keys.s_pk) == 32 and keys.c_pk != keys.s_pk


def test_share_refusals_leave_stage_unchanged() -> None:
    p, server, clients = setup(n=8, k=4, fraction=0.6)  # |H| = 5, t = 3
    keys = server.collect_keys({u: c.advertise() for u, c in clients.items()})
    u = 0
    mine = keys[u]
    outsider = next(v for v in p.nodes if v != u and v not in p.neighbours[u])
    bad_cases = [
        {**mine, outsider: keys[outsider][p.neighbours[outsider][0]]},  # non-neighbour
        dict(list(mine.items())[:1]),  # fewer than t - 1
        {**mine, p.neighbours[u][0]: mine[p.neighbours[u][1]]},  # duplicate keys
        {**mine, p.neighbours[u][0]: (bytes(31), bytes(32))},  # malformed
        {**mine, p.neighbours[u][0]: (bytes(32), KeyPair.generate().public)},  # low-order c key
        {**mine, p.neighbours[u][0]: (KeyPair.generate().public, bytes(32))},  # low-order s key
        {**mine, p.neighbours[u][0]: KeyPair.generate().public},  # not a pair
        {**mine, u: (KeyPair.generate().public, KeyPair.generate().public)},  # itself
    ]
    for case in bad_cases:
        with pytest.raises(ClientRefused):
            clients[u].share(case)
        assert clients[u].stage == "share"
    cts = clients[u].share(mine)
    assert set(cts) == set(p.neighbours[u]) and all(isinstance(c, bytes) for c in cts.values())


def test_mask_validates_input_and_senders() -> None:
    p, _, clients, _, routed = to_mask()
    c = clients[0]
    for x in (X[:3], X.astype(float), np.array([0, 0, 0, 256]), np.array([0, 0, 0, -1])):
        with pytest.raises(ValueError):
            c.mask(x, routed[0])
    with pytest.raises(ClientRefused):
        c.mask(X, {**routed[0], 0: b"from itself"})
    with pytest.raises(ClientRefused):  # fewer than t - 1 senders
        c.mask(X, dict(list(routed[0].items())[: p.threshold - 2]))
    assert c.stage == "mask"
    masked = c.mask(X, routed[0])
    assert masked.node == 0 and masked.rejected == () and masked.y.dtype == np.uint64 and masked.y.shape == (4,)
    assert int(masked.y.max()) < 256


def test_unmask_refusals() -> None:
    _, server, clients, _, routed = to_mask()
    masked = {u: c.mask(X, routed[u]) for u, c in clients.items()}
    c = clients[0]
    for survivors, dropped in [([0, 1, 2, 3], [3, 4]), ([0, 1], [2, 3, 4]), ([1, 2, 3, 4], [0]), ([0, 0, 1, 2], [])]:
        with pytest.raises(ClientRefused):
            c.unmask(survivors, dropped)
        assert c.stage == "unmask"
    survivors, dropped = server.collect_masked(masked)
    assert len(c.unmask(survivors, dropped)) == 5


def test_unmask_reveals_b_of_survivors_and_s_of_dropped() -> None:
    p, server, clients, _, routed = to_mask(n=6, k=0, fraction=0.5)  # t = 3
    states = {u: c.to_arrays() for u, c in clients.items()}
    masked = {u: clients[u].mask(X, routed[u]) for u in p.nodes if u != 5}
    survivors, dropped = server.collect_masked(masked)
    assert (survivors, dropped) == ([0, 1, 2, 3, 4], [5])
    responses = {u: clients[u].unmask(survivors, dropped) for u in survivors}
    for resp in responses.values():
        assert set(resp) == set(p.nodes)  # complete graph: every node's share, of one kind
    holders = list(p.nodes)
    for v in survivors:
        b = combine({u: responses[u][v] for u in survivors}, holders, p.threshold)
        assert b == states[v]["b_seed"].tobytes()
    s_sk = combine({u: responses[u][5] for u in survivors}, holders, p.threshold)
    assert s_sk == states[5]["s_sk"].tobytes()


def test_state_round_trips_through_arrays_at_every_stage() -> None:
    p, server, clients = setup()

    def reload(u: int) -> ClientSession:
        arrays = clients[u].to_arrays()
        assert all(a.dtype in (np.int64, np.uint8) for a in arrays.values())
        clients[u] = ClientSession.from_arrays(u, p, {k: a.copy() for k, a in arrays.items()})
        return clients[u]

    assert reload(0).stage == "advertise"
    keys = server.collect_keys({u: reload(u).advertise() for u in p.nodes})
    routed = server.collect_shares({u: reload(u).share(keys[u]) for u in p.nodes})
    masked = {u: reload(u).mask(X, routed[u]) for u in p.nodes}
    survivors, dropped = server.collect_masked(masked)
    total = server.unmask({u: reload(u).unmask(survivors, dropped) for u in survivors})
    assert total.tolist() == (5 * X % 256).tolist()
    done = reload(0)
    assert done.stage == "done"
    assert done.to_arrays()["c_sk"].size == 0 and done.to_arrays()["held_b"].size == 0  # secrets erased


def test_from_arrays_refuses_other_node_round_or_session() -> None:
    p, _, clients = setup()
    arrays = clients[0].to_arrays()
    other_round = make_params(2, p.session, p.nodes, 0, 0.6, 8, 4, 0)
    other_session = make_params(1, os.urandom(16), p.nodes, 0, 0.6, 8, 4, 0)
    for node, params in [(1, p), (0, other_round), (0, other_session)]:
        with pytest.raises(ValueError):
            ClientSession.from_arrays(node, params, arrays)
    with pytest.raises(ValueError, match="lack"):
        ClientSession.from_arrays(0, p, {k: a for k, a in arrays.items() if k != "held_s"})
    with pytest.raises(ValueError):
        ClientSession.new(99, p)
