"""The one-run audit's statistics (Steinke, Nasr and Jagielski 2023) on exact cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrl.privacy.audit import CanaryAudit, audit_scores, epsilon_lower_bound, p_value


def test_p_value_without_delta_is_the_binomial_tail() -> None:
    # q = e^eps / (1 + e^eps) = 3/4 at eps = ln 3; P[Bin(4, 3/4) >= 4] = (3/4)^4.
    assert p_value(10, 4, 4, math.log(3), 0.0) == pytest.approx(0.31640625, rel=1e-12)
    # P[Bin(4, 3/4) >= 3] = 4 (3/4)^3 (1/4) + (3/4)^4
    assert p_value(10, 4, 3, math.log(3), 0.0) == pytest.approx(4 * 0.75**3 * 0.25 + 0.75**4, rel=1e-12)


def test_p_value_adds_the_delta_term_of_theorem_5_2() -> None:
    # r = 2, v = 2, eps = 0: beta = 1/4; alpha = max(P[Bin=1] / 1, (P[Bin=1] + P[Bin=0]) / 2) = max(1/2, 3/8).
    assert p_value(10, 2, 2, 0.0, 0.01) == pytest.approx(0.25 + 2 * 10 * 0.01 * 0.5, rel=1e-12)


def test_all_guesses_right_gives_the_closed_form_bound() -> None:
    # delta = 0 and v = r: the bound solves q^r = level, so eps = log(q / (1 - q)) with q = level^(1/r).
    q = 0.05 ** (1 / 100)
    assert epsilon_lower_bound(1000, 100, 100, 0.0) == pytest.approx(math.log(q / (1 - q)), abs=2e-4)


def test_chance_level_guessing_certifies_nothing() -> None:
    assert epsilon_lower_bound(1000, 200, 100, 1e-5) == 0.0
    assert epsilon_lower_bound(1000, 200, 60, 1e-5) == 0.0


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="v <= r <= m"):
        p_value(10, 20, 5, 1.0, 0.0)


def test_separated_scores_are_flagged_and_overlapping_ones_are_not() -> None:
    rng = np.random.default_rng(0)
    inc = rng.random(1000) < 0.5
    sep = audit_scores(rng.standard_normal(1000) + 20.0 * inc, inc, 10, 1e-5, claimed=2.0)
    assert sep.flagged and sep.correct == sep.guesses and sep.epsilon_lower == pytest.approx(sep.power)
    # A mu-GDP mechanism with mu = 0.5 is (eps, 1e-5)-DP for eps about 2; the audit must stay below.
    weak = audit_scores(rng.standard_normal(1000) + 0.5 * inc, inc, 10, 1e-5, claimed=2.0)
    assert not weak.flagged and weak.epsilon_lower < 2.0


def test_canaries_score_their_own_direction_and_survive_a_checkpoint() -> None:
    a = CanaryAudit(50, 4000, secret=7)
    total = a.inject(1, clip=0.5)  # no other updates, no noise
    assert np.linalg.norm(total) == pytest.approx(0.5 * math.sqrt(a.included.sum()), rel=0.15)
    a.observe(total, 0.5)
    b = CanaryAudit.from_arrays(a.to_arrays(), 4000)
    np.testing.assert_array_equal(b.included, a.included)
    np.testing.assert_array_equal(b.scores, a.scores)
    assert b.rounds == 1 and b.secret == 7
    # Each included canary scores about 1 (its own unit direction), the others about 0.
    assert a.scores[a.included].min() > 0.6 and np.abs(a.scores[~a.included]).max() < 0.4
    with pytest.raises(RuntimeError, match="before inject"):
        a.observe(total, 0.5)
