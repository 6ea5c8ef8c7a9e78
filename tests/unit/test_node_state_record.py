"""A logical node's state in ``context.state``: one array per node, every array back as it was."""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from fedrl.flower import codec
from fedrl.wire import NodeState


def test_a_node_state_round_trips_exactly_as_one_array_per_node() -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "adam.0.m": rng.standard_normal((64, 4)).astype(np.float32),
        "adam.0.step": np.asarray([3.0]),
        "env.states": rng.standard_normal((4, 2)).T,  # not C-contiguous
        "ep.length": np.asarray([7, 0], np.int64),
        "mask": np.asarray([True, False]),
        "scalar": np.asarray(2.5),
        "none yet": np.zeros((0, 3), np.float32),
        "codes": np.arange(5, dtype=np.uint8),
    }
    memory = RecordDict()
    codec.store_node_state(memory, 3, NodeState(arrays))
    codec.store_node_state(memory, 4, NodeState({"x": np.ones(2)}))
    assert sorted(memory) == ["fedrl.node3", "fedrl.node4"]
    assert len(memory["fedrl.node3"]) == 1  # one object for the engine to move, however many arrays
    back = codec.load_node_state(memory, 3).arrays
    assert list(back) == list(arrays)  # in the order they were stored
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
        np.testing.assert_array_equal(back[k], v)
    back["adam.0.m"][0, 0] = 1.0  # the node may update its arrays in place
    assert codec.load_node_state(memory, 5).arrays == {}
