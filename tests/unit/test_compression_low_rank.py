"""PowerSGD (``fedrl.compression.low_rank``): exact on low-rank matrices, error falling with rank,
warm starts converging to the best rank-r approximation, raw vectors, 8-bit factors, hostile payloads."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedrl.compression import Compressed, make_compressor
from fedrl.compression.low_rank import PowerSGD
from fedrl.compression.pipeline import RESIDUAL_KEY, WARM_KEY, node_encode, stage
from fedrl.config import CompressionConfig

POLICY = [(64, 4), (64,), (64, 64), (64,), (2, 64), (2,)]  # an actor's tensors, get_weights order


def _low_rank(m: int, n: int, r: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, r)) @ rng.standard_normal((r, n))).astype(np.float32)


def _rel_err(c: PowerSGD, x: np.ndarray, seed: int = 0) -> float:
    d = c.decode(c.encode(x, np.random.default_rng(seed)))
    return float(np.linalg.norm(d - x) / np.linalg.norm(x))


@pytest.mark.parametrize("r", [1, 2, 4])
def test_a_rank_r_matrix_is_reproduced(r: int) -> None:
    for seed in range(3):
        m = _low_rank(40, 30, r, seed)
        for rank in (r, r + 2):
            assert _rel_err(PowerSGD([m.shape], rank=rank), m.ravel(), seed) < 1e-5


def test_error_falls_with_rank_on_random_matrices() -> None:
    for seed in range(5):
        x = np.random.default_rng(seed).standard_normal(64 * 48).astype(np.float32)
        errs = [_rel_err(PowerSGD([(64, 48)], rank=r), x, seed) for r in (1, 2, 4, 8, 16)]
        assert all(a > b for a, b in itertools.pairwise(errs)), errs
        assert errs[0] < 1.0


def test_warm_starts_converge_to_the_best_rank_r_approximation() -> None:
    rng = np.random.default_rng(7)
    u, _ = np.linalg.qr(rng.standard_normal((50, 50)))
    v, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    s = 0.7 ** np.arange(40)  # a decaying spectrum, as updates have
    m = (u[:, :40] * s) @ v.T
    x = m.ravel().astype(np.float32)
    best = float(np.sqrt(np.sum(s[2:] ** 2)) / np.sqrt(np.sum(s ** 2)))  # Eckart-Young, rank 2
    c, warm = PowerSGD([(50, 40)], rank=2), None
    errs = []
    for _ in range(12):
        payload, warm = c.encode_warm(x, rng, warm)
        errs.append(float(np.linalg.norm(c.decode(payload) - x) / np.linalg.norm(x)))
    assert errs[-1] == pytest.approx(best, rel=1e-3)
    assert errs[-1] < errs[0]


def test_vectors_and_small_matrices_travel_raw_and_exact() -> None:
    c = PowerSGD(POLICY, rank=4)
    # rank 4 factors of (64, 4) or (2, 64) would not be smaller than the matrix: those travel raw
    assert [t.rank for t in c.tensors] == [0, 0, 4, 0, 0, 0]
    assert [t.rank for t in PowerSGD(POLICY, rank=1).tensors] == [1, 0, 1, 0, 1, 0]
    x = np.random.default_rng(0).standard_normal(c.n).astype(np.float32)
    payload = c.encode(x, np.random.default_rng(1))
    d = c.decode(payload)
    for a, b in ((0, 320), (4416, 4610)):
        np.testing.assert_array_equal(d[a:b], x[a:b])
    assert payload.nbytes == 4 * c.floats_sent == 4 * (64 * 4 + 64 * 4 + 256 + 64 + 64 + 128 + 2)


def test_eight_bit_factors_cut_the_bytes_and_stay_close() -> None:
    m = _low_rank(64, 64, 2, 3).ravel()
    f32, f8 = PowerSGD([(64, 64)], rank=2), PowerSGD([(64, 64)], rank=2, bits=8)
    p32, p8 = f32.encode(m, np.random.default_rng(0)), f8.encode(m, np.random.default_rng(0))
    assert p8.nbytes < p32.nbytes / 3.5
    assert _rel_err(f8, m) < 0.02
    assert set(p8.arrays) == {f"{p}.{k}" for p in ("p", "q", "rest") for k in ("scale", "codes")}


def test_flags_and_registry() -> None:
    c = make_compressor("powersgd", rank=3, factor_bits=8, shapes=[(8, 8)])
    assert isinstance(c, PowerSGD) and (c.rank, c.bits) == (3, 8)
    assert not c.summable and not c.unbiased
    with pytest.raises(ValueError, match="needs the model's tensor shapes"):
        make_compressor("powersgd")
    with pytest.raises(ValueError, match="rank must be an int in >= 1"):
        PowerSGD([(8, 8)], rank=0)
    st = stage(CompressionConfig(up="powersgd"), "up", [(8, 8)])
    assert st.error_feedback  # auto: on, PowerSGD is biased


def test_hostile_payloads_are_refused() -> None:
    c = PowerSGD(POLICY, rank=2)
    good = c.encode(np.ones(c.n, np.float32), np.random.default_rng(0))
    for key, bad in (("p", np.ones(3, np.float32)), ("q", np.ones(c.q_len, np.int32)),
                     ("rest", np.ones(c.rest_len + 1, np.float32))):
        with pytest.raises(ValueError, match=f"powersgd payload's '{key}' must hold"):
            c.decode(Compressed("powersgd", {**good.arrays, key: bad}, c.n))
    with pytest.raises(ValueError, match="lacks arrays"):
        c.decode(Compressed("powersgd", {"p": good.arrays["p"]}, c.n))
    with pytest.raises(ValueError, match="decodes to 5 values"):
        c.decode(Compressed("powersgd", good.arrays, 5))
    with pytest.raises(ValueError, match="the model's tensors hold"):
        c.encode(np.ones(c.n + 1, np.float32), np.random.default_rng(0))


def test_node_encode_keeps_the_warm_start_and_the_residual() -> None:
    st = stage(CompressionConfig(up="powersgd", rank=1), "up", POLICY)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(st.compressor.n).astype(np.float32) for _ in range(4)]
    held: dict[str, np.ndarray] = {}
    sent = np.zeros_like(xs[0])
    for i, x in enumerate(xs):
        c, held = node_encode(x, st, np.random.default_rng(i), held)
        assert set(held) == {RESIDUAL_KEY, WARM_KEY}
        assert held[WARM_KEY].shape == (st.compressor.q_len,)  # type: ignore[attr-defined]
        sent += st.compressor.decode(c)
    # error feedback: what was sent plus what is still owed is everything
    np.testing.assert_allclose(sent + held[RESIDUAL_KEY], np.sum(xs, axis=0), atol=1e-4)
    # the warm start is used: the same update from another start encodes differently
    c_warm, _ = node_encode(xs[0], st, np.random.default_rng(9), {WARM_KEY: held[WARM_KEY]})
    c_cold, _ = node_encode(xs[0], st, np.random.default_rng(9), {})
    assert not np.array_equal(c_warm.arrays["p"], c_cold.arrays["p"])
