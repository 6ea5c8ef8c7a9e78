"""Unit tests for fedrl.envs.spec (parsing, variants): the env.vary / env.kwargs mini-language and sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrl.envs.parsing import ParamSpec, parse_kwargs, parse_vary
from fedrl.envs.variants import sample_variant
from fedrl.errors import ConfigError

# --- parse_vary ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", ";", " ; ;  "])
def test_parse_vary_empty_gives_no_params(text: str) -> None:
    assert parse_vary(text) == {}


def test_parse_vary_every_kind_in_written_order() -> None:
    specs = parse_vary(
        " length = uniform(0.1, 0.9) ;masscart=linspace(0.5,2.0); gravity=-1e-3;"
        "masspole=loguniform( 0.01 , 1 ); force_mag=choice(5, 10, 15.5) ;"
    )
    assert specs == {
        "length": ParamSpec("uniform", (0.1, 0.9)),
        "masscart": ParamSpec("linspace", (0.5, 2.0)),
        "gravity": ParamSpec("const", (-1e-3,)),
        "masspole": ParamSpec("loguniform", (0.01, 1.0)),
        "force_mag": ParamSpec("choice", (5.0, 10.0, 15.5)),
    }
    assert list(specs) == ["length", "masscart", "gravity", "masspole", "force_mag"]


def test_linspace_may_descend_and_choice_may_have_one_value() -> None:
    assert parse_vary("x=linspace(2, 1); y=choice(3)") == {
        "x": ParamSpec("linspace", (2.0, 1.0)),
        "y": ParamSpec("choice", (3.0,)),
    }


def test_unknown_distribution_message_is_exact() -> None:
    with pytest.raises(ConfigError) as info:
        parse_vary("length=unifrom(0.1, 0.9)")
    assert str(info.value) == (
        "env.vary: 'length=unifrom(0.1, 0.9)': unknown distribution 'unifrom'; allowed: "
        "a number, uniform(a,b), loguniform(a,b), linspace(a,b), choice(a,b,...)"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("length 0.5", "missing '='"),
        ("length=", "missing value"),
        ("=0.5", "bad parameter name ''"),
        ("2x=0.5", "bad parameter name '2x'"),
        ("length=0.5; length=0.6", "duplicate parameter 'length'"),
        ("length=abc", "cannot read spec 'abc'"),
        ("length=0.5.1", "cannot read spec"),
        ("length=nan", "cannot read spec 'nan'"),
        ("length=inf", "cannot read spec 'inf'"),
        ("length=1e999", "not finite"),
        ("length=__import__('os')", "unknown distribution '__import__'"),
        ("length=uniform(0.1, x)", "bad number 'x'"),
        ("length=uniform(0.1, 1e999)", "not finite"),
        ("length=choice(1,,2)", "bad number ''"),
        ("length=uniform(0.1)", "uniform takes exactly 2 arguments, got 1"),
        ("length=uniform(0.1, 0.2, 0.3)", "exactly 2 arguments, got 3"),
        ("length=linspace()", "linspace takes exactly 2 arguments, got 0"),
        ("length=choice()", "choice takes at least 1 argument, got 0"),
        ("length=uniform(0.9, 0.1)", "needs a < b"),
        ("length=uniform(0.5, 0.5)", "needs a < b"),
        ("length=loguniform(0.9, 0.1)", "needs a < b"),
        ("length=loguniform(0, 1)", "needs 0 < a"),
        ("length=loguniform(-1, 1)", "needs 0 < a"),
        ("length=uniform(0.1, 0.9", "cannot read spec"),
    ],
)
def test_malformed_vary_raises_config_error_naming_key(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_vary(text)
    message = str(info.value)
    assert message.startswith("env.vary: ")
    assert fragment in message
    assert "\n" not in message
    assert info.value.key == "env.vary"


def test_custom_key_is_used() -> None:
    with pytest.raises(ConfigError, match=r"^my\.key: "):
        parse_vary("x=bogus(1)", key="my.key")


def test_to_str_examples() -> None:
    assert ParamSpec("const", (0.5,)).to_str() == "0.5"
    assert ParamSpec("uniform", (0.1, 0.9)).to_str() == "uniform(0.1, 0.9)"
    assert ParamSpec("choice", (1.0, 2.0, 3.0)).to_str() == "choice(1.0, 2.0, 3.0)"


_finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["const", "uniform", "loguniform", "linspace", "choice"]),
    values=st.lists(_finite, min_size=2, max_size=5, unique=True),
)
def test_to_str_round_trips(kind: str, values: list[float]) -> None:
    values = sorted(values)
    args: tuple[float, ...]
    if kind == "const":
        args = (values[0],)
    elif kind == "loguniform":
        args = (abs(values[0]) + 1.0, abs(values[0]) + 2.0 + abs(values[1]))
    elif kind == "choice":
        args = tuple(values)
    else:
        args = (values[0], values[1])
    spec = ParamSpec(kind, args)  # type: ignore[arg-type]
    assert parse_vary(f"p={spec.to_str()}") == {"p": spec}


# --- sample_variant -----------------------------------------------------------------------


def test_linspace_gives_evenly_spaced_node_values() -> None:
    specs = parse_vary("masscart=linspace(0.5, 2.0)")
    assert [sample_variant(specs, i, 4, seed=7)["masscart"] for i in range(4)] == [
        0.5,
        1.0,
        1.5,
        2.0,
    ]
    down = parse_vary("x=linspace(1, 0)")
    assert [sample_variant(down, i, 3, seed=0)["x"] for i in range(3)] == [1.0, 0.5, 0.0]


def test_linspace_with_one_node_gives_start() -> None:
    assert sample_variant(parse_vary("x=linspace(0.3, 0.9)"), 0, 1, seed=0) == {"x": 0.3}


def test_constant_is_the_same_for_every_node_and_seed() -> None:
    specs = parse_vary("gravity=9.81")
    values = {sample_variant(specs, i, 5, seed=s)["gravity"] for i in range(5) for s in (0, 1)}
    assert values == {9.81}


def test_values_are_python_floats() -> None:
    specs = parse_vary("a=1; b=uniform(0,1); c=loguniform(1,2); d=linspace(0,1); e=choice(1,2)")
    for value in sample_variant(specs, 1, 3, seed=0).values():
        assert type(value) is float


def test_sampling_is_deterministic_in_seed_and_node() -> None:
    specs = parse_vary("length=uniform(0.1, 0.9); m=loguniform(0.01, 10); c=choice(1, 2, 3)")
    first = sample_variant(specs, 3, 8, seed=42)
    assert sample_variant(dict(specs), 3, 8, seed=42) == first
    assert sample_variant(specs, 4, 8, seed=42)["length"] != first["length"]
    assert sample_variant(specs, 3, 8, seed=43)["length"] != first["length"]
    # num_nodes only matters for linspace
    assert sample_variant(specs, 3, 100, seed=42) == first


def test_golden_value_pins_the_seeding_scheme() -> None:
    # Node i's variant must be the same in every run (DESIGN contract); a change to the
    # seeding scheme would silently change every experiment's variants.
    specs = parse_vary("length=uniform(0.1, 0.9)")
    assert sample_variant(specs, 0, 4, seed=0) == {"length": 0.6575198699824633}
    assert sample_variant(specs, 1, 4, seed=0) == {"length": 0.11505985526113688}


def test_adding_or_reordering_params_leaves_others_unchanged() -> None:
    one = parse_vary("length=uniform(0.1, 0.9)")
    two = parse_vary("masspole=uniform(0.05, 0.5); length=uniform(0.1, 0.9)")
    for node in range(6):
        alone = sample_variant(one, node, 6, seed=5)["length"]
        assert sample_variant(two, node, 6, seed=5)["length"] == alone


def test_choice_picks_only_listed_values_and_all_of_them() -> None:
    specs = parse_vary("c=choice(1, 2.5, 7)")
    picked = {sample_variant(specs, node, 200, seed=0)["c"] for node in range(200)}
    assert picked == {1.0, 2.5, 7.0}


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**63),
    node=st.integers(0, 999),
    a=st.floats(1e-6, 1e3),
    width=st.floats(1e-6, 1e3),
)
def test_uniform_and_loguniform_stay_in_bounds(seed: int, node: int, a: float, width: float) -> None:
    b = a + width
    if not a < b:  # width lost to rounding
        return
    specs = {"u": ParamSpec("uniform", (a, b)), "l": ParamSpec("loguniform", (a, b))}
    values = sample_variant(specs, node, 1000, seed)
    assert a <= values["u"] <= b
    assert a <= values["l"] <= b
    assert math.isfinite(values["u"]) and math.isfinite(values["l"])


def test_loguniform_is_uniform_in_log_space() -> None:
    specs = parse_vary("m=loguniform(0.01, 100)")
    logs = [math.log10(sample_variant(specs, n, 2000, seed=1)["m"]) for n in range(2000)]
    # median of U[-2, 2] is 0; a plain uniform(0.01, 100) would put it near log10(50) = 1.7
    assert abs(float(np.median(logs))) < 0.2


@pytest.mark.parametrize(("node", "num_nodes", "seed"), [(-1, 3, 0), (3, 3, 0), (0, 0, 0), (0, 3, -1)])
def test_bad_node_or_seed_raises(node: int, num_nodes: int, seed: int) -> None:
    with pytest.raises(ValueError):
        sample_variant(parse_vary("x=1"), node, num_nodes, seed)


# --- parse_kwargs ---------------------------------------------------------------------------


def test_parse_kwargs_types() -> None:
    kwargs = parse_kwargs(
        "max_episode_steps=5; sutton_barto_reward=True; flag=false; g=9.81; x=-1e-3;"
        " render_mode='rgb_array'; name=\"a b\"; raw = plain text ;"
    )
    assert kwargs == {
        "max_episode_steps": 5,
        "sutton_barto_reward": True,
        "flag": False,
        "g": 9.81,
        "x": -1e-3,
        "render_mode": "rgb_array",
        "name": "a b",
        "raw": "plain text",
    }
    assert type(kwargs["max_episode_steps"]) is int
    assert type(kwargs["g"]) is float
    assert type(kwargs["flag"]) is bool


def test_parse_kwargs_quoted_literals_stay_strings() -> None:
    assert parse_kwargs("a='5'; b=\"true\"; c=''") == {"a": "5", "b": "true", "c": ""}


def test_parse_kwargs_empty() -> None:
    assert parse_kwargs("") == {}
    assert parse_kwargs(" ; ") == {}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("max_episode_steps", "missing '='"),
        ("g=", "missing value"),
        ("1g=3", "bad parameter name '1g'"),
        ("g=1; g=2", "duplicate argument 'g'"),
    ],
)
def test_malformed_kwargs_raise_config_error_naming_key(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_kwargs(text)
    assert str(info.value).startswith("env.kwargs: ")
    assert fragment in str(info.value)
