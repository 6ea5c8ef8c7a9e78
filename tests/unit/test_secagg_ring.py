"""Exact arithmetic in Z_(2^bits) and the bit width a sum needs."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.secagg.ring import check_bits, required_bits, ring_add, ring_sub, ring_sum, to_ring_vector


def u64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def test_add_sub_sum_wrap_exactly() -> None:
    np.testing.assert_array_equal(ring_add(u64(7, 5, 0), u64(1, 4, 3), 3), u64(0, 1, 3))
    np.testing.assert_array_equal(ring_sub(u64(0, 1, 3), u64(1, 4, 3), 3), u64(7, 5, 0))
    np.testing.assert_array_equal(ring_sum([u64(7, 1), u64(7, 2), u64(7, 3)], 3), u64(5, 6))
    top = (1 << 32) - 1
    np.testing.assert_array_equal(ring_add(u64(top), u64(1), 32), u64(0))
    np.testing.assert_array_equal(ring_sub(u64(0), u64(1), 32), u64(top))
    np.testing.assert_array_equal(ring_add(u64(1), u64(1), 1), u64(0))


def test_ring_sum_many_terms_matches_python_ints() -> None:
    rng = np.random.default_rng(0)
    vs = [rng.integers(0, 1 << 32, 50, dtype=np.uint64) for _ in range(300)]
    expected = [sum(int(v[i]) for v in vs) % (1 << 32) for i in range(50)]
    assert ring_sum(vs, 32).tolist() == expected


def test_ring_sum_empty() -> None:
    np.testing.assert_array_equal(ring_sum([], 8, length=3), u64(0, 0, 0))
    with pytest.raises(ValueError):
        ring_sum([], 8)


@pytest.mark.parametrize(
    ("max_value", "n", "bits"),
    [
        (0, 1, 1),
        (0, 9, 1),
        (1, 1, 1),
        (1, 2, 2),
        (1, 3, 2),
        (1, 4, 3),
        (255, 1, 8),
        (255, 2, 9),
        (256, 1, 9),
        (1, 256, 9),
        (255, 257, 16),
        (255, 258, 17),
        (65535, 65537, 32),
    ],
)
def test_required_bits_exact(max_value: int, n: int, bits: int) -> None:
    assert required_bits(max_value, n) == bits
    assert n * max_value < 1 << bits  # the sum fits ...
    assert bits == 1 or n * max_value >= 1 << (bits - 1)  # ... and one bit fewer would not do


@pytest.mark.parametrize(("max_value", "n"), [(65536, 65536), (-1, 2), (3, 0), (1.5, 2), (True, 2)])
def test_required_bits_rejects(max_value: object, n: object) -> None:
    with pytest.raises(ValueError):
        required_bits(max_value, n)  # type: ignore[arg-type]


@pytest.mark.parametrize("bits", [0, 33, -1, 8.0, True])
def test_check_bits_rejects(bits: object) -> None:
    with pytest.raises(ValueError):
        check_bits(bits)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "x",
    [
        np.zeros(3, dtype=np.uint64),
        np.zeros((4, 1), dtype=np.uint64),
        np.zeros(4),
        np.array([0, 0, 0, -1]),
        np.array([0, 0, 0, 256]),
    ],
)
def test_to_ring_vector_rejects(x: np.ndarray) -> None:
    with pytest.raises(ValueError, match="x"):
        to_ring_vector(x, 8, 4)


def test_to_ring_vector_copies_as_uint64() -> None:
    x = np.array([0, 255, 3, 4], dtype=np.int32)
    out = to_ring_vector(x, 8, 4)
    assert out.dtype == np.uint64 and out.tolist() == [0, 255, 3, 4]
    out[0] = 9
    assert x[0] == 0
