"""DP-FedAvg on the server: noise size, per-node clipping, accounting across a checkpoint."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrl.config import from_run_config
from fedrl.model.layout import flatten
from fedrl.privacy import epsilon_after
from fedrl.server import secure_sum
from fedrl.server.federation import Federation
from fedrl.server.snapshot import restore, snapshot
from fedrl.wire import Reply

SMALL = {"nodes.count": 3, "algo.local-steps": 256, "eval.episodes": 1, "strategy.server-lr": 1.0}
CENTRAL = {"privacy.mode": "central", "privacy.clip-norm": 0.5}


def _fed(**over: object) -> Federation:
    return Federation(from_run_config({**SMALL, **over}))


def _moved(fed: Federation, replies_shift: list[float], nodes: list[int]) -> np.ndarray:
    g = [w.copy() for w in fed.models[0]]
    fed.aggregate([Reply(n, [w + np.float32(s) for w in g], 256, None, {}) for n, s in zip(nodes, replies_shift,
                                                                                          strict=True)])
    return flatten(fed.models[0]) - flatten(g)


def test_central_noise_on_the_mean_has_std_z_c_over_selected_nodes() -> None:
    fed = _fed(**CENTRAL, **{"privacy.noise-multiplier": 2.0})
    moved = _moved(fed, [0.0, 0.0, 0.0], [0, 1, 2])
    n = moved.size  # ~9k coordinates: the std estimate's standard error is ~0.75%
    assert n > 5000
    assert float(moved.std()) == pytest.approx(2.0 * 0.5 / 3, rel=0.04)
    assert abs(float(moved.mean())) < 5 * (1 / 3) / math.sqrt(n)
    assert fed.epsilon() == epsilon_after(2.0, 1.0, 1, 1e-5)


def test_each_node_is_clipped_on_the_server_and_the_mean_divides_by_the_selected() -> None:
    fed = _fed(**CENTRAL, **{"privacy.noise-multiplier": 1e-9})
    moved = _moved(fed, [1.0, -3.0], [0, 2])  # node 1 selected but silent
    n = moved.size
    # Both updates point along +-1 and have norms far above C: each contributes C / sqrt(n) per coordinate.
    expected = (0.5 / math.sqrt(n) - 0.5 / math.sqrt(n)) / 3
    np.testing.assert_allclose(moved, expected, atol=1e-7)
    fed2 = _fed(**CENTRAL, **{"privacy.noise-multiplier": 1e-9})
    moved = _moved(fed2, [1.0, 1.0], [0, 2])
    np.testing.assert_allclose(moved, 2 * 0.5 / math.sqrt(n) / 3, rtol=1e-4)
    assert float(np.linalg.norm(moved)) <= 2 * 0.5 / 3 + 1e-6


def test_without_privacy_nothing_is_noised_or_accounted() -> None:
    a, b = _fed(), _fed()
    np.testing.assert_array_equal(_moved(a, [0.1, 0.3], [0, 1]), _moved(b, [0.1, 0.3], [0, 1]))
    assert a.epsilon() is None and a.budget_allows_next_round()


def test_local_mode_takes_the_plain_mean_of_noised_updates() -> None:
    fed = _fed(**{"privacy.mode": "local", "privacy.noise-multiplier": 1.0})
    np.testing.assert_allclose(_moved(fed, [0.2, 0.4], [0, 1]), 0.3, atol=1e-6)
    assert fed.epsilon() == epsilon_after(1.0, 1.0, 1, 1e-5)


def test_the_ledger_survives_a_checkpoint() -> None:
    fed = _fed(**CENTRAL, **{"privacy.noise-multiplier": 1.3})
    for _ in range(3):
        _moved(fed, [0.0, 0.0, 0.0], [0, 1, 2])
    fed.round = 3
    back = _fed(**CENTRAL, **{"privacy.noise-multiplier": 1.3})
    restore(back, snapshot(fed, 0.0))
    assert back.dp is not None and back.dp.ledger.steps == 3
    assert back.epsilon() == fed.epsilon() == epsilon_after(1.3, 1.0, 3, 1e-5)


def test_the_budget_refuses_the_round_that_would_exceed_it() -> None:
    fed = _fed(**CENTRAL, **{"privacy.noise-multiplier": 2.0, "privacy.target-epsilon": 5.0})
    allowed = 0
    while fed.budget_allows_next_round():
        _moved(fed, [0.0, 0.0, 0.0], [0, 1, 2])
        allowed += 1
    assert allowed == 4 and fed.epsilon() == pytest.approx(4.729, abs=1e-3)


@pytest.mark.parametrize(("bit", "low", "high"), [(1.0, 0.86, 0.951), (0.0, 1.051, 1.17)])
def test_adaptive_clip_moves_toward_the_quantile(bit: float, low: float, high: float) -> None:
    # z = 0.2 and count noise 0.15: the noisy fraction has std 0.05, the exponent 0.01 (bounds: 5 of them).
    fed = _fed(**CENTRAL, **{"privacy.noise-multiplier": 0.2, "privacy.adaptive-clip": True,
                             "privacy.count-noise": 0.15})
    g = [w.copy() for w in fed.models[0]]
    assert fed.plan(0, 1)[0].clip_norm == 0.5
    fed.aggregate([Reply(n, g, 256, None, {"clip_below": bit}) for n in range(3)])
    assert low < fed.clip / 0.5 < high
    assert fed.plan(0, 2)[0].clip_norm == fed.clip
    back = _fed(**CENTRAL, **{"privacy.noise-multiplier": 0.2, "privacy.adaptive-clip": True,
                              "privacy.count-noise": 0.15})
    fed.round = 1
    restore(back, snapshot(fed, 0.0))
    assert back.clip == fed.clip


@pytest.mark.parametrize(("z", "count_noise"), [(1.0, 2.0), (0.5, 0.4), (3.0, 1.6)])
def test_adaptive_update_noise_agrees_with_flowers_helper(z: float, count_noise: float) -> None:
    from flwr.supercore.differential_privacy import compute_adaptive_noise_params

    fed = _fed(**CENTRAL, **{"privacy.noise-multiplier": z, "privacy.adaptive-clip": True,
                             "privacy.count-noise": count_noise})
    assert fed.privacy is not None
    assert (fed.privacy.count_std, fed.privacy.z_update) == pytest.approx(
        compute_adaptive_noise_params(z, 3, count_noise))


def test_distributed_dp_mean_from_a_ring_sum_is_noised_once_per_node_and_accounted() -> None:
    from fedrl.privacy.skellam import skellam_epsilon
    from fedrl.storage.checkpoint import Checkpoint

    over = {**SMALL, "nodes.count": 6, "secagg.enabled": True, "compression.up": "quantize",
            "privacy.mode": "distributed", "privacy.noise-multiplier": 2.0, "privacy.clip-norm": 0.5}
    fed = Federation(from_run_config(over))
    d = fed.privacy.dist  # type: ignore[union-attr]
    assert d is not None and secure_sum.ring_bits(fed, 6) == 24 and (d.nodes, d.share) == (6, 4)
    rng = np.random.default_rng(0)
    updates = [u * 0.5 / np.linalg.norm(u) for u in rng.normal(0, 1, (5, fed.n_params))]  # 5 of 6 survive
    ring = sum(np.concatenate([d.encode(u, rng), [1]]).astype(np.uint64) for u in updates)
    ring &= np.uint64((1 << 24) - 1)
    mean, _ = secure_sum.mean_update(fed, ring, 5, 1)
    noise = mean * 6 - np.sum(updates, axis=0)  # divided by the 6 selected
    assert noise.std() == pytest.approx(2.0 * d.l2 / d.scale * math.sqrt(5 / 4), rel=0.05)
    assert fed.dp.ledger is not None and fed.dp.ledger.history == [(d.mu_with(5), 1.0, 1)]
    assert fed.epsilon() == skellam_epsilon([(d.mu * 5 / 4, 1)], d.l1, d.l2, 1e-5)
    ck = snapshot(fed, 0.0)
    again = Federation(from_run_config(over))
    restore(again, Checkpoint(ck.meta, ck.arrays))
    assert again.epsilon() == fed.epsilon()


def test_dp_at_the_edge_noises_each_edges_mean_and_accounts_once_a_round() -> None:
    """Hierarchical with central DP: each edge releases DP-FedAvg's mean of its own nodes (noise
    std z C over its share of the selected nodes, independent across edges) and the round is one
    ledger step (the edges' nodes are disjoint)."""
    fed = _fed(**CENTRAL, **{"privacy.noise-multiplier": 2.0, "nodes.count": 4, "topology.name": "hierarchical",
                             "topology.edges": 2, "topology.cloud-every": 5, "strategy.server-lr-end": -1,
                             "algo.norm-obs": "off"})
    fed.begin_round(1)
    before = [flatten(m) for m in fed.models]
    fed.aggregate([Reply(n, [w.copy() for w in fed.sent(n)], 256, None, {}) for n in range(4)], 1)
    moved = [flatten(m) - b for m, b in zip(fed.models, before, strict=True)]
    for e in range(2):  # 4 selected, 2 of them on each edge: the edge divides by 2
        assert fed.rule.edge_of.count(e) == 2  # type: ignore[attr-defined]
        assert float(moved[e].std()) == pytest.approx(2.0 * 0.5 / 2, rel=0.04)
    assert abs(float(np.corrcoef(moved[0], moved[1])[0, 1])) < 0.05
    assert fed.epsilon() == epsilon_after(2.0, 1.0, 1, 1e-5)
