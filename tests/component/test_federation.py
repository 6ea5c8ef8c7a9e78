"""One aggregation on constructed replies; reply checks; the centralized baseline's folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedrl.config import from_run_config
from fedrl.model.moments import Moments
from fedrl.server.federation import Federation
from fedrl.server.snapshot import restore, snapshot
from fedrl.wire import Reply

# Pinned: these tests check exact aggregation formulas on replies without observation statistics
# (the defaults turn normalization on and anneal the server step, issue 13).
SMALL = {"nodes.count": 3, "algo.local-steps": 256, "eval.episodes": 1, "algo.norm-obs": "off", "strategy.server-lr-end": -1}


def _fed(**over: object) -> Federation:
    return Federation(from_run_config({**SMALL, **over}))


def _shifted(weights: list[np.ndarray], c: float) -> list[np.ndarray]:
    return [w + np.float32(c) for w in weights]


@pytest.mark.parametrize("name", ["fedavg", "fedprox"])
def test_weighted_by_env_steps_with_server_lr(name: str) -> None:
    fed = _fed(**{"strategy.name": name, "strategy.server-lr": 0.5})
    g = [w.copy() for w in fed.models[0]]
    # deltas +1 (weight 100) and +4 (weight 300): mean delta 3.25, times server lr 0.5
    fed.aggregate([Reply(0, _shifted(g, 1.0), 100, None, {}), Reply(2, _shifted(g, 4.0), 300, None, {})])
    for new, old in zip(fed.models[0], g, strict=True):
        np.testing.assert_allclose(new - old, 1.625, rtol=0, atol=1e-6)
    assert fed.counters.env_steps == 400


def test_fedprox_plans_carry_mu_and_fedavg_does_not() -> None:
    assert _fed(**{"strategy.name": "fedprox", "strategy.proximal-mu": 0.1}).plan(1, 1)[0].prox_mu == 0.1
    assert _fed(**{"strategy.name": "fedavg", "strategy.proximal-mu": 0.1}).plan(1, 1)[0].prox_mu == 0.0


def test_local_keeps_one_model_per_node() -> None:
    fed = _fed(**{"strategy.name": "local"})
    g = [w.copy() for w in fed.models[1]]
    fed.aggregate([Reply(1, _shifted(g, 2.0), 256, None, {})])
    np.testing.assert_allclose(fed.models[1][0] - g[0], 2.0, atol=1e-6)  # its own weights: no server step
    np.testing.assert_array_equal(fed.models[0][0], g[0])  # node 0 untouched
    fed.begin_round(2)
    assert fed.plan(1, 2)[1].weights == fed.models[1]


def test_bad_replies_are_named() -> None:
    fed = _fed()
    g = fed.models[0]
    assert fed.validate(Reply(0, list(g), 256, None, {}), 0) is None
    assert "asked for 1" in (fed.validate(Reply(0, list(g), 256, None, {}), 1) or "")
    assert "non-finite" in (fed.validate(Reply(0, [np.full_like(w, np.nan) for w in g], 256, None, {}), 0) or "")
    assert "shape" in (fed.validate(Reply(0, [w[..., :1] for w in g], 256, None, {}), 0) or "")
    assert "expected" in (fed.validate(Reply(0, list(g)[:-1], 256, None, {}), 0) or "")
    assert "env_steps" in (fed.validate(Reply(0, list(g), 0, None, {}), 0) or "")


def test_observation_statistics_pool_exactly() -> None:
    fed = _fed(**{"algo.norm-obs": "on"})
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(50, 4)), rng.normal(2.0, 3.0, size=(70, 4))
    g = fed.models[0]
    fed.aggregate([Reply(0, list(g), 256, Moments.of(a), {}), Reply(1, list(g), 256, Moments.of(b), {})])
    pooled = Moments.of(np.concatenate([a, b]))
    m = fed.moments[0]
    assert m is not None and m.count == 120
    np.testing.assert_allclose(m.mean, pooled.mean)
    np.testing.assert_allclose(m.var, pooled.var)
    assert fed.validate(Reply(0, list(g), 256, None, {}), 0) == "missing or malformed observation statistics"


def test_selection_is_seeded_and_respects_minimum() -> None:
    fed = Federation(from_run_config({**SMALL, "nodes.count": 10, "fraction-train": 0.2, "min-train-nodes": 3}))
    assert len(fed.select(1)) == 3 and fed.select(1) == fed.select(1)
    assert any(fed.select(r) != fed.select(1) for r in range(2, 6))


def test_centralized_writes_a_run_folder(tmp_path: Path) -> None:
    from fedrl.server.centralized import run_centralized

    cfg = from_run_config({**SMALL, "num-server-rounds": 2, "output-dir": str(tmp_path), "run-name": "c"})
    fed = run_centralized(cfg)
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["env_steps_total"] == 2 * 3 * 256 == fed.counters.env_steps
    assert len(summary["eval"]) == 3
    rows = (tmp_path / "c" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2


def test_checkpoint_round_trip_and_refuses_a_changed_experiment() -> None:
    from fedrl.errors import ConfigError

    fed = _fed(**{"algo.norm-obs": "on"})
    g = fed.models[0]
    fed.aggregate([Reply(0, _shifted(g, 1.0), 256, Moments.of(np.ones((3, 4))), {})])
    fed.round, fed.counters.bytes_up = 3, 123
    ck = snapshot(fed, 0.0)
    back = _fed(**{"algo.norm-obs": "on", "run-name": "elsewhere"})  # folder name may change
    restore(back, ck)
    assert (back.round, back.counters.env_steps, back.counters.bytes_up) == (3, 256, 123)
    np.testing.assert_array_equal(back.models[0][0], fed.models[0][0])
    assert back.moments[0] is not None and back.moments[0].count == 3
    with pytest.raises(ConfigError, match="resume: .*ppo.lr"):
        restore(_fed(**{"algo.norm-obs": "on", "ppo.lr": 0.1}), ck)


def test_a_variant_is_evaluated_on_the_same_episodes_in_any_list() -> None:
    from fedrl.rl.evaluate import evaluate

    fed = _fed()
    args = (fed.spec, fed.models[0], None, "CartPole-v1")
    every = evaluate(*args, fed.variants, {}, 2, 0)
    alone = [evaluate(*args, [v], {}, 2, 0, nodes=[i])[0] for i, v in enumerate(fed.variants)]
    assert every == alone


def test_round_robin_selection_takes_nodes_in_turn_and_uniform_draws_by_seed() -> None:
    rr = _fed(**{"nodes.count": 5, "fraction-train": 0.4, "selection.name": "round-robin"})
    assert [rr.select(r) for r in (1, 2, 3, 4)] == [[0, 1], [2, 3], [0, 4], [1, 2]]
    uni = _fed(**{"nodes.count": 5, "fraction-train": 0.4})
    assert uni.select(3) == _fed(**{"nodes.count": 5, "fraction-train": 0.4}).select(3) and len(uni.select(3)) == 2
