"""A node's round through its pipeline alone (no Flower) is the ClientApp's round: the same reply
and state, and the state it started from is left as it was."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedrl.config import DEFAULTS, from_run_config
from fedrl.flower import codec
from fedrl.flower.client import handle_train
from fedrl.node import RoundStart, build_pipeline, node_setup
from fedrl.server.federation import Federation
from fedrl.wire import NodeState

RUN_CONFIG = {**DEFAULTS, "nodes.count": 2, "algo.local-steps": 128, "algo.num-envs": 2, "num-server-rounds": 2,
              "compression.up": "topk", "compression.fraction": 0.3}  # error feedback: a residual is node state


@pytest.fixture(autouse=True)
def _task(monkeypatch: pytest.MonkeyPatch) -> None:
    for attr, value in (("_run_id", 5), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


def test_the_pipeline_alone_gives_the_client_apps_reply_and_keeps_its_input() -> None:
    cfg = from_run_config(RUN_CONFIG)
    fed = Federation(cfg)
    pipeline = build_pipeline(node_setup(cfg), 0)
    memory = RecordDict()
    ctx = Context(run_id=5, node_id=9, node_config={}, state=memory, run_config=RUN_CONFIG)
    for rnd in (1, 2):
        fed.begin_round(rnd)
        plan, downlink = fed.plan(0, rnd)
        held = codec.load_node_state(memory, 0)
        before = {k: v.copy() for k, v in held.arrays.items()}
        alone = pipeline.run(RoundStart(plan, downlink, held))
        assert {k: v.tobytes() for k, v in held.arrays.items()} == {k: v.tobytes() for k, v in before.items()}
        msg = Message(codec.encode_plan(plan, downlink), dst_node_id=9, message_type=codec.TRAIN)
        reply = codec.decode_reply(handle_train(msg, ctx).content)
        assert alone.update is not None and reply.update is not None
        assert alone.update.arrays.keys() == reply.update.arrays.keys()
        for k, a in alone.update.arrays.items():
            np.testing.assert_array_equal(a, reply.update.arrays[k])
        assert (alone.env_steps, alone.ef_base) == (reply.env_steps, reply.ef_base)
        stored = codec.load_node_state(memory, 0).arrays
        assert list(stored) == list(alone.kept) and "ef.residual" in stored
        for k, a in alone.kept.items():
            np.testing.assert_array_equal(a, stored[k])
        fed.aggregate([reply], rnd)
        fed.note_delivery(rnd, [0], [])
        fed.round = rnd
    assert isinstance(held, NodeState) and held.arrays  # round 2 started from round 1's state
