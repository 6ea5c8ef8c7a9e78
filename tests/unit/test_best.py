"""fedrl.runfolder.best: the order of evaluations, the checkpoint entry, last_evals_min_return, the table line."""

from __future__ import annotations

import math

import pytest

from fedrl.errors import RunFileError
from fedrl.runfolder.best import Best, improves, last_evals_min, score, table_line


def test_score_is_worst_then_mean() -> None:
    assert score([3.0, 1.0, 8.0]) == (1.0, 4.0)


@pytest.mark.parametrize(("returns", "best", "better"), [
    ([1.0, 2.0], None, True),  # the first evaluation is the best so far
    ([5.0, 9.0], Best(1, 5.0, 6.0), True),  # same worst variant, better mean
    ([6.0, 6.0], Best(1, 5.0, 9.0), True),  # better worst variant, worse mean
    ([5.0, 7.0], Best(1, 5.0, 6.0), False),  # equal: the earlier round stays
    ([4.0, 500.0], Best(1, 5.0, 6.0), False),  # a far better mean does not make up for the worst variant
    ([math.nan, 500.0], None, False),  # a non-finite return never counts
    ([math.inf, 500.0], None, False),
    ([], None, False),
])
def test_improves_by_worst_variant_then_mean_strictly(returns: list[float], best: Best | None, better: bool) -> None:
    assert improves(returns, best) is better


def test_best_round_trips_through_checkpoint_metadata() -> None:
    b = Best.of(7, [2.0, 4.0])
    assert b == Best(7, 2.0, 3.0)
    assert b.to_meta() == {"round": 7, "min_return": 2.0, "mean_return": 3.0}
    assert Best.from_meta(b.to_meta(), "ck", 7) == b
    assert Best.from_meta({"round": 7, "min_return": 2, "mean_return": 3}, "ck", 9) == b  # JSON ints
    assert Best.from_meta(None, "ck", 7) is None


@pytest.mark.parametrize("meta", [
    {"round": 8, "min_return": 2.0, "mean_return": 3.0},  # after the checkpoint
    {"round": -1, "min_return": 2.0, "mean_return": 3.0},
    {"round": True, "min_return": 2.0, "mean_return": 3.0},
    {"round": 7.0, "min_return": 2.0, "mean_return": 3.0},
    {"round": 7, "min_return": None, "mean_return": 3.0},
    {"round": 7, "min_return": 2.0, "mean_return": math.inf},
    {"round": 7, "min_return": 4.0, "mean_return": 3.0},
    {"round": 7, "min_return": 2.0, "mean_return": 3.0, "extra": 1},
    [7, 2.0, 3.0],
])
def test_a_malformed_best_is_one_error_naming_the_file_and_field(meta: object) -> None:
    with pytest.raises(RunFileError) as err:
        Best.from_meta(meta, "run/checkpoint.npz", 7)
    assert str(err.value).startswith("run/checkpoint.npz: best: is ")
    assert str(err.value).endswith("an object with an integer round in [0, 7] and finite min_return <= mean_return")


def test_last_evals_min_is_the_worst_variant_of_the_last_five_evaluations() -> None:
    evals: list[list[float | None]] = [[0.0, 0.0], [100.0, 7.5], [200.0, 300.0], [150.0, 160.0], [400.0, 401.0],
                                       [500.0, 450.0]]
    assert last_evals_min(evals) == 7.5  # the first evaluation is outside the last five
    assert last_evals_min(evals, k=4) == 150.0
    assert last_evals_min(evals[-1:]) == 450.0
    assert last_evals_min([]) is None
    assert last_evals_min([*evals, [None, 500.0]]) == -math.inf  # a return written as null (non-finite) is the worst


def test_table_line_says_whether_the_final_model_is_the_best() -> None:
    s: dict[str, float | None] = {"rounds_completed": 30, "best_round": 30, "best_eval_min_return": 500.0, "best_eval_mean_return": 500.0,
         "eval_min_return": 500.0}
    assert table_line(s) == "final model = best (round 30)"
    s |= {"best_round": 21, "eval_min_return": 289.0}
    assert table_line(s) == ("best model: round 21, min 500.0 / mean 500.0 (final: min 289.0); "
                             "fedrl export uses best by default")
    s["best_round"] = None
    assert table_line(s) == ("no best model: no evaluation had finite returns; "
                             "fedrl export --which final exports model.npz")
