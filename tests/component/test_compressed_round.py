"""One aggregation with compressed uplink and downlink, through the real wire codec."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.checks.validate import check
from fedrl.compression.downlink import receive
from fedrl.compression.pipeline import compress, rng_for, uplink_scale
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.flower import codec
from fedrl.model.layout import flatten
from fedrl.server.federation import Federation
from fedrl.wire import Reply

# Pinned: these tests check exact aggregation formulas on replies without observation statistics
# (the defaults turn normalization on and anneal the server step, issue 13).
SMALL = {"nodes.count": 3, "algo.local-steps": 256, "eval.episodes": 1, "algo.norm-obs": "off", "strategy.server-lr-end": -1}


def _fed(**over: object) -> Federation:
    return Federation(from_run_config({**SMALL, **over}))


def _reply(fed: Federation, node: int, shift: float, rnd: int) -> Reply:
    """What a node sends: its (shifted) weights compressed as fed.up does, through the codec."""
    base = fed.sent(node)
    vec = flatten([w + np.float32(shift) for w in base]) - flatten(base)
    if fed.up.active:
        c, _ = compress(vec / uplink_scale(fed.cfg, fed.up, rnd), fed.up, rng_for(fed.up.name, 0, rnd, node), None)
        r = Reply(node, [], 256, None, {"train_return": 1.0}, c)
    else:
        r = Reply(node, [w + np.float32(shift) for w in base], 256, None, {"train_return": 1.0})
    return codec.decode_reply(codec.encode_reply(r))


@pytest.mark.parametrize("up", ["fp16", "bf16", "quantize", "qsgd", "randk", "topk", "sign", "powersgd"])
def test_compressed_updates_aggregate_through_the_codec(up: str) -> None:
    fed = _fed(**{"compression.up": up, "compression.fraction": 1.0, "strategy.server-lr": 1.0})
    fed.begin_round(1)
    g = [w.copy() for w in fed.models[0]]
    replies = [_reply(fed, 0, 0.01, 1), _reply(fed, 1, 0.03, 1)]
    assert all(fed.validate(r, r.node) is None for r in replies)
    fed.aggregate(replies)
    moved = flatten(fed.models[0]) - flatten(g)
    tol = {"sign": 1e-6, "qsgd": 0.02}.get(up, 2e-3)
    assert abs(float(moved.mean()) - 0.02) < tol


def test_a_reply_that_does_not_match_compression_up_is_left_out() -> None:
    fed = _fed(**{"compression.up": "quantize"})
    fed.begin_round(1)
    plain = Reply(0, fed.sent(0), 256, None, {})
    assert "expected a quantize update" in str(fed.validate(plain, 0))
    bad = _reply(fed, 0, 0.01, 1)
    bad = Reply(0, [], 256, None, {}, type(bad.update)("quantize", bad.update.arrays, 12))  # type: ignore[union-attr]
    assert "bad quantize payload" in str(fed.validate(bad, 0))


def test_eight_bit_uplink_is_at_least_3_9x_smaller_on_the_wire() -> None:
    sizes = {}
    for up in ("none", "quantize"):
        fed = _fed(**{"compression.up": up})
        fed.begin_round(1)
        sizes[up] = codec.content_bytes(codec.encode_reply(_reply(fed, 0, 0.01, 1)))
    assert sizes["none"] / sizes["quantize"] >= 3.9, sizes


def test_downlink_delta_plan_round_trips_and_is_applied_by_the_node() -> None:
    fed = _fed(**{"compression.down": "quantize"})
    fed.begin_round(1)
    plan, dl = fed.plan(0, 1)
    assert dl.weights is not None  # first contact: full weights
    _, dl = codec.decode_plan(codec.encode_plan(plan, dl))
    w, state = receive(dl, fed.down, {}, 1, fed.models[0])
    fed.note_delivery(1, [0], [1])
    fed.models[0] = [m + np.float32(0.01) for m in fed.models[0]]
    fed.begin_round(2)
    plan, dl = fed.plan(0, 2)
    assert dl.delta is not None and dl.base_round == 1
    wire = codec.encode_plan(plan, dl)
    full = codec.encode_plan(plan, fed.plan(1, 2)[1])  # node 1 failed: it gets full weights
    assert codec.content_bytes(full) > 3.5 * codec.content_bytes(wire)
    _, dl = codec.decode_plan(wire)
    w, _ = receive(dl, fed.down, state, 2, fed.models[0])
    np.testing.assert_array_equal(flatten(w), flatten(fed.sent(0)))


@pytest.mark.parametrize(("over", "key", "words"), [
    ({"secagg.enabled": True}, "compression.up", "compression.up = none"),
    ({"secagg.enabled": True, "compression.up": "topk"}, "compression.up", "not summable"),
    ({"secagg.enabled": True, "compression.up": "sign"}, "compression.up", "not summable"),
    ({"secagg.enabled": True, "compression.up": "quantize", "strategy.name": "local"}, "strategy.name", "sum"),
    ({"secagg.enabled": True, "compression.up": "quantize", "secagg.bits": 9}, "secagg.bits", "wrap"),
    ({"secagg.enabled": True, "compression.up": "quantize", "compression.bits": 16, "nodes.count": 100000},
     "nodes.count", "10000"),  # refused first by the population cap; 16-bit codes of 10,000 nodes fit 32 bits
    ({"secagg.enabled": True, "compression.up": "quantize", "secagg.neighbors": 3}, "secagg.neighbors", "even"),
    ({"secagg.enabled": True, "compression.up": "quantize", "env.id": "Pendulum-v1", "env.vary": "m=1.0",
      "algo.norm-obs": "on"},  # node statistics (auto would take the server's, which no node sends)
     "algo.norm-obs", "in the clear"),
    ({"nodes.dropout-stage": "share"}, "nodes.dropout-stage", "secagg.enabled = false"),
    ({"secagg.enabled": True, "compression.up": "topk", "privacy.mode": "distributed",
      "privacy.noise-multiplier": 1.0}, "compression.up", "replaces the compressor"),
    ({"secagg.enabled": True, "compression.up": "quantize", "privacy.mode": "local",
      "privacy.noise-multiplier": 1.0}, "privacy.mode", "use privacy.mode = central (nodes clip"),
])
def test_impossible_combinations_fail_before_round_one(over: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        check({**SMALL, **over})
    assert err.value.key == key and words in str(err.value)


def test_a_possible_secure_combination_passes() -> None:
    cfg = check({**SMALL, "secagg.enabled": True, "compression.up": "quantize", "secagg.bits": 10})
    assert cfg.secagg.bits == 10
    # distributed DP codes the update itself, so float weights (none) are fine and compression.bits is not used
    cfg = check({**SMALL, "secagg.enabled": True, "compression.up": "none", "privacy.mode": "distributed",
                 "privacy.noise-multiplier": 1.0})
    assert cfg.privacy.mode == "distributed"


def test_observation_moments_travel_in_the_config_record_and_are_checked() -> None:
    from fedrl.model.moments import Moments

    fed = _fed(**{"compression.up": "topk"})
    fed.begin_round(1)
    r = _reply(fed, 0, 0.01, 1)
    m = Moments.of(np.arange(12, dtype=np.float64).reshape(4, 3))
    with_m = Reply(r.node, [], r.env_steps, m, r.metrics, r.update)
    rec = codec.encode_reply(with_m)
    back = codec.decode_reply(rec).obs_moments
    assert back is not None and back.count == 4
    np.testing.assert_array_equal(back.to_array(), m.to_array())
    # Three statistics cost their doubles plus a field name, not a record of their own.
    assert codec.content_bytes(rec) - codec.content_bytes(codec.encode_reply(r)) < 100
    rec.config_records["reply"]["mom"] = [1.0, 2.0]
    with pytest.raises(codec.WireError, match="mom"):
        codec.decode_reply(rec)


@pytest.mark.parametrize("up", ["quantize", "powersgd"])
def test_hierarchical_edges_step_by_their_own_nodes_compressed_updates(up: str) -> None:
    """Node -> edge uplinks compressed: each edge moves by the mean of its own nodes' decoded updates."""
    fed = _fed(**{"compression.up": up, "strategy.server-lr": 1.0, "topology.name": "hierarchical",
                  "topology.edges": 2, "topology.cloud-every": 5})
    fed.begin_round(1)
    before = [flatten(m) for m in fed.models]
    shifts = {0: 0.01, 1: 0.03, 2: 0.05}
    replies = [_reply(fed, n, shifts[n], 1) for n in range(3)]
    assert all(fed.validate(r, r.node) is None for r in replies)
    fed.aggregate(replies, 1)
    for e in range(2):
        mine = [shifts[n] for n in range(3) if fed.rule.edge_of[n] == e]  # type: ignore[attr-defined]
        moved = flatten(fed.models[e]) - before[e]
        assert abs(float(moved.mean()) - float(np.mean(mine))) < 2e-3, (e, mine)
