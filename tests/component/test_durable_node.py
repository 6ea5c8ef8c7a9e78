"""A node's round through the real ClientApp handler with ``state-dir``: a SuperNode that
restarts (an empty ``context.state``) continues from its state file; a corrupted file is
reported and the node starts fresh."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedrl.config import DEFAULTS, from_run_config
from fedrl.flower import codec
from fedrl.flower.client import handle_train
from fedrl.server.federation import Federation


@pytest.fixture(autouse=True)
def _task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower stamps new messages with the running task's identity; here the test is the task."""
    for attr, value in (("_run_id", 5), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


RUN_CONFIG = {**DEFAULTS, "nodes.count": 2, "algo.local-steps": 256, "num-server-rounds": 3}


def _round(fed: Federation, rnd: int, state_dir: Path, state: RecordDict) -> float:
    """Node 0 trains round ``rnd`` on a SuperNode whose memory is ``state``; its Adam step count."""
    ctx = Context(run_id=5, node_id=9, node_config={"partition-id": 0, "num-partitions": 2,
                                                   "state-dir": str(state_dir)}, state=state, run_config=RUN_CONFIG)
    msg = Message(codec.encode_plan(*fed.plan(0, rnd)), dst_node_id=9, message_type=codec.TRAIN)
    return codec.decode_reply(handle_train(msg, ctx).content).metrics["optimizer_steps"]


def test_a_restarted_node_continues_and_a_corrupted_file_starts_fresh(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    fed = Federation(from_run_config(RUN_CONFIG))
    memory = RecordDict()
    per_round = _round(fed, 1, tmp_path, memory)
    assert per_round > 0 and (tmp_path / "fedrl-node0.npz").exists()
    assert _round(fed, 2, tmp_path, RecordDict()) == 2 * per_round  # restarted: its file carries the state
    (tmp_path / "fedrl-node0.npz").write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING, logger="fedrl"):
        assert _round(fed, 3, tmp_path, RecordDict()) == per_round  # restarted again, file corrupted: fresh
    assert any("unreadable" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    # Another run (a different uid) never takes this state: fresh again, with a reason.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedrl"):
        assert _round(Federation(from_run_config(RUN_CONFIG)), 4, tmp_path, RecordDict()) == per_round
    assert any("another run or config" in r.getMessage() for r in caplog.records)
