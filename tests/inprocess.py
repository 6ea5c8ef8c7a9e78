"""Rounds of a federation through the real ClientApp handler and the real wire codec, in this process.

What Flower's engines add on top (SuperNodes in other processes, the SuperLink's transport) would
lose an algorithm or a rule that a test registers in its own module: the ClientApp and ServerApp
processes never import a test file. So tests of the extension points drive the same pieces here:
``Federation`` plans, the plan is encoded into a Flower ``Message``, ``fedrl.flower.client.
handle_train`` trains the logical node in a Flower ``Context`` of its own (one per node, as a
SuperNode keeps one ``context.state`` record per logical node), and the reply goes through
``transport.check_reply`` (the decoder and every server-side check) before ``Federation.aggregate``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedrl.config import DEFAULTS
from fedrl.flower import codec
from fedrl.flower.client import handle_train
from fedrl.flower.transport import Answer, check_reply
from fedrl.server.federation import Federation


@pytest.fixture
def task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower stamps new messages with the running task's identity; here the test is the task."""
    for attr, value in (("_run_id", 5), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


def run_rounds(fed: Federation, run_config: dict[str, Any], rounds: int) -> list[dict[int, str]]:
    """Run ``rounds`` plain rounds; return, per round, the nodes left out and why."""
    full = {**DEFAULTS, **run_config}
    states = {n: RecordDict() for n in range(fed.cfg.nodes.count)}
    failures = []
    for rnd in range(fed.round + 1, fed.round + rounds + 1):
        fed.begin_round(rnd)
        good, bad = [], {}
        for node in fed.select(rnd):
            ctx = Context(run_id=5, node_id=9 + node, node_config={"partition-id": node, "num-partitions":
                          fed.cfg.nodes.count}, state=states[node], run_config=full)
            plan = Message(codec.encode_plan(*fed.plan(node, rnd)), dst_node_id=9 + node, message_type=codec.TRAIN)
            threads = torch.get_num_threads()
            reply = handle_train(plan, ctx)  # sets the node's torch threads (1), as a SuperNode would
            torch.set_num_threads(threads)  # ... but this process is also the server
            checked = check_reply(fed, Answer.of(reply), node)
            if isinstance(checked, str):
                bad[node] = checked
            else:
                good.append(checked)
        fed.note_delivery(rnd, [r.node for r in good], list(bad))
        fed.aggregate(good, rnd)
        fed.completed(rnd)
        failures.append(bad)
    return failures
