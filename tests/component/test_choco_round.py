"""Gossip through the real node pipeline and wire codec, compressed (CHOCO, ``fedrl.topology.choco``)
and locally private: node and server hold the same public copies bit for bit, a lost reply is
recovered from the server's copy, local DP noises every node's model and accounts every round,
and the settings that cannot combine are refused."""

from __future__ import annotations

import numpy as np
import pytest
from opacus.accountants import RDPAccountant

from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.flower import codec
from fedrl.model.layout import flatten
from fedrl.node import RoundStart, build_pipeline, node_setup
from fedrl.server.federation import Federation
from fedrl.topology.choco import PUBLIC_KEY
from fedrl.topology.gossip import MODEL_KEY
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


def test_local_dp_gossip_noises_every_node_and_accounts_every_round() -> None:
    """privacy.mode = local: each node's update is clipped to C and noised with std z C before it
    leaves (so its model moves by about that noise), and the run's epsilon is one accountant step
    (z, q = 1) per round: the epsilon of a node in every round, the worst node's."""
    dp = {"privacy.mode": "local", "privacy.noise-multiplier": 0.8, "privacy.clip-norm": 0.5}
    fed = Federation(from_run_config({**SMALL, **dp, "compression.up": "quantize"}))
    assert fed.cfg.strategy.server_lr == 2.0
    states = [NodeState({}) for _ in range(4)]
    start = flatten(fed.rule.models[0])
    _rounds(fed, states, 2)
    acc = RDPAccountant()
    acc.history = [(0.8, 1.0, 2)]
    assert fed.epsilon() == pytest.approx(acc.get_epsilon(delta=1e-5), rel=1e-9)
    # the noise dominates what training moves (std 0.05 without DP): round 1 adds N(0, 0.4^2) per
    # coordinate, stepped by server-lr 2; the ring mix averages 3 nodes' (std 0.8 / sqrt(3)); round 2
    # adds 0.8 again: sqrt(0.8^2 / 3 + 0.8^2) = 0.924
    moved = [float(np.std(states[n].arrays[MODEL_KEY] - start)) for n in range(4)]
    assert all(m == pytest.approx(0.924, rel=0.1) for m in moved), moved
    for n in range(4):  # the public copies still agree
        np.testing.assert_array_equal(flatten(fed.rule.models[n]), states[n].arrays[PUBLIC_KEY])


@pytest.mark.parametrize(("over", "key"), [
    ({"privacy.mode": "central", "privacy.noise-multiplier": 1.0}, "privacy.mode"),
    ({"compression.up": "topk", "compression.error-feedback": "on"}, "compression.error-feedback"),
    ({"compression.down": "quantize"}, "compression.down"),
    ({"topology.consensus-step": 0.0}, "topology.consensus-step"),
])
def test_what_compressed_gossip_refuses(over: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**SMALL, **over})
    assert err.value.key == key, str(err.value)
