"""Held-out variants (eval.held-out): fedrl.envs.variants.sample_heldout's contract, the fields of
fedrl.server.heldout, and the config key's range."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from fedrl.config import from_run_config
from fedrl.envs.parsing import parse_vary
from fedrl.envs.variants import sample_heldout, sample_variant
from fedrl.errors import ConfigError
from fedrl.experiment import heldout_variants_of, variants_of
from fedrl.seeding import HELDOUT
from fedrl.server.heldout import row_fields, summary_fields

WIDE = "length=uniform(0.1, 1.0); masscart=loguniform(0.5, 1.5); force_mag=linspace(5, 15); masspole=choice(0.05, 0.1, 0.2, 0.4, 0.8)"


def _training(vary: str, nodes: int, seed: int) -> list[dict[str, float]]:
    specs = parse_vary(vary)
    return [sample_variant(specs, i, nodes, seed) for i in range(nodes)]


def _heldout(vary: str, nodes: int, seed: int, count: int) -> list[dict[str, float]]:
    specs = parse_vary(vary)
    training = _training(vary, nodes, seed)
    return [sample_heldout(specs, j, training, seed) for j in range(count)]


@pytest.mark.parametrize("vary", [
    "length=uniform(0.1, 1.0)",
    "masscart=loguniform(0.5, 1.5)",
    "force_mag=linspace(5, 15)",
    "force_mag=linspace(15, 5)",  # descending sweep
    "masspole=choice(0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6)",  # 10 values, 3 nodes: some unused
    WIDE,
])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_every_held_out_variant_differs_from_every_node_in_each_varying_parameter(vary: str, seed: int) -> None:
    training = _training(vary, 3, seed)
    for v in _heldout(vary, 3, seed, 20):
        assert v not in training
        for name in parse_vary(vary):
            assert v[name] not in {t[name] for t in training}, (name, v, training)


def test_held_out_values_stay_in_each_spec_support() -> None:
    specs = parse_vary(WIDE)
    for seed in range(5):
        for v in _heldout(WIDE, 8, seed, 10):
            assert 0.1 <= v["length"] < 1.0
            assert 0.5 <= v["masscart"] <= 1.5
            assert 5.0 <= v["force_mag"] <= 15.0
            assert v["masspole"] in specs["masspole"].args
            assert list(v) == list(specs)  # the order of env.vary


def test_linspace_held_out_values_are_off_the_nodes_grid() -> None:
    grid = set(np.linspace(5.0, 15.0, 8).tolist())
    values = [v["force_mag"] for v in _heldout("force_mag=linspace(5, 15)", 8, 0, 50)]
    assert not grid & set(values)
    assert len(set(values)) == 50  # uniform draws, not a handful of fixed points


def test_fixed_parameters_keep_the_training_value() -> None:
    vary = "length=uniform(0.3, 0.9); masscart=2.0; gravity=linspace(9.8, 9.8); masspole=choice(0.1, 0.1)"
    for v in _heldout(vary, 4, 3, 5):
        assert (v["masscart"], v["gravity"], v["masspole"]) == (2.0, 9.8, 0.1)


def test_golden_value_pins_the_held_out_stream() -> None:
    # the documented derivation: default_rng([seed, HELDOUT, index, attempt, crc32(name)])
    specs = parse_vary("length=uniform(0.1, 0.9)")
    training = _training("length=uniform(0.1, 0.9)", 4, 5)
    rng = np.random.default_rng([5, HELDOUT, 2, 0, zlib.crc32(b"length")])
    assert HELDOUT == 10
    assert sample_heldout(specs, 2, training, 5) == {"length": float(rng.uniform(0.1, 0.9))}


def test_same_seed_same_variants_and_another_seed_other_variants() -> None:
    assert _heldout(WIDE, 8, 3, 6) == _heldout(WIDE, 8, 3, 6)
    a, b = _heldout(WIDE, 8, 3, 6), _heldout(WIDE, 8, 4, 6)
    for name in ("length", "masscart", "force_mag"):  # the continuous ones always move with the seed
        assert all(x[name] != y[name] for x, y in zip(a, b, strict=True))
    assert len({tuple(v.values()) for v in a}) == 6  # distinct indexes, distinct variants


def test_choice_draws_only_values_no_node_has_while_some_remain() -> None:
    vary = "masspole=choice(0.1, 0.2, 0.3, 0.4, 0.5)"
    for seed in range(10):
        used = {t["masspole"] for t in _training(vary, 3, seed)}
        for v in _heldout(vary, 3, seed, 10):
            assert v["masspole"] in {0.1, 0.2, 0.3, 0.4, 0.5} - used


def test_choice_whose_values_are_all_used_holds_out_an_unseen_combination() -> None:
    # every value of a and of b is some node's, but (2, 2) is nobody's: it is the only held-out variant
    specs = parse_vary("a=choice(1, 2); b=choice(1, 2)")
    training = [{"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 2.0}, {"a": 2.0, "b": 1.0}]
    assert [sample_heldout(specs, j, training, 0) for j in range(4)] == [{"a": 2.0, "b": 2.0}] * 4


def test_choice_with_every_combination_trained_is_refused() -> None:
    specs = parse_vary("a=choice(1, 2); b=choice(1, 2)")
    training = [{"a": x, "b": y} for x in (1.0, 2.0) for y in (1.0, 2.0)]
    with pytest.raises(ConfigError, match=r"^eval\.held-out: every combination of env\.vary's choice values \(a, b\)"):
        sample_heldout(specs, 0, training, 0)


def test_choice_of_one_used_value_beside_a_continuous_parameter_is_held_out_by_the_other() -> None:
    specs = parse_vary("a=choice(1, 2); length=uniform(0.1, 0.9)")
    training = _training("a=choice(1, 2); length=uniform(0.1, 0.9)", 30, 0)  # 30 nodes use both values of a
    assert {t["a"] for t in training} == {1.0, 2.0}
    v = sample_heldout(specs, 0, training, 0)
    assert v["a"] in (1.0, 2.0) and v["length"] not in {t["length"] for t in training}


@pytest.mark.parametrize("vary", ["length=linspace(0.5, 0.5000000000000001)", "length=uniform(0.5, 0.5000000000000001)",
                                  "length=loguniform(0.5, 0.5000000000000001)"])
def test_an_interval_of_only_nodes_floats_is_refused_not_drawn_forever(vary: str) -> None:
    # two floats wide, and 2 (linspace) or 50 (random) nodes take both: every draw repeats a node's value
    training = _training(vary, 2 if "linspace" in vary else 50, 0)
    assert {t["length"] for t in training} == {0.5, 0.5000000000000001}
    with pytest.raises(ConfigError, match=r"^eval\.held-out: env\.vary's length=.* is too narrow to draw a value no node"):
        sample_heldout(parse_vary(vary), 0, training, 0)


@pytest.mark.parametrize("vary", ["", "length=0.5", "length=0.5; masscart=linspace(1, 1)", "masspole=choice(0.1, 0.1)"])
def test_nothing_varies_so_nothing_can_be_held_out(vary: str) -> None:
    with pytest.raises(ConfigError, match=r"^eval\.held-out: env\.vary has no parameter that varies"):
        sample_heldout(parse_vary(vary), 0, _training(vary, 3, 0), 0)


def test_heldout_variants_of_the_config() -> None:
    cfg = from_run_config({"nodes.count": 4, "eval.held-out": 3, "env.vary": "length=uniform(0.2, 0.8)", "seed": 2})
    training = variants_of(cfg)
    assert heldout_variants_of(cfg, training) == _heldout("length=uniform(0.2, 0.8)", 4, 2, 3)
    off = from_run_config({"nodes.count": 4, "env.vary": "length=0.5"})
    assert off.eval.held_out == 0
    assert heldout_variants_of(off, variants_of(off)) == []  # 0 is off: not refused even when nothing varies


@pytest.mark.parametrize("value", [-1, 1001])
def test_config_refuses_held_out_counts_out_of_range_naming_the_key(value: int) -> None:
    with pytest.raises(ConfigError, match=r"^eval\.held-out: .*must be in \[0, 1000\] \(0: off\)"):
        from_run_config({"eval.held-out": value})


def test_row_fields_are_exact_and_empty_without_held_out_returns() -> None:
    assert row_fields([100.0, 50.0, 30.0]) == {"heldout_returns": [100.0, 50.0, 30.0], "heldout_mean_return": 60.0,
                                               "heldout_min_return": 30.0}
    assert row_fields([]) == {}


def _never() -> list[float]:
    raise AssertionError("must not evaluate")


def test_summary_fields_take_the_final_rounds_row() -> None:
    variants = [{"length": 0.25}, {"length": 0.75}]
    rows = [{"round": 1, **row_fields([1.0, 2.0])}, {"round": 2}, {"round": 3, **row_fields([10.0, 30.0])}]
    assert summary_fields(variants, rows, 3, _never) == {
        "heldout": [{"index": 0, "params": {"length": 0.25}, "mean_return": 10.0},
                    {"index": 1, "params": {"length": 0.75}, "mean_return": 30.0}],
        "heldout_mean_return": 20.0, "heldout_min_return": 10.0,
    }
    assert summary_fields([], rows, 3, _never) == {}


@pytest.mark.parametrize("rows", [
    [{"round": 1, **row_fields([1.0, 2.0])}, {"round": 2}],  # the final round did not evaluate
    [{"round": 2, **row_fields([1.0, 2.0, 3.0])}],  # another count (eval.held-out changed on resume)
])
def test_summary_fields_evaluate_the_final_model_when_no_row_fits(rows: list[dict[str, object]]) -> None:
    out = summary_fields([{"length": 0.25}, {"length": 0.75}], rows, 2, lambda: [4.0, -2.0])
    assert [h["mean_return"] for h in out["heldout"]] == [4.0, -2.0]
    assert (out["heldout_mean_return"], out["heldout_min_return"]) == (1.0, -2.0)
    assert math.isfinite(out["heldout_mean_return"])


def test_row_fields_of_returns_read_back_with_a_null_do_not_fail() -> None:
    import math

    from fedrl.server.heldout import row_fields, summary_fields
    assert row_fields([10.0, 30.0]) == {"heldout_returns": [10.0, 30.0], "heldout_mean_return": 20.0,
                                        "heldout_min_return": 10.0}
    out = row_fields([10.0, None])  # type: ignore[list-item]
    assert math.isnan(out["heldout_mean_return"]) and math.isnan(out["heldout_min_return"])
    rows = [{"round": 3, "heldout_returns": [5.0, None]}]
    summary = summary_fields([{"length": 0.3}, {"length": 0.9}], rows, 3, lambda: [1.0, 2.0])
    assert [h["mean_return"] for h in summary["heldout"]] == [5.0, None]
    assert math.isnan(summary["heldout_min_return"])
