"""Server state machine: exclusions, replays, tampering and aborts."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import numpy as np
import pytest
from tooling.secagg_round import simulate_round

from fedrl.secagg import (
    ClientSession,
    Keys,
    Masked,
    Params,
    SecAggAbort,
    StageError,
    make_params,
)
from fedrl.secagg.server import SecAggServer

BITS, LENGTH = 16, 32


def params(round_: int = 1, n: int = 8, k: int = 0, fraction: float = 0.5, session: bytes | None = None) -> Params:
    return make_params(round_, session or os.urandom(16), range(n), k, fraction, BITS, LENGTH, 0)


def inputs(p: Params, seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {u: rng.integers(0, 1 << BITS, LENGTH).astype(np.uint64) for u in p.nodes}


def plain_sum(xs: dict[int, np.ndarray], nodes: tuple[int, ...]) -> list[int]:
    return [sum(int(xs[u][i]) for u in nodes) % (1 << BITS) for i in range(LENGTH)]


class Recorder:
    """Tamper hook that records every stage's messages and optionally edits one stage."""

    def __init__(self, stage: str = "", edit: Any = None) -> None:
        self.seen: dict[str, dict[int, Any]] = {}
        self.stage, self.edit = stage, edit

    def __call__(self, stage: str, msgs: dict[int, Any]) -> dict[int, Any]:
        self.seen[stage] = dict(msgs)
        return self.edit(msgs) if stage == self.stage else msgs


def test_collect_keys_excludes_bad_messages(caplog: pytest.LogCaptureFixture) -> None:
    p = params(n=10, fraction=0.3)  # t = 3
    server = SecAggServer(p)
    msgs: dict[int, Any] = {u: ClientSession.new(u, p).advertise() for u in p.nodes}
    msgs[1] = dataclasses.replace(msgs[1], node=2)  # names another node
    msgs[2] = dataclasses.replace(msgs[2], round=0)  # earlier round
    msgs[3] = dataclasses.replace(msgs[3], session=os.urandom(16))  # other session
    msgs[4] = dataclasses.replace(msgs[4], c_pk=msgs[4].c_pk[:31])  # short key
    msgs[5] = dataclasses.replace(msgs[5], s_pk=msgs[6].s_pk)  # duplicate: 5 and 6 both out
    msgs[7] = dataclasses.replace(msgs[7], c_pk=bytes(32))  # low-order point
    msgs[99] = msgs[0]  # unknown node
    with caplog.at_level(logging.WARNING, logger="fedrl"):
        routed = server.collect_keys(msgs)
    assert sorted(routed) == [0, 8, 9]
    assert routed[0] == {v: (msgs[v].c_pk, msgs[v].s_pk) for v in (8, 9)}
    for u in (1, 2, 3, 4, 5, 6, 7, 99):
        assert f"excluding node {u}:" in caplog.text


def test_collect_keys_aborts_below_threshold() -> None:
    p = params(n=6, fraction=0.5)  # t = 3
    server = SecAggServer(p)
    with pytest.raises(SecAggAbort, match="threshold"):
        server.collect_keys({u: ClientSession.new(u, p).advertise() for u in (0, 1)})
    assert server.stage == "aborted"
    with pytest.raises(StageError):
        server.collect_shares({})


def test_collect_keys_aborts_when_a_responder_lacks_holders() -> None:
    p = params(n=10, k=4, fraction=1.0)  # |H| = 5 = t: any missing neighbour starves someone
    server = SecAggServer(p)
    with pytest.raises(SecAggAbort, match="responding holders"):
        server.collect_keys({u: ClientSession.new(u, p).advertise() for u in p.nodes if u != 0})


def test_server_stage_order() -> None:
    server = SecAggServer(params())
    assert server.stage == "keys"
    for call, arg in [(server.collect_shares, {}), (server.collect_masked, {}), (server.unmask, {})]:
        with pytest.raises(StageError):
            call(arg)  # type: ignore[operator]


def test_sender_with_missing_ciphertext_is_excluded() -> None:
    p = params(n=6)
    xs = inputs(p)
    rec = Recorder("share", lambda m: {**m, 2: {v: c for v, c in m[2].items() if v != 3}})
    out = simulate_round(xs, p, tamper=rec)
    assert 2 not in out.survivors and 2 not in out.dropped  # never in U2
    assert out.total.tolist() == plain_sum(xs, (0, 1, 3, 4, 5))


def test_tampered_share_excludes_its_sender_and_sum_stays_exact(caplog: pytest.LogCaptureFixture) -> None:
    p = params(n=8, k=4, fraction=0.6)
    xs = inputs(p, 1)
    victim = p.neighbours[3][0]

    def flip(msgs: dict[int, dict[int, bytes]]) -> dict[int, dict[int, bytes]]:
        blob = bytearray(msgs[3][victim])
        blob[20] ^= 0x80
        return {**msgs, 3: {**msgs[3], victim: bytes(blob)}}

    rec = Recorder("share", flip)
    with caplog.at_level(logging.WARNING, logger="fedrl"):
        out = simulate_round(xs, p, tamper=rec)
    assert rec.seen["mask"][victim].rejected == (3,)
    assert out.dropped == (3,) and 3 not in out.survivors
    assert out.total.tolist() == plain_sum(xs, out.survivors)
    assert "excluding node 3: its encrypted share was rejected" in caplog.text


