"""Server optimizers (Reddi et al. 2021) on hand-computed steps, and their reductions to FedAvg."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.aggregation.server_opt import ServerOptimizer, ServerOptSettings, annealed_lr
from fedrl.checks.validate import check
from fedrl.config import from_run_config
from fedrl.errors import ConfigError
from fedrl.server.federation import Federation
from fedrl.wire import Reply


def _run(settings: ServerOptSettings, updates: list[list[float]]) -> tuple[np.ndarray, ServerOptimizer]:
    opt = ServerOptimizer(settings, len(updates[0]))
    x = np.zeros(len(updates[0]), np.float32)
    for d in updates:
        x = opt.step(x, np.asarray(d, np.float32))
    return x, opt


def test_fedavg_and_fedavgm_by_hand() -> None:
    x, _ = _run(ServerOptSettings("fedavg", lr=2.0), [[1.0, -0.5], [0.5, 0.5]])
    np.testing.assert_allclose(x, [3.0, 0.0])
    # m1 = d1 = 1; x = 0.5; m2 = 0.9 + 1 = 1.9; x = 0.5 + 0.95 = 1.45
    x, opt = _run(ServerOptSettings("fedavgm", lr=0.5, momentum=0.9), [[1.0], [1.0]])
    np.testing.assert_allclose(x, [1.45], rtol=1e-6)
    assert opt.m.tolist() == [pytest.approx(1.9)]


def test_adaptive_steps_by_hand() -> None:
    s = {"lr": 0.1, "beta1": 0.9, "beta2": 0.99, "tau": 1e-3}
    # step 1 with d = 2: m = 0.2; adagrad v = 4; adam v = 0.04; yogi v = 0 - 0.01 * 4 * sign(0 - 4) = 0.04
    for name, v in (("fedadagrad", 4.0), ("fedadam", 0.04), ("fedyogi", 0.04)):
        x, opt = _run(ServerOptSettings(name, **s), [[2.0]])
        assert opt.v[0] == pytest.approx(v) and opt.m[0] == pytest.approx(0.2)
        np.testing.assert_allclose(x, [0.1 * 0.2 / (np.sqrt(v) + 1e-3)], rtol=1e-6)
    # yogi's second step with d = 1: v = 0.04 - 0.01 * 1 * sign(0.04 - 1) = 0.05; adam: 0.99 * 0.04 + 0.01 = 0.0496
    _, yogi = _run(ServerOptSettings("fedyogi", **s), [[2.0], [1.0]])
    _, adam = _run(ServerOptSettings("fedadam", **s), [[2.0], [1.0]])
    assert yogi.v[0] == pytest.approx(0.05) and adam.v[0] == pytest.approx(0.0496)


def test_degenerate_fedadam_is_fedavg_with_the_same_server_lr() -> None:
    rng = np.random.default_rng(0)
    updates = [rng.normal(0, 1, 50).astype(np.float32).tolist() for _ in range(5)]
    plain, _ = _run(ServerOptSettings("fedavg", lr=0.7), updates)
    adam, _ = _run(ServerOptSettings("fedadam", lr=0.7, beta1=0.0, beta2=1.0, tau=1.0), updates)
    np.testing.assert_array_equal(adam, plain)
    avgm, _ = _run(ServerOptSettings("fedavgm", lr=0.7, momentum=0.0), updates)
    np.testing.assert_array_equal(avgm, plain)


def test_state_round_trips_and_bad_input_is_refused() -> None:
    _, opt = _run(ServerOptSettings("fedadam", lr=0.1), [[1.0, 2.0], [0.5, -1.0]])
    back = ServerOptimizer(ServerOptSettings("fedadam", lr=0.1), 2)
    back.load_arrays(opt.to_arrays())
    assert back.steps == 2 and back.m.tolist() == opt.m.tolist() and back.v.tolist() == opt.v.tolist()
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(back.step(x, np.ones(2, np.float32)), opt.step(x, np.ones(2, np.float32)))
    with pytest.raises(ValueError, match="one of"):
        ServerOptimizer(ServerOptSettings("sgd"), 2)
    with pytest.raises(ValueError, match="3 values"):
        opt.step(np.zeros(2, np.float32), np.zeros(3, np.float32))


def test_annealed_lr_runs_linearly_from_start_to_end() -> None:
    assert [annealed_lr(2.0, 1.0, r, 5) for r in range(1, 6)] == [2.0, 1.75, 1.5, 1.25, 1.0]
    assert annealed_lr(2.0, -1.0, 5, 5) == 2.0  # -1: constant
    assert annealed_lr(2.0, 1.0, 1, 1) == 2.0  # a one-round run takes the start
    assert annealed_lr(2.0, 0.0, 9, 5) == 0.0  # past the last round: the end


def test_the_schedule_never_raises_the_step() -> None:
    # the default end (0.5) leaves an adaptive optimizer's small rate as it is
    assert [annealed_lr(0.01, 0.5, r, 5) for r in range(1, 6)] == [0.01] * 5
    assert [annealed_lr(0.5, 0.5, r, 3) for r in range(1, 4)] == [0.5] * 3


def test_the_default_anneals_the_server_step_from_2_to_half() -> None:
    cfg = from_run_config({"num-server-rounds": 4})
    assert (cfg.strategy.server_lr, cfg.strategy.server_lr_end) == (2.0, 0.5)
    assert [annealed_lr(2.0, 0.5, r, 4) for r in range(1, 5)] == [2.0, 1.5, 1.0, 0.5]


def test_a_step_with_an_lr_overrides_the_settings_once() -> None:
    opt = ServerOptimizer(ServerOptSettings("fedavg", lr=2.0), 2)
    x, d = np.zeros(2, np.float32), np.array([1.0, -2.0], np.float32)
    assert opt.step(x, d, 0.5).tolist() == [0.5, -1.0]
    assert opt.step(x, d).tolist() == [2.0, -4.0]
    assert opt.s.lr == 2.0


def test_the_federation_anneals_its_server_step() -> None:
    fed = Federation(from_run_config({"nodes.count": 2, "num-server-rounds": 3, "algo.local-steps": 256,
                                      "strategy.server-lr": 2.0, "strategy.server-lr-end": 1.0}))
    steps = []
    for rnd in (1, 2, 3):
        fed.begin_round(rnd)
        g = [w.copy() for w in fed.models[0]]
        fed.aggregate([Reply(0, [w + np.float32(0.25) for w in g], 256, None, {})], rnd)
        steps.append(float(fed.models[0][0].flat[0] - g[0].flat[0]))
        fed.round = rnd
    assert steps == pytest.approx([0.5, 0.375, 0.25], abs=1e-6)


def test_the_annealed_step_follows_the_round_aggregate_is_given() -> None:
    # aggregate(replies, rnd) applies round rnd's replies: its server learning rate is round rnd's,
    # whatever fed.round says (here still 0)
    fed = Federation(from_run_config({"nodes.count": 2, "num-server-rounds": 3, "algo.local-steps": 256,
                                      "strategy.server-lr": 2.0, "strategy.server-lr-end": 1.0}))
    fed.begin_round(3)
    g = [w.copy() for w in fed.models[0]]
    fed.aggregate([Reply(0, [w + np.float32(0.25) for w in g], 256, None, {})], 3)
    assert float(fed.models[0][0].flat[0] - g[0].flat[0]) == pytest.approx(0.25, abs=1e-6)


@pytest.mark.parametrize("over, why", [
    ({"strategy.name": "local"}, "strategy.name = local"),
    ({"strategy.name": "fedasync"}, "strategy.name = fedasync (it mixes, no server step)"),
    ({"topology.name": "gossip"}, "topology.name = gossip (nodes step themselves)"),
])
def test_server_lr_end_is_refused_where_there_is_no_server_step(over: dict[str, object], why: str) -> None:
    with pytest.raises(ConfigError) as info:
        check({"nodes.count": 4, "strategy.server-lr-end": 1.0, **over})
    assert str(info.value) == f"strategy.server-lr-end: anneals the server's step, but {why} has none; leave it at -1"


@pytest.mark.parametrize("over", [{"strategy.name": "local"}, {"strategy.name": "fedasync"},
                                  {"topology.name": "gossip", "algo.norm-obs": "off"}])
def test_the_default_server_lr_end_is_unused_where_there_is_no_server_step(over: dict[str, object]) -> None:
    assert check({"nodes.count": 4, **over}).strategy.server_lr_end == 0.5
    assert check({"nodes.count": 4, "strategy.server-lr-end": -1, **over}).strategy.server_lr_end == -1
