"""Unit tests for fedrl.model.moments: mergeable moments and observation normalization."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedrl.model.moments import Moments, normalize

FLOATS = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False, width=64)


def _batch(dim: int, min_rows: int = 1) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(np.float64, st.tuples(st.integers(min_rows, 12), st.just(dim)), elements=FLOATS)


def _close(a: Moments, b: Moments) -> None:
    assert a.count == b.count
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-9, atol=1e-7)
    np.testing.assert_allclose(a.m2, b.m2, rtol=1e-8, atol=1e-5)


def test_of_by_hand() -> None:
    m = Moments.of(np.array([[1.0, 10.0], [3.0, 10.0], [5.0, 40.0]]))
    # col 0: mean 3, m2 = 4 + 0 + 4 = 8; col 1: mean 20, m2 = 100 + 100 + 400 = 600
    assert m.count == 3.0
    np.testing.assert_array_equal(m.mean, [3.0, 20.0])
    np.testing.assert_array_equal(m.m2, [8.0, 600.0])
    np.testing.assert_allclose(m.var, [8 / 3, 200.0])


def test_merge_by_hand() -> None:
    a = Moments.of(np.array([[1.0], [3.0]]))  # n=2 mean 2 m2 2
    b = Moments.of(np.array([[5.0]]))  # n=1 mean 5 m2 0
    m = a.merge(b)
    # delta = 3, mean = 2 + 3 * 1/3 = 3, m2 = 2 + 0 + 9 * 2 * 1 / 3 = 8 (= Moments.of([1,3,5]))
    assert m.count == 3.0
    np.testing.assert_allclose(m.mean, [3.0])
    np.testing.assert_allclose(m.m2, [8.0])


@settings(max_examples=60, deadline=None)
@given(dim=st.integers(1, 4), data=st.data())
def test_merge_equals_of_concatenation(dim: int, data: st.DataObject) -> None:
    a = data.draw(_batch(dim))
    b = data.draw(_batch(dim))
    _close(Moments.of(a).merge(Moments.of(b)), Moments.of(np.concatenate([a, b])))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_merge_is_associative_over_chunks(data: st.DataObject) -> None:
    parts = [data.draw(_batch(2)) for _ in range(3)]
    left = Moments.of(parts[0]).merge(Moments.of(parts[1])).merge(Moments.of(parts[2]))
    right = Moments.of(parts[0]).merge(Moments.of(parts[1]).merge(Moments.of(parts[2])))
    _close(left, right)
    _close(left, Moments.of(np.concatenate(parts)))


@settings(max_examples=40, deadline=None)
@given(dim=st.integers(1, 5), data=st.data())
def test_to_array_from_array_round_trip(dim: int, data: st.DataObject) -> None:
    m = Moments.of(data.draw(_batch(dim)))
    arr = m.to_array()
    assert arr.dtype == np.float64
    assert arr.shape == (1 + 2 * dim,)
    back = Moments.from_array(arr)
    assert back.count == m.count
    np.testing.assert_array_equal(back.mean, m.mean)
    np.testing.assert_array_equal(back.m2, m.m2)


def test_to_array_layout() -> None:
    m = Moments(4.0, np.array([1.0, 2.0]), np.array([3.0, 5.0]))
    np.testing.assert_array_equal(m.to_array(), [4.0, 1.0, 2.0, 3.0, 5.0])


def test_from_array_copies() -> None:
    arr = np.array([2.0, 1.0, 7.0])
    m = Moments.from_array(arr)
    arr[:] = -1.0
    assert m.count == 2.0 and m.mean[0] == 1.0 and m.m2[0] == 7.0


@pytest.mark.parametrize("bad", [np.zeros(4), np.zeros((3, 1)), np.zeros(0)])
def test_from_array_rejects_bad_shapes(bad: np.ndarray) -> None:
    with pytest.raises(ValueError):
        Moments.from_array(bad)


def test_empty_merges_are_identity() -> None:
    m = Moments.of(np.array([[1.0, 2.0], [3.0, 6.0]]))
    e = Moments.empty(2)
    assert e.count == 0.0
    np.testing.assert_array_equal(e.var, [1.0, 1.0])  # identity statistics when empty
    for merged in (m.merge(e), e.merge(m)):
        assert merged.count == m.count
        np.testing.assert_array_equal(merged.mean, m.mean)
        np.testing.assert_array_equal(merged.m2, m.m2)
    both = e.merge(Moments.empty(2))
    assert both.count == 0.0
    np.testing.assert_array_equal(Moments.from_array(e.to_array()).mean, [0.0, 0.0])


def test_normalize_by_hand_and_clipping() -> None:
    # mean [1, 0], var = m2 / count = [4, 1] -> std [2, 1] (eps 1e-8 negligible)
    m = Moments(2.0, np.array([1.0, 0.0]), np.array([8.0, 2.0]))
    out = normalize(np.array([[5.0, -3.0], [1.0, 100.0]]), m)
    assert out.dtype == np.float32
    # [(5-1)/2, -3/1] = [2, -3]; [0, 100 -> clipped to 10]
    np.testing.assert_allclose(out, [[2.0, -3.0], [0.0, 10.0]], rtol=1e-6)
    np.testing.assert_allclose(normalize(np.array([[-1e6, 1e6]]), m, clip=5.0), [[-5.0, 5.0]])


def test_normalize_with_empty_statistics_only_clips() -> None:
    out = normalize(np.array([[0.5, -20.0, 20.0]]), Moments.empty(3))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.array([[0.5, -10.0, 10.0]], np.float32))


def test_normalize_constant_feature_is_finite() -> None:
    m = Moments.of(np.array([[2.0], [2.0], [2.0]]))  # var 0: eps keeps it finite
    out = normalize(np.array([[2.0], [2.5]]), m)
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(out, np.array([[0.0], [10.0]], np.float32))


def test_moments_about_zero_by_hand() -> None:
    # algo.norm-obs-center = false: mean 0 and M2 the plain sum of squares, so normalize divides
    # by the root mean square and shifts nothing
    m = Moments.of(np.array([[1.0, -2.0], [3.0, 4.0]]), center=False)
    assert m.count == 2.0
    np.testing.assert_array_equal(m.mean, [0.0, 0.0])
    np.testing.assert_array_equal(m.m2, [10.0, 20.0])
    np.testing.assert_allclose(normalize(np.array([[2.0, 2.0]]), m, eps=0.0), [[2.0 / np.sqrt(5.0), 2.0 / np.sqrt(10.0)]],
                               rtol=1e-6)


@settings(max_examples=50, deadline=None)
@given(_batch(3), _batch(3))
def test_moments_about_zero_stay_about_zero_when_merged(a: np.ndarray, b: np.ndarray) -> None:
    merged = Moments.of(a, center=False).merge(Moments.of(b, center=False))
    _close(merged, Moments.of(np.concatenate([a, b]), center=False))
    np.testing.assert_array_equal(merged.mean, np.zeros(3))