def test_replayed_keys_message_is_rejected() -> None:
    session = os.urandom(16)
    old, new = params(1, session=session), params(2, session=session)
    rec = Recorder()
    simulate_round(inputs(old), old, tamper=rec)
    xs = inputs(new, 2)
    out = simulate_round(xs, new, tamper=Recorder("advertise", lambda m: {**m, 4: rec.seen["advertise"][4]}))
    assert 4 not in out.survivors and 4 not in out.dropped
    assert out.total.tolist() == plain_sum(xs, out.survivors)


def test_replayed_masked_input_is_rejected() -> None:
    old, new = params(1), params(2)
    rec = Recorder()
    simulate_round(inputs(old), old, tamper=rec)
    xs = inputs(new, 3)
    out = simulate_round(xs, new, tamper=Recorder("mask", lambda m: {**m, 4: rec.seen["mask"][4]}))
    assert out.dropped == (4,)
    assert out.total.tolist() == plain_sum(xs, out.survivors)


def test_replayed_ciphertext_from_earlier_round_is_rejected() -> None:
    session = os.urandom(16)
    old, new = params(1, session=session), params(2, session=session)
    rec = Recorder()
    simulate_round(inputs(old), old, tamper=rec)
    stale = rec.seen["share"][4][5]
    xs = inputs(new, 4)
    rec2 = Recorder("share", lambda m: {**m, 4: {**m[4], 5: stale}})
    out = simulate_round(xs, new, tamper=rec2)
    assert rec2.seen["mask"][5].rejected == (4,)
    assert out.dropped == (4,)
    assert out.total.tolist() == plain_sum(xs, out.survivors)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: dataclasses.replace(m, y=m.y[:-1]),
        lambda m: dataclasses.replace(m, y=m.y.astype(float)),
        lambda m: dataclasses.replace(m, y=m.y + np.uint64(1 << BITS)),
        lambda m: dataclasses.replace(m, node=0),
        lambda m: dataclasses.replace(m, rejected=(99,)),
        lambda m: dataclasses.replace(m, rejected=(2, 2)),
        lambda m: ("not", "masked"),
    ],
)
def test_malformed_masked_input_counts_as_dropout(edit: Any) -> None:
    p = params()
    xs = inputs(p, 5)
    out = simulate_round(xs, p, tamper=Recorder("mask", lambda m: {**m, 1: edit(m[1])}))
    assert out.dropped == (1,)
    assert out.total.tolist() == plain_sum(xs, out.survivors)


def test_too_few_survivors_aborts_and_returns_nothing() -> None:
    p = params(n=6, fraction=0.5)  # t = 3
    server = SecAggServer(p)
    clients = {u: ClientSession.new(u, p) for u in p.nodes}
    keys = server.collect_keys({u: c.advertise() for u, c in clients.items()})
    routed = server.collect_shares({u: c.share(keys[u]) for u, c in clients.items()})
    x = np.zeros(LENGTH, dtype=np.uint64)
    with pytest.raises(SecAggAbort, match="survive"):
        server.collect_masked({u: clients[u].mask(x, routed[u]) for u in (0, 1)})
    assert server.stage == "aborted" and server.survivors == ()
    with pytest.raises(StageError):
        server.unmask({})


def test_too_few_unmask_responses_abort() -> None:
    p = params(n=6, fraction=0.5)  # t = 3
    with pytest.raises(SecAggAbort, match="shares of node"):
        simulate_round(inputs(p), p, drop={"unmask": {0, 1, 2, 3}})


def test_bad_s_key_shares_abort() -> None:
    p = params(n=6, fraction=0.5)

    def corrupt(msgs: dict[int, dict[int, bytes]]) -> dict[int, dict[int, bytes]]:
        return {u: {**r, 5: os.urandom(32)} if 5 in r else r for u, r in msgs.items()}

    with pytest.raises(SecAggAbort, match="does not match"):
        simulate_round(inputs(p), p, drop={"mask": {5}}, tamper=Recorder("unmask", corrupt))


def test_unmask_ignores_shares_from_non_holders_and_junk() -> None:
    p = params(n=8, k=4, fraction=0.6)
    xs = inputs(p, 6)
    outsider = next(v for v in p.nodes if v != 0 and v not in p.neighbours[0])

    def junk(msgs: dict[int, dict[int, bytes]]) -> dict[int, dict[int, bytes]]:
        msgs = {u: dict(r) for u, r in msgs.items()}
        msgs[outsider][0] = os.urandom(32)  # not a holder of node 0: must be ignored
        msgs[1] = {v: s[:31] if v == 1 else s for v, s in msgs[1].items()}  # short share dropped
        msgs[99] = {0: os.urandom(32)}  # not a survivor
        return msgs

    out = simulate_round(xs, p, tamper=Recorder("unmask", junk))
    assert out.total.tolist() == plain_sum(xs, out.survivors)


def test_survivors_exposed_after_success() -> None:
    p = params(n=6)
    out = simulate_round(inputs(p), p, drop={"mask": {2}, "unmask": {3}})
    assert out.survivors == (0, 1, 3, 4, 5) and out.dropped == (2,)


def test_message_types_hold_plain_values() -> None:
    p = params(n=4)
    rec = Recorder()
    simulate_round(inputs(p), p, tamper=rec)
    keys: Keys = rec.seen["advertise"][0]
    masked: Masked = rec.seen["mask"][0]
    for msg in (keys, masked):
        for f in dataclasses.fields(msg):
            value = getattr(msg, f.name)
            assert isinstance(value, (int, bytes, np.ndarray, tuple)), f.name
    assert all(isinstance(c, bytes) for c in rec.seen["share"][0].values())
    assert all(isinstance(s, bytes) and len(s) in (16, 32) for s in rec.seen["unmask"][0].values())
