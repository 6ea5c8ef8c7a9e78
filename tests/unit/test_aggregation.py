"""Unit tests for fedrl.aggregation.fedavg: weighted mean of deltas and the server step."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.aggregation.fedavg import apply_delta, delta_of, weighted_mean


def _f32(x: object) -> np.ndarray:
    return np.asarray(x, np.float32)


A = [_f32([[1.0, 2.0], [3.0, 4.0]]), _f32([10.0])]
B = [_f32([[5.0, 10.0], [-1.0, 0.0]]), _f32([-2.0])]


def test_weighted_mean_by_hand() -> None:
    out = weighted_mean([A, B], [1.0, 3.0])
    # (1 * a + 3 * b) / 4:
    #   [[(1 + 15)/4, (2 + 30)/4], [(3 - 3)/4, (4 + 0)/4]] = [[4, 8], [0, 1]]
    #   [(10 - 6)/4] = [1]
    np.testing.assert_array_equal(out[0], [[4.0, 8.0], [0.0, 1.0]])
    np.testing.assert_array_equal(out[1], [1.0])
    assert all(o.dtype == np.float32 for o in out)


def test_weighted_mean_integer_weights_and_single_update() -> None:
    out = weighted_mean([A, B], [256, 768])  # env steps, same ratio as [1, 3]
    np.testing.assert_array_equal(out[0], [[4.0, 8.0], [0.0, 1.0]])
    single = weighted_mean([A], [5])
    for s, a in zip(single, A, strict=True):
        np.testing.assert_array_equal(s, a)


def test_weighted_mean_zero_weight_update_is_ignored() -> None:
    out = weighted_mean([A, B], [0.0, 2.0])
    for o, b in zip(out, B, strict=True):
        np.testing.assert_array_equal(o, b)


def test_weighted_mean_does_not_mutate_inputs() -> None:
    a_copy = [x.copy() for x in A]
    weighted_mean([A, B], [1, 1])
    for x, y in zip(A, a_copy, strict=True):
        np.testing.assert_array_equal(x, y)


def test_weighted_mean_accumulates_in_float64() -> None:
    # (1 + 1e8 - 1e8) / 3 = 1/3. Accumulating in float32 in this order loses the 1/3:
    # float32(1/3 + 33333333.3) = 33333334, then - 33333334 = 0. float64 keeps it.
    out = weighted_mean([[_f32([1.0])], [_f32([1e8])], [_f32([-1e8])]], [1, 1, 1])
    np.testing.assert_allclose(out[0], [1 / 3], rtol=1e-6)


def test_apply_delta_with_server_lr() -> None:
    params = [_f32([1.0, 2.0]), _f32([[0.5]])]
    delta = [_f32([4.0, -2.0]), _f32([[1.0]])]
    # p + 0.5 * d = [1 + 2, 2 - 1], [[0.5 + 0.5]]
    out = apply_delta(params, delta, 0.5)
    np.testing.assert_array_equal(out[0], [3.0, 1.0])
    np.testing.assert_array_equal(out[1], [[1.0]])
    assert all(o.dtype == np.float32 for o in out)
    # server_lr = 2 overshoots: [1 + 8, 2 - 4], [[0.5 + 2]]
    out2 = apply_delta(params, delta, 2.0)
    np.testing.assert_array_equal(out2[0], [9.0, -2.0])
    np.testing.assert_array_equal(out2[1], [[2.5]])


def test_apply_delta_length_mismatch_raises() -> None:
    with pytest.raises(ValueError):
        apply_delta([_f32([1.0])], [_f32([1.0]), _f32([2.0])], 1.0)


def test_delta_of() -> None:
    out = delta_of([_f32([3.0, 1.0])], [_f32([1.0, 1.5])])
    np.testing.assert_array_equal(out[0], [2.0, -0.5])


def test_fedavg_server_lr_one_equals_weighted_average_of_models() -> None:
    rng = np.random.default_rng(0)
    glob = [rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=(2,)).astype(np.float32)]
    clients = [[g + rng.normal(size=g.shape).astype(np.float32) for g in glob] for _ in range(3)]
    steps = [256, 512, 1024]
    deltas = [delta_of(c, glob) for c in clients]
    new = apply_delta(glob, weighted_mean(deltas, steps), 1.0)
    expected = weighted_mean(clients, steps)
    for n, e in zip(new, expected, strict=True):
        np.testing.assert_allclose(n, e, rtol=1e-6, atol=1e-6)
    # and by hand for the first entry: (256 c0 + 512 c1 + 1024 c2) / 1792
    hand = (256 * clients[0][0].astype(np.float64) + 512 * clients[1][0] + 1024 * clients[2][0]) / 1792
    np.testing.assert_allclose(new[0], hand, rtol=1e-6, atol=1e-6)


def test_fedavg_server_lr_half_moves_halfway() -> None:
    glob = [_f32([0.0, 2.0])]
    clients = [[_f32([2.0, 2.0])], [_f32([4.0, 6.0])]]
    deltas = [delta_of(c, glob) for c in clients]
    # mean delta (weights 1, 1) = [3, 2]; 0.5 * [3, 2] + [0, 2] = [1.5, 3]
    np.testing.assert_array_equal(apply_delta(glob, weighted_mean(deltas, [1, 1]), 0.5)[0], [1.5, 3.0])


def test_weighted_mean_errors() -> None:
    with pytest.raises(ValueError, match="no updates"):
        weighted_mean([], [])
    with pytest.raises(ValueError, match="one weight per update"):
        weighted_mean([A, B], [1.0])
    with pytest.raises(ValueError, match="positive"):
        weighted_mean([A, B], [0.0, 0.0])
    with pytest.raises(ValueError, match="positive"):
        weighted_mean([A, B], [1.0, -1.0])


def test_weighted_mean_mismatched_array_counts_raise() -> None:
    with pytest.raises(ValueError):
        weighted_mean([A, B[:1]], [1, 1])
