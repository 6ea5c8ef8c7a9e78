"""The server's checks on replies (fedrl.server.guards) and the non-finite guard on every aggregation path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.inject.attacks import attack_plan
from fedrl.model.layout import flatten, unflatten
from fedrl.model.moments import Moments
from fedrl.server.federation import Federation
from fedrl.server.guards import moments_problem, steps_problem, update_norm
from fedrl.topology.gossip import Mix
from fedrl.wire import Reply

# norm-obs off: these replies carry weights only (the statistics' own checks are further down)
SMALL = {"nodes.count": 3, "algo.local-steps": 256, "eval.episodes": 1, "algo.norm-obs": "off"}
KEPT = "gave a non-finite {} (or observation statistics); kept the previous one"


def _fed(**over: object) -> Federation:
    return Federation(from_run_config({**SMALL, **over}))


def _shifted(weights: list[np.ndarray], c: float) -> list[np.ndarray]:
    return [w + np.float32(c) for w in weights]


def _nan(weights: list[np.ndarray]) -> list[np.ndarray]:
    return [np.full_like(w, np.nan) for w in weights]


def _copy(models: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    return [[w.copy() for w in m] for m in models]


def _same(a: list[list[np.ndarray]], b: list[list[np.ndarray]]) -> bool:
    return all(np.array_equal(x, y) for ma, mb in zip(a, b, strict=True) for x, y in zip(ma, mb, strict=True))


# --- weights are what the server planned -------------------------------------------------------
def test_a_report_above_the_plan_is_refused_and_fewer_steps_weigh_what_they_report() -> None:
    fed = _fed(**{"strategy.server-lr": 0.5})
    g = _copy(fed.models)[0]
    assert fed.validate(Reply(0, list(g), 257, None, {}), 0) == \
        "claims 257 env steps, the plan asked for 256 (algo.local-steps)"
    assert fed.validate(Reply(0, list(g), 25600, None, {}), 0) == \
        "claims 25600 env steps, the plan asked for 256 (algo.local-steps)"
    assert fed.validate(Reply(0, list(g), 256, None, {}), 0) is None
    assert fed.validate(Reply(0, list(g), 64, None, {}), 0) is None
    assert steps_problem(0, 256) == "env_steps 0 must be positive"
    assert steps_problem(True, 256) == "env_steps must be an int, got bool"
    # deltas +1 (64 steps) and +5 (192 steps): mean 4.0, times server lr 0.5
    fed.aggregate([Reply(0, _shifted(g, 1.0), 64, None, {}), Reply(1, _shifted(g, 5.0), 192, None, {})])
    for new, old in zip(fed.models[0], g, strict=True):
        np.testing.assert_allclose(new - old, 2.0, rtol=0, atol=1e-6)
    assert fed.counters.env_steps == 256 and fed.take_failure() is None


# --- observation statistics --------------------------------------------------------------------
def test_observation_statistics_must_describe_the_steps_trained() -> None:
    ok = Moments(256.0, np.zeros(4), np.ones(4))
    assert moments_problem(ok, True, 4, 256) is None
    assert moments_problem(None, False, 4, 256) is None
    assert moments_problem(None, True, 4, 256) == "missing or malformed observation statistics"
    assert moments_problem(ok, False, 4, 256) == "sent observation statistics, but nodes send none (algo.norm-obs is off or server)"
    for count in (math.inf, 1e300, 255.0, math.nan, -256.0):
        why = moments_problem(Moments(count, np.zeros(4), np.ones(4)), True, 4, 256)
        assert why == f"observation count {count!r} differs from the 256 env steps it trained"
    assert moments_problem(Moments(256.0, np.zeros(4), -np.ones(4)), True, 4, 256) == \
        "observation second moments must be finite and >= 0"
    assert moments_problem(Moments(256.0, np.zeros(4), np.full(4, np.inf)), True, 4, 256) == \
        "observation second moments must be finite and >= 0"
    assert moments_problem(Moments(256.0, np.full(4, np.nan), np.ones(4)), True, 4, 256) == \
        "non-finite observation means"
    assert moments_problem(Moments(256.0, np.zeros(3), np.ones(3)), True, 4, 256) == \
        "observation statistics of shape (3,)/(3,), expected (4,)"
    # finite but far: merged, they would overflow and the guard would undo every round (a stall)
    assert moments_problem(Moments(256.0, np.full(4, 1e300), np.ones(4)), True, 4, 256) == \
        "observation means beyond +-1e+06"
    assert moments_problem(Moments(256.0, np.full(4, -1e6), np.full(4, 256e12)), True, 4, 256) is None
    assert moments_problem(Moments(256.0, np.zeros(4), np.full(4, 256e12 * 1.01)), True, 4, 256) == \
        "observation variance beyond 1e+12"
    # algo.norm-obs-center = false: honest statistics are about zero, so a mean is a lie that would shift every node
    assert moments_problem(ok, True, 4, 256, centred=False) is None
    assert moments_problem(Moments(256.0, np.array([0.0, 0.3, 0.0, 0.0]), np.ones(4)), True, 4, 256, centred=False) == \
        "observation means must be 0: statistics are kept about zero (algo.norm-obs-center = false)"
    fed = _fed(**{"algo.norm-obs": "on"})
    g = fed.models[0]
    assert fed.validate(Reply(0, list(g), 256, ok, {}), 0) is None
    assert fed.validate(Reply(0, list(g), 128, ok, {}), 0) == \
        "observation count 256.0 differs from the 128 env steps it trained"


def test_weights_that_are_not_float32_are_refused_before_any_arithmetic() -> None:
    fed = _fed()
    g = fed.models[0]
    as_str = [np.full(w.shape, "x") for w in g]
    as_date = [np.zeros(w.shape, "datetime64[s]") for w in g]
    assert fed.validate(Reply(0, as_str, 256, None, {}), 0) == "array 0: dtype <U1, expected float32"
    assert fed.validate(Reply(0, as_date, 256, None, {}), 0) == "array 0: dtype datetime64[s], expected float32"
    assert fed.validate(Reply(0, [w.astype(np.float64) for w in g], 256, None, {}), 0) == \
        "array 0: dtype float64, expected float32"


# --- strategy.max-update-norm -----------------------------------------------------------------
def test_max_update_norm_leaves_out_exactly_the_reply_above_it() -> None:
    unit = math.sqrt(_fed().n_params)  # the norm of an update of +1 in every coordinate
    fed = _fed(**{"strategy.max-update-norm": 0.025 * unit})
    g = fed.models[0]
    replies = [Reply(n, _shifted(g, 0.01 * (n + 1)), 256, None, {}) for n in range(3)]
    assert [fed.validate(r, r.node) for r in replies[:2]] == [None, None]
    d = [a - b for a, b in zip(replies[2].weights, g, strict=True)]
    assert fed.validate(replies[2], 2) == \
        f"update norm {update_norm(d):.4g} exceeds strategy.max-update-norm = {0.025 * unit:g}"
    assert 0.03 * unit * 0.999 < update_norm(d) < 0.03 * unit * 1.001
    huge = Reply(0, [np.full_like(w, 3.4e38) for w in g], 256, None, {})
    assert "exceeds strategy.max-update-norm" in (fed.validate(huge, 0) or "")
    off = _fed()  # 0: no bound
    assert off.validate(replies[2], 2) is None and off.validate(huge, 0) is None
    assert math.isfinite(update_norm(huge.weights))  # float64: a float32 sum of squares would be inf


# --- the model never becomes non-finite --------------------------------------------------------
def test_star_fedavg_undoes_an_overflowing_mean_bit_for_bit_and_goes_on() -> None:
    fed = _fed()
    before = _copy(fed.models)
    g = before[0]
    huge = [np.full_like(w, 3.4e38) for w in g]  # finite, but server-lr 2 x the mean overflows float32
    fed.aggregate([Reply(0, huge, 256, None, {}), Reply(1, huge, 256, None, {})])
    assert _same(fed.models, before)
    assert fed.take_failure() == "fedavg " + KEPT.format("global model")
    assert fed.take_failure() is None
    assert fed.counters.env_steps == 512  # the work was done; only its result is refused
    fed.aggregate([Reply(0, _shifted(g, 1.0), 256, None, {})])  # the next round goes on
    np.testing.assert_allclose(flatten(fed.models[0]) - flatten(g), 2.0, atol=1e-6)
    assert fed.take_failure() is None


@pytest.mark.parametrize("name", ["fedavgm", "fedadam"])
def test_a_server_optimizer_keeps_its_state_when_the_step_is_undone(name: str) -> None:
    fed = _fed(**{"strategy.name": name, "strategy.server-lr": 0.01})
    g = fed.models[0]
    fed.aggregate([Reply(0, _shifted(g, 0.1), 256, None, {})])
    state = {k: v.copy() for k, v in fed.rule.optimizer.to_arrays().items()}
    before = _copy(fed.models)
    fed.aggregate([Reply(0, _nan(g), 256, None, {}), Reply(1, _shifted(g, 0.1), 256, None, {})])
    assert _same(fed.models, before) and fed.take_failure() == f"{name} " + KEPT.format("global model")
    after = fed.rule.optimizer.to_arrays()
    assert all(np.array_equal(after[k], state[k]) for k in state)


def test_a_robust_rule_is_guarded() -> None:
    fed = _fed(**{"strategy.name": "median", "strategy.byzantine": 0})
    g = fed.models[0]
    before = _copy(fed.models)
    fed.aggregate([Reply(0, _nan(g), 256, None, {}), Reply(1, _nan(g), 256, None, {}),
                   Reply(2, _shifted(g, 0.1), 256, None, {})])
    assert _same(fed.models, before) and fed.take_failure() == "median " + KEPT.format("global model")


def test_hierarchical_keeps_every_edge_when_one_breaks() -> None:
    fed = _fed(**{"nodes.count": 4, "topology.name": "hierarchical", "topology.edges": 2,
                  "topology.cloud-every": 2})
    fed.begin_round(1)
    before = _copy(fed.models)
    g = before[0]
    fed.aggregate([Reply(0, _nan(g), 256, None, {}), Reply(2, _shifted(g, 0.1), 256, None, {})], 1)
    assert _same(fed.models, before)
    assert fed.take_failure() == "hierarchical " + KEPT.format("model of edges [0]")


def test_per_node_models_give_back_only_the_broken_one() -> None:
    fed = _fed(**{"strategy.name": "local"})
    before = _copy(fed.models)
    g = before[1]
    fed.aggregate([Reply(1, _nan(g), 256, None, {}), Reply(2, _shifted(g, 1.0), 256, None, {})])
    assert _same([fed.models[0], fed.models[1]], [before[0], before[1]])
    np.testing.assert_allclose(flatten(fed.models[2]) - flatten(g), 1.0, atol=1e-6)  # the honest node's own
    assert fed.take_failure() == "local " + KEPT.format("model of nodes [1]")


def test_gossip_sends_a_restored_node_its_previous_model() -> None:
    """The node's broken model is undone, and so is the round it is from: the next plan carries
    the server's (previous) model instead of telling the node to keep the one it trained."""
    fed = _fed(**{"topology.name": "gossip"})
    before = _copy(fed.models)
    fed.begin_round(1)
    fed.aggregate([Reply(1, _nan(before[1]), 256, None, {}), Reply(2, _shifted(before[2], 1.0), 256, None, {})], 1)
    fed.note_delivery(1, [1, 2], [])
    fed.round = 1
    assert fed.rule.relay.trained == [0, 0, 1]
    assert _same([fed.models[1]], [before[1]])
    mix = fed.plan(1, 2)[1]
    assert isinstance(mix, Mix) and mix.own is not None and _same([mix.own], [before[1]])
    assert fed.plan(2, 2)[1].own is None  # type: ignore[union-attr]  # the honest node keeps its own
    assert fed.take_failure() == "gossip " + KEPT.format("model of nodes [1]")


