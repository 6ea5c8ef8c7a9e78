"""The node pipeline's stages are chosen once from the config (fedrl.node.build_pipeline), and
the node package runs without Flower."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedrl.compression.downlink import Downlink
from fedrl.config import DEFAULTS, from_run_config
from fedrl.flower.replies import HostileReply, PlainReply, SecureReply, reply_for
from fedrl.node import RoundStart, build_pipeline, node_setup
from fedrl.node.stages import WrongPlan
from fedrl.topology.gossip import Mix
from fedrl.wire import LocalPlan, NodeState

SMALL = {**DEFAULTS, "nodes.count": 3}


def _shape(over: dict[str, Any], node: int = 0) -> dict[str, list[str]]:
    return build_pipeline(node_setup(from_run_config({**SMALL, **over})), node).describe()


def _phases(receive: list[str], attack: list[str] | None = None, privatize: list[str] | None = None,
            encode: list[str] | None = None) -> dict[str, list[str]]:
    return {"receive": receive, "train": ["train"], "attack": attack or [], "privatize": privatize or [],
            "encode": encode or []}


@pytest.mark.parametrize(("over", "node", "expected"), [
    ({}, 0, _phases(["broadcast"])),
    ({"compression.up": "topk"}, 0, _phases(["broadcast", "start-from-residual"],
                                            encode=["compress(topk, error feedback)"])),
    ({"compression.up": "topk", "compression.error-feedback": "ef21"}, 0,
     _phases(["broadcast"], encode=["compress(topk, ef21)"])),
    ({"compression.up": "quantize"}, 0, _phases(["broadcast"], encode=["compress(quantize)"])),
    ({"topology.name": "gossip"}, 0, _phases(["gossip-mix"], encode=["gossip-step"])),
    ({"attack.name": "sign-flip", "attack.nodes": "1", "nodes.speed": "1,3,1"}, 1,
     _phases(["broadcast"], attack=["slow-down", "byzantine-update"])),
    ({"attack.name": "sign-flip", "attack.nodes": "1", "nodes.speed": "1,3,1"}, 0, _phases(["broadcast"])),
    ({"attack.name": "random-action", "attack.nodes": "0"}, 0, _phases(["broadcast"])),  # a flag of training
    ({"privacy.mode": "central", "privacy.noise-multiplier": 0.5}, 0,
     _phases(["broadcast"], privatize=["drop-private-metrics", "clip"])),
    ({"privacy.mode": "local", "privacy.noise-multiplier": 0.5}, 0,
     _phases(["broadcast"], privatize=["drop-private-metrics", "clip+noise"])),
    ({"secagg.enabled": True, "compression.up": "quantize", "algo.norm-obs": "off"}, 0, _phases(["broadcast"])),
])
def test_the_stages_follow_the_config(over: dict[str, Any], node: int, expected: dict[str, list[str]]) -> None:
    assert _shape(over, node) == expected


def test_each_node_replies_as_the_config_says() -> None:
    setup = node_setup(from_run_config({**SMALL, "attack.name": "lie-steps", "attack.nodes": "2"}))
    assert [type(reply_for(setup, n)) for n in range(3)] == [PlainReply, PlainReply, HostileReply]
    secure = node_setup(from_run_config({**SMALL, "secagg.enabled": True, "compression.up": "quantize",
                                         "algo.norm-obs": "off"}))
    assert isinstance(reply_for(secure, 0), SecureReply)


def test_a_plan_of_the_other_kind_is_refused_before_training() -> None:
    plan = LocalPlan(node=0, round=1, total_rounds=3, seed=0)
    star = build_pipeline(node_setup(from_run_config(SMALL)), 0)
    with pytest.raises(WrongPlan, match="gossip"):
        star.receive(RoundStart(plan, Mix(1.0, 0, None, []), NodeState.empty()))
    mesh = build_pipeline(node_setup(from_run_config({**SMALL, "topology.name": "gossip"})), 0)
    with pytest.raises(WrongPlan, match="gossip"):
        mesh.receive(RoundStart(plan, Downlink([np.zeros(1, np.float32)]), NodeState.empty()))


def test_the_node_package_imports_no_flower() -> None:
    code = "import sys, fedrl.node; print(sorted(m for m in sys.modules if m.split('.')[0] == 'flwr'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.strip()
    assert out == "[]"
