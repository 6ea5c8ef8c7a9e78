"""Error feedback (EF-SGD, Karimireddy et al. 2019): residual carries what top-k drops, bounded."""

from __future__ import annotations

import numpy as np
import pytest

from fedrl.compression import ErrorFeedback, make_compressor


def _updates(t: int, n: int = 200, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mu = rng.standard_normal(n)
    return (mu + rng.standard_normal((t, n))).astype(np.float32)


def test_topk_with_error_feedback_tracks_the_sum() -> None:
    n, t, frac = 200, 300, 0.05
    comp = make_compressor("topk", fraction=frac)
    xs = _updates(t, n)
    ef = ErrorFeedback()
    rng = np.random.default_rng(0)
    dec_sum = np.zeros(n)
    no_ef_sum = np.zeros(n)
    true_sum = np.zeros(n)
    delta = frac  # top-k is a delta-contraction: ||C(v) - v||^2 <= (1 - k/n) ||v||^2
    g = float(np.max(np.linalg.norm(xs, axis=1)))
    q = np.sqrt(1 - delta)
    bound = q / (1 - q) * g  # ||e_{t+1}|| <= q (||e_t|| + ||x_t||)  =>  sup ||e|| <= q G / (1 - q)
    rel = []
    for i, x in enumerate(xs):
        c = ef.compress(x, comp, rng)
        dec_sum += comp.decode(c)
        no_ef_sum += comp.decode(comp.encode(x, rng))
        true_sum += x
        assert ef.residual is not None
        assert np.linalg.norm(ef.residual) <= bound * (1 + 1e-5)
        # invariant: sent + residual == true (float32 rounding only)
        np.testing.assert_allclose(dec_sum + ef.residual, true_sum, atol=1e-3 * (i + 1))
        rel.append(np.linalg.norm(dec_sum - true_sum) / np.linalg.norm(true_sum))
    assert rel[-1] < rel[19] / 5  # error relative to the sum shrinks as rounds accumulate (~1/T)
    assert rel[-1] < 0.1
    no_ef_rel = np.linalg.norm(no_ef_sum - true_sum) / np.linalg.norm(true_sum)
    assert rel[-1] < no_ef_rel / 5


def test_state_dict_round_trip_reproduces_next_output() -> None:
    comp = make_compressor("topk", fraction=0.1)
    xs = _updates(6)
    ef = ErrorFeedback()
    assert ef.state_dict() == {}
    for x in xs[:5]:
        ef.compress(x, comp, np.random.default_rng(0))
    state = ef.state_dict()
    assert set(state) == {"residual"} and state["residual"].dtype == np.float32
    restored = ErrorFeedback()
    restored.load_state_dict({k: v.copy() for k, v in state.items()})
    a = ef.compress(xs[5], comp, np.random.default_rng(7))
    b = restored.compress(xs[5], comp, np.random.default_rng(7))
    for k in a.arrays:
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
    assert ef.residual is not None and restored.residual is not None
    np.testing.assert_array_equal(ef.residual, restored.residual)


def test_error_feedback_rejects_mismatch_and_bad_state() -> None:
    ef = ErrorFeedback()
    comp = make_compressor("sign")
    ef.compress(np.ones(4, np.float32), comp, np.random.default_rng(0))
    with pytest.raises(ValueError, match="length 5"):
        ef.compress(np.ones(5, np.float32), comp, np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown error-feedback state keys"):
        ef.load_state_dict({"resid": np.zeros(4, np.float32)})
    with pytest.raises(ValueError, match="1-D"):
        ef.load_state_dict({"residual": np.zeros((2, 2), np.float32)})
    ef.reset()
    assert ef.residual is None
