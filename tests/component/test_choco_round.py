"""Compressed gossip (CHOCO, ``fedrl.topology.choco``) through the real node pipeline and wire codec:
node and server hold the same public copies bit for bit, a lost reply is recovered from the
server's copy, and the settings that cannot combine are refused."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.compression.pipeline import flatten
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.federation import Federation
from fedrl.flower import codec
from fedrl.node import RoundStart, build_pipeline, node_setup
from fedrl.topology.choco import PUBLIC_KEY
from fedrl.topology.gossip import MODEL_KEY
from fedrl.validate import check
from fedrl.wire import NodeState

SMALL = {"nodes.count": 4, "algo.local-steps": 128, "algo.num-envs": 2, "eval.episodes": 1, "algo.norm-obs": "off",
         "topology.name": "gossip", "topology.graph": "ring"}


def _rounds(fed: Federation, states: list[NodeState], rounds: int, lost: tuple[int, int] | None = None) -> list[int]:
    """Rounds as the ClientApp runs them; ``lost = (round, node)``: that reply never arrives.
    Returns the uplink payload sizes (bytes) of the last round."""
    setup = node_setup(fed.cfg)
    sizes = []
    for rnd in range(fed.round + 1, fed.round + rounds + 1):
        fed.begin_round(rnd)
        replies = []
        sizes = []
        for n in fed.select(rnd):
            plan, dl = codec.decode_plan(codec.encode_plan(*fed.plan(n, rnd)))
            out = build_pipeline(setup, n).run(RoundStart(plan, dl, states[n]))
            states[n] = out.state()
            if lost != (rnd, n):
                enc = codec.encode_reply(out.reply())
                sizes.append(codec.content_bytes(enc))
                replies.append(codec.decode_reply(enc))
        assert all(fed.validate(r, r.node) is None for r in replies)
        fed.aggregate(replies, rnd)
        fed.note_delivery(rnd, [r.node for r in replies], [n for n in fed.select(rnd) if lost == (rnd, n)])
        fed.round = rnd
    return sizes


@pytest.mark.parametrize(("up", "over"), [("quantize", {}), ("topk", {"compression.fraction": 0.3,
                                                                      "topology.consensus-step": 0.5})])
def test_node_and_server_hold_the_same_public_copies(up: str, over: dict) -> None:
    fed = Federation(from_run_config({**SMALL, "compression.up": up, **over}))
    assert not fed.up.error_feedback  # the public copies are the error feedback
    states = [NodeState({}) for _ in range(4)]
    compressed = _rounds(fed, states, 2)
    for n in range(4):
        assert fed.rule.models[n] is not None
        np.testing.assert_array_equal(flatten(fed.rule.models[n]), states[n].arrays[PUBLIC_KEY])
        # the node's own model is not its public copy: compression dropped something
        assert not np.array_equal(states[n].arrays[MODEL_KEY], states[n].arrays[PUBLIC_KEY])
    plain = Federation(from_run_config(SMALL))
    full = _rounds(plain, [NodeState({}) for _ in range(4)], 1)
    assert max(compressed) < min(full) / 2.5, (compressed, full)


def test_a_lost_reply_is_recovered_from_the_servers_copy() -> None:
    fed = Federation(from_run_config({**SMALL, "compression.up": "quantize"}))
    states = [NodeState({}) for _ in range(4)]
    _rounds(fed, states, 1)
    _rounds(fed, states, 1, lost=(2, 1))  # node 1 advanced its public copy; the server did not
    assert not np.array_equal(flatten(fed.rule.models[1]), states[1].arrays[PUBLIC_KEY])
    _rounds(fed, states, 1)  # the plan sends node 1 the server's copy; both agree again
    for n in range(4):
        np.testing.assert_array_equal(flatten(fed.rule.models[n]), states[n].arrays[PUBLIC_KEY])
    assert all(np.all(np.isfinite(flatten(m))) for m in fed.node_models())


def test_uncompressed_gossip_keeps_no_public_copy() -> None:
    fed = Federation(from_run_config(SMALL))
    states = [NodeState({}) for _ in range(4)]
    _rounds(fed, states, 1)
    assert all(PUBLIC_KEY not in s.arrays for s in states)


@pytest.mark.parametrize(("over", "key"), [
    ({"compression.up": "topk", "compression.error-feedback": "on"}, "compression.error-feedback"),
    ({"compression.down": "quantize"}, "compression.down"),
    ({"topology.consensus-step": 0.0}, "topology.consensus-step"),
])
def test_what_compressed_gossip_refuses(over: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**SMALL, **over})
    assert err.value.key == key, str(err.value)
