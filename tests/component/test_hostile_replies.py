"""Every hostile reply kind (attack.name) against the server's real reply check, plain and top-k."""

from __future__ import annotations

import io

import numpy as np
import pytest
from flwr.app import Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedrl.compression.pipeline import compress, rng_for, uplink_scale
from fedrl.config import from_run_config
from fedrl.flower import codec
from fedrl.flower.hostile import hostile_content, npy_bomb, overflow_topk
from fedrl.flower.transport import Answer, check_reply
from fedrl.inject.attacks import RECORD_ATTACKS, REPLY_ATTACKS
from fedrl.model.layout import flatten
from fedrl.model.moments import Moments
from fedrl.server.federation import Federation
from fedrl.wire import Reply

SMALL = {"nodes.count": 4, "algo.local-steps": 256, "eval.episodes": 1, "algo.norm-obs": "on",
         "strategy.max-update-norm": 100.0}
# What the server says of each poisoned kind (fedrl.server.guards); malformed records die in the decoder.
POISONED = {
    "huge-weights": "exceeds strategy.max-update-norm = 100",
    "nan-weights": "non-finite",
    "lie-steps": "claims 25600 env steps, the plan asked for 256 (algo.local-steps)",
    "bad-moments": "observation count inf differs from the 256 env steps it trained",
    "wrong-node": "answered for node 1, asked for 0",
}


def _setup(up: str) -> tuple[Federation, Reply]:
    fed = Federation(from_run_config({**SMALL, "compression.up": up}))
    fed.begin_round(1)
    g = fed.models[0]
    trained = [w + np.float32(0.001) for w in g]
    moments = Moments.of(np.random.default_rng(0).normal(size=(256, 4)))
    if up == "none":
        return fed, Reply(0, trained, 256, moments, {})
    vec = (flatten(trained) - flatten(g)) / uplink_scale(fed.cfg, fed.up, 1)  # what a node sends (error feedback)
    update, _ = compress(vec, fed.up, rng_for(up, 0, 1, 0), None)
    return fed, Reply(0, [], 256, moments, {}, update)


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    # Flower stamps a reply Message with the run it belongs to; outside a run there is none.
    for attr, value in (("_run_id", 5), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


def _check(fed: Federation, content: RecordDict) -> Reply | str:
    """What the ServerApp makes of ``content`` as node 0's reply (``transport.check_reply``)."""
    request = Message(RecordDict(), dst_node_id=7, message_type=codec.TRAIN, group_id="1")
    return check_reply(fed, Answer.of(Message(content, reply_to=request)), 0)


@pytest.mark.parametrize("up", ["none", "topk"])
def test_every_hostile_kind_is_left_out_with_its_reason(up: str) -> None:
    fed, honest = _setup(up)
    cfg = fed.cfg
    assert isinstance(_check(fed, codec.encode_reply(honest)), Reply)
    for kind in REPLY_ATTACKS:
        why = _check(fed, hostile_content(kind, honest, cfg, 1, 4))
        assert isinstance(why, str) and POISONED[kind] in why, (kind, why)
    assert "observation second moments must be finite and >= 0" in str(
        _check(fed, hostile_content("bad-moments", honest, cfg, 2, 4)))  # even rounds: a negative M2
    for kind in RECORD_ATTACKS:
        if kind == "topk-overflow" and up != "topk":
            continue
        why = _check(fed, hostile_content(kind, honest, cfg, 1, 4))
        assert isinstance(why, str) and ("malformed reply" in why or "bad topk payload" in why), (kind, why)


def test_the_malformed_payloads_are_what_they_claim() -> None:
    header = io.BytesIO(npy_bomb())
    assert len(npy_bomb()) == 128
    assert np.lib.format.read_magic(header) == (1, 0)
    assert np.lib.format.read_array_header_1_0(header) == ((100_000, 100_000), False, np.dtype("<f4"))
    c = overflow_topk(10)
    assert c.n == 10 and c.arrays["values"].size == 20
    # width 1 bit, then 20 gaps of 0: index 0, twenty times
    np.testing.assert_array_equal(c.arrays["idx_delta"], [1, 0, 0, 0])