def test_overflowing_observation_statistics_are_undone_with_the_model() -> None:
    fed = _fed(**{"algo.norm-obs": "on"})
    g = fed.models[0]
    fed.aggregate([Reply(0, list(g), 256, Moments.of(np.ones((256, 4))), {})])
    m0, before = fed.moments[0], _copy(fed.models)
    far = Moments(256.0, np.full(4, 1e300), np.ones(4))  # finite, but the merged M2 overflows
    fed.aggregate([Reply(1, _shifted(g, 0.1), 256, far, {})])
    assert fed.moments[0] is m0 and _same(fed.models, before)
    assert fed.take_failure() == "fedavg " + KEPT.format("global model")


@pytest.mark.parametrize("name", ["fedbuff", "fedasync"])
def test_asynchronous_rules_are_guarded(name: str) -> None:
    fed = _fed(**{"strategy.name": name, "strategy.buffer": 2})
    base = _copy(fed.models)[0]
    fed.receive_async(Reply(0, _nan(base), 256, None, {}), 0, base)
    applied = fed.receive_async(Reply(1, _shifted(base, 0.1), 256, None, {}), 0, base)
    assert applied == ([(0, 0), (1, 0)] if name == "fedbuff" else [(1, 0)])
    if name == "fedbuff":  # the buffer's mean is NaN: the whole step is undone
        assert _same(fed.models, [base]) and fed.take_failure() == "fedbuff " + KEPT.format("global model")
    else:  # each update mixes at once: the NaN one is undone, the honest one applies
        assert fed.take_failure() == "fedasync " + KEPT.format("global model")
        np.testing.assert_allclose(flatten(fed.models[0]) - flatten(base), 0.06, rtol=1e-4)
    assert fed.counters.env_steps == 512


def test_secure_aggregation_mean_is_guarded() -> None:
    fed = _fed()
    before = _copy(fed.models)
    fed.aggregate_sums({0: np.full(fed.n_params, np.inf, np.float32)}, 2.0)
    assert _same(fed.models, before) and fed.take_failure() == "secure aggregation " + KEPT.format("global model")
    assert fed.counters.env_steps == 512
    fed.aggregate_sums({0: flatten(_shifted(unflatten(np.zeros(fed.n_params, np.float32), before[0]), 0.5))}, 1.0)
    np.testing.assert_allclose(flatten(fed.models[0]) - flatten(before[0]), 1.0, atol=1e-6)


# --- which node attacks how ----------------------------------------------------------------
def test_attack_kinds_are_matched_in_order_to_the_attacking_nodes() -> None:
    over = {**SMALL, "nodes.count": 6, "attack.nodes": "4,1,2", "attack.name": "lie-steps, nan-weights,wrong-node"}
    assert attack_plan(from_run_config(over)) == {4: "lie-steps", 1: "nan-weights", 2: "wrong-node"}
    one = {**over, "attack.name": "sign-flip"}
    assert attack_plan(from_run_config(one)) == {4: "sign-flip", 1: "sign-flip", 2: "sign-flip"}
    with pytest.raises(ConfigError, match="attack.name: lists 2 kinds; attack.nodes must then list as many"):
        attack_plan(from_run_config({**over, "attack.name": "lie-steps,nan-weights"}))
    with pytest.raises(ConfigError, match="attack.name: lists 2 kinds"):
        attack_plan(from_run_config({**over, "attack.nodes": "", "attack.fraction": 0.5,
                                     "attack.name": "lie-steps,nan-weights"}))
    with pytest.raises(ConfigError, match="attack.name: got 'lie-steps,evil'; evil is not an attack kind"):
        from_run_config({**over, "attack.name": "lie-steps,evil"})
    with pytest.raises(ConfigError, match="attack.name: topk-overflow needs compression.up = topk"):
        attack_plan(from_run_config({**over, "attack.name": "topk-overflow"}))
    with pytest.raises(ConfigError, match="attack.name: lie-steps rewrite a plain reply"):
        attack_plan(from_run_config({**over, "attack.name": "lie-steps", "secagg.enabled": True}))
    with pytest.raises(ConfigError, match="attack.nodes: names attackers but attack.name = none"):
        attack_plan(from_run_config({**over, "attack.name": "none"}))
