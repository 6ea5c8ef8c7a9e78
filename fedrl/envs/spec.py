"""Parse the ``env.vary`` and ``env.kwargs`` run-config strings and sample node variants.

Both keys use the form ``"name=value; name=value"`` (``;``-separated, whitespace tolerant,
empty items and a trailing ``;`` ignored) because Flower only accepts declared scalar
run-config keys, so an open-ended group must travel as one string.

``env.vary`` values are *specs*: how one physical parameter differs across the N nodes.

============================  =====================================================
spec                          node ``i`` of ``N`` gets
============================  =====================================================
``0.5``                       0.5 (every node)
``uniform(a, b)``             a draw from U[a, b), ``a < b``
``loguniform(a, b)``          exp of a draw from U[log a, log b), ``0 < a < b``
``linspace(a, b)``            ``np.linspace(a, b, N)[i]`` (``a`` when ``N == 1``)
``choice(a, b, ...)``         one of the listed values, uniformly
============================  =====================================================

``sample_heldout`` draws *held-out* variants from the same specs, which no node trains on
(``eval.held-out``); its docstring gives the contract.

Nothing here evaluates Python: specs are matched by regular expressions.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

from fedrl.errors import ConfigError
from fedrl.seeding import HELDOUT

SpecKind = Literal["const", "uniform", "loguniform", "linspace", "choice"]

ALLOWED_SPECS = "a number, uniform(a,b), loguniform(a,b), linspace(a,b), choice(a,b,...)"

# A finite decimal literal. Deliberately stricter than float(): float() also accepts
# "nan", "inf", "1_000" and " 1 ", none of which is a sensible physical parameter.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_INT = re.compile(r"[+-]?\d+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)", re.DOTALL)

# Number of arguments each distribution takes: (min, max), max None = unbounded.
_ARITY: dict[str, tuple[int, int | None]] = {
    "uniform": (2, 2),
    "loguniform": (2, 2),
    "linspace": (2, 2),
    "choice": (1, None),
}


@dataclass(frozen=True)
class ParamSpec:
    """How one parameter varies across nodes.

    ``args`` holds the value for ``const`` (one element), ``(a, b)`` for ``uniform``,
    ``loguniform`` and ``linspace``, and the candidate values for ``choice``.
    Instances built by :func:`parse_vary` are validated; ``to_str`` round-trips through it.
    """

    kind: SpecKind
    args: tuple[float, ...]

    def to_str(self) -> str:
        """The spec in ``env.vary`` syntax, e.g. ``"uniform(0.1, 0.9)"`` or ``"0.5"``."""
        if self.kind == "const":
            return repr(self.args[0])
        return f"{self.kind}({', '.join(repr(a) for a in self.args)})"

    def bounds(self) -> tuple[float, float]:
        """The smallest and largest value any node can receive (for range checks)."""
        return min(self.args), max(self.args)


def _split_items(text: str) -> list[str]:
    """Non-empty, stripped ``;``-separated items."""
    return [item.strip() for item in text.split(";") if item.strip()]


def _split_pair(item: str, key: str, example: str) -> tuple[str, str]:
    """Split ``name=value`` into stripped parts, checking the name is an identifier."""
    name, eq, value = item.partition("=")
    name, value = name.strip(), value.strip()
    if not eq:
        raise ConfigError(key, f"'{item}': missing '='; expected name=value, e.g. '{example}'")
    if not _NAME.fullmatch(name):
        raise ConfigError(
            key,
            f"'{item}': bad parameter name '{name}'; "
            "allowed: letters, digits and '_', not starting with a digit",
        )
    if not value:
        raise ConfigError(key, f"'{item}': missing value after '='; expected e.g. '{example}'")
    return name, value


def _number(text: str, item: str, key: str) -> float:
    """Parse a finite decimal literal or raise a ConfigError that names ``item``."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        raise ConfigError(
            key, f"'{item}': bad number '{text}'; allowed: decimal literals such as 0.5 or -1e-3"
        )
    value = float(text)
    if not math.isfinite(value):  # e.g. "1e999" overflows to inf
        raise ConfigError(key, f"'{item}': number '{text}' is not finite")
    return value


def _parse_spec(text: str, item: str, key: str) -> ParamSpec:
    """Parse the right-hand side of one ``env.vary`` item."""
    if _NUMBER.fullmatch(text):
        return ParamSpec("const", (_number(text, item, key),))
    call = _CALL.fullmatch(text)
    if call is None:
        raise ConfigError(key, f"'{item}': cannot read spec '{text}'; allowed: {ALLOWED_SPECS}")
    kind, body = call.group(1), call.group(2)
    if kind not in _ARITY:
        raise ConfigError(key, f"'{item}': unknown distribution '{kind}'; allowed: {ALLOWED_SPECS}")
    parts = body.split(",")
    if len(parts) == 1 and not parts[0].strip():
        parts = []
    args = tuple(_number(p, item, key) for p in parts)
    low, high = _ARITY[kind]
    if len(args) < low or (high is not None and len(args) > high):
        wanted = f"exactly {low}" if low == high else f"at least {low}"
        raise ConfigError(
            key,
            f"'{item}': {kind} takes {wanted} argument{'s' if low != 1 else ''}, "
            f"got {len(args)}; allowed: {ALLOWED_SPECS}",
        )
    if kind in ("uniform", "loguniform") and not args[0] < args[1]:
        raise ConfigError(key, f"'{item}': {kind}(a, b) needs a < b, got a={args[0]!r}, b={args[1]!r}")
    if kind == "loguniform" and not args[0] > 0:
        raise ConfigError(key, f"'{item}': loguniform(a, b) needs 0 < a, got a={args[0]!r}")
    # linspace(a, b) with a >= b is allowed on purpose: a descending sweep is meaningful.
    return ParamSpec(cast(SpecKind, kind), args)  # kind was checked against _ARITY


def parse_vary(text: str, key: str = "env.vary") -> dict[str, ParamSpec]:
    """Parse ``"param=spec; param=spec"`` into ``{param: ParamSpec}`` in the order written.

    The empty string gives ``{}``. Raises :class:`ConfigError` (``str`` starts with ``key``)
    naming the offending item, what is wrong and what is allowed: missing ``=``, bad name,
    duplicate parameter, unknown distribution, bad number, wrong argument count, ``a >= b``
    for ``uniform``/``loguniform``, ``a <= 0`` for ``loguniform``. Parameter names are not
    checked against an environment here; see :func:`fedrl.envs.families.check_params`.
    """
    specs: dict[str, ParamSpec] = {}
    for item in _split_items(text):
        name, value = _split_pair(item, key, "length=uniform(0.1, 0.9)")
        if name in specs:
            raise ConfigError(key, f"'{item}': duplicate parameter '{name}'; give each parameter once")
        specs[name] = _parse_spec(value, item, key)
    return specs


def sample_variant(
    specs: dict[str, ParamSpec], node: int, num_nodes: int, seed: int
) -> dict[str, float]:
    """Node ``node``'s parameter values (python floats), in the order of ``specs``.

    Deterministic in ``(seed, node, param name)`` only: each parameter draws from its own
    generator ``default_rng([seed, node, crc32(name)])``, so the result is the same in every
    process, engine and call order, and adding or removing another parameter does not change
    this one's value. ``linspace`` also depends on ``num_nodes``. Requires ``seed >= 0``
    (numpy seed sequences take non-negative integers) and ``0 <= node < num_nodes``.
    """
    if seed < 0:
        raise ValueError(f"seed must be >= 0 to seed numpy's SeedSequence, got {seed}")
    if not 0 <= node < num_nodes:
        raise ValueError(f"node must be in [0, {num_nodes}), got {node}")
    return {name: _sample_one(name, spec, node, num_nodes, seed) for name, spec in specs.items()}


def _sample_one(name: str, spec: ParamSpec, node: int, num_nodes: int, seed: int) -> float:
    if spec.kind == "const":
        return float(spec.args[0])
    if spec.kind == "linspace":
        return float(np.linspace(spec.args[0], spec.args[1], num_nodes)[node])
    # crc32, not hash(): str hashes are salted per process (PYTHONHASHSEED).
    rng = np.random.default_rng([seed, node, zlib.crc32(name.encode("utf-8"))])
    if spec.kind == "uniform":
        return float(rng.uniform(spec.args[0], spec.args[1]))
    if spec.kind == "loguniform":
        a, b = spec.args
        value = math.exp(rng.uniform(math.log(a), math.log(b)))
        # exp(log(b)) can round one ulp past b; keep the documented support.
        return float(min(max(value, a), b))
    return float(spec.args[int(rng.integers(len(spec.args)))])


def varies(spec: ParamSpec) -> bool:
    """Whether nodes can get different values: not a constant, ``linspace(a, a)`` or ``choice(a, a)``."""
    return spec.kind != "const" and len(set(spec.args)) > 1


# A held-out variant equal to a training one is drawn again (only possible when every varying
# parameter is a choice whose values all belong to some node); past this many attempts the
# uncovered combinations are too rare to find by chance. With at most 10,000 nodes and at least
# one uncovered combination, 10^6 attempts all fail with probability below e^-100.
_MAX_ATTEMPTS = 1_000_000


def sample_heldout(
    specs: dict[str, ParamSpec],
    index: int,
    training: Sequence[dict[str, float]],
    seed: int,
    key: str = "eval.held-out",
) -> dict[str, float]:
    """Held-out variant ``index``: drawn from the same ``specs`` as ``training`` (every node's
    variant), on a stream of its own, and equal to none of them.

    Per parameter, in the order of ``specs``:

    - one that does not vary (a number, ``linspace(a, a)``, ``choice(a, a)``) keeps its value:
      fixed parameters stay fixed, only varying ones are redrawn;
    - ``uniform`` and ``loguniform``: a draw from the same distribution;
    - ``linspace(a, b)``: a uniform draw over ``[min(a, b), max(a, b)]``, between and around the
      nodes' grid points;
    - ``choice``: uniformly one of the listed values that no node has, or, when every listed
      value is some node's, one of all the listed values.

    A continuous draw equal to some node's value of that parameter is drawn again, so a variant
    with a varying continuous parameter (or a choice with an unused value) differs from every node
    in that parameter. The variant as a whole always differs from every training variant: one
    equal to a training variant (all varying parameters are choices whose values are all used,
    and the combination is a node's) is drawn again with the next attempt number.

    Each parameter draws from ``default_rng([seed, HELDOUT, index, attempt, crc32(name)])``:
    five words, where node ``i``'s variant uses ``[seed, i, crc32(name)]``, so the two never
    share a stream. The result depends on ``(seed, index, specs, training)`` only: the same in
    every process and call order.

    Raises:
        ConfigError: naming ``key`` when no variant can be held out: no parameter varies, every
            varying parameter is a choice and every combination of their values is a node's, or a
            continuous interval is so narrow (a few floats) that its draws keep hitting nodes' values.
    """
    if seed < 0 or index < 0:
        raise ValueError(f"seed and index must be >= 0, got seed={seed}, index={index}")
    moving = [name for name, spec in specs.items() if varies(spec)]
    if not moving:
        raise ConfigError(key, "env.vary has no parameter that varies across nodes, so every variant is a "
                               "training variant and none can be held out; vary a parameter or set it to 0")
    seen = {tuple(v[name] for name in moving) for v in training}
    used = {name: {v[name] for v in training} for name in moving}
    finite = [s for s in specs.values() if varies(s) and s.kind == "choice"]
    if len(finite) == len(moving) and math.prod(len(set(s.args)) for s in finite) <= len(seen):
        raise ConfigError(key, f"every combination of env.vary's choice values ({', '.join(moving)}) is some "
                               "node's variant, so none can be held out; add values, vary another parameter "
                               "or set it to 0")
    for attempt in range(_MAX_ATTEMPTS):
        variant = {
            name: _heldout_one(name, spec, used.get(name, set()), seed, index, attempt, key) if varies(spec)
            else float(spec.args[0])
            for name, spec in specs.items()
        }
        if tuple(variant[name] for name in moving) not in seen:
            return variant
    raise RuntimeError(f"no held-out variant found in {_MAX_ATTEMPTS} attempts")  # see _MAX_ATTEMPTS


# A continuous draw equal to a node's value is drawn again; an interval so narrow that this many
# draws in a row all hit nodes' values holds (almost) no float that is not one:
# linspace(0.5, 0.5000000000000001) has two, both nodes'.
_MAX_DRAWS = 10_000


def _heldout_one(name: str, spec: ParamSpec, used: set[float], seed: int, index: int, attempt: int,
                 key: str) -> float:
    rng = np.random.default_rng([seed, HELDOUT, index, attempt, zlib.crc32(name.encode("utf-8"))])
    if spec.kind == "choice":
        values = sorted(set(spec.args))
        unused = [v for v in values if v not in used]
        pool = unused or values
        return float(pool[int(rng.integers(len(pool)))])
    a, b = min(spec.args), max(spec.args)
    for _ in range(_MAX_DRAWS):  # a repeat has probability ~0 per draw unless the interval is a few floats wide
        if spec.kind == "loguniform":
            value = min(max(math.exp(rng.uniform(math.log(a), math.log(b))), a), b)
        else:  # uniform, and linspace's interval
            value = float(rng.uniform(a, b))
        if value not in used:
            return float(value)
    raise ConfigError(key, f"env.vary's {name}={spec.to_str()} is too narrow to draw a value no node has, "
                           "so no variant can be held out; widen it or set it to 0")


def parse_kwargs(text: str, key: str = "env.kwargs") -> dict[str, bool | int | float | str]:
    """Parse ``"name=value; ..."`` into keyword arguments for ``gym.make``.

    Values: ``true``/``false`` (any case) -> bool, integer literals -> int, decimal
    literals -> float, anything else -> str with one pair of matching surrounding quotes
    (``'...'`` or ``"..."``) removed. A value cannot contain ``;``. Raises
    :class:`ConfigError` naming ``key`` for a missing ``=``, a bad name, an empty value or
    a duplicate name.
    """
    kwargs: dict[str, bool | int | float | str] = {}
    for item in _split_items(text):
        name, value = _split_pair(item, key, "max_episode_steps=200")
        if name in kwargs:
            raise ConfigError(key, f"'{item}': duplicate argument '{name}'; give each argument once")
        kwargs[name] = _kwarg_value(value)
    return kwargs


def _kwarg_value(text: str) -> bool | int | float | str:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if _INT.fullmatch(text):
        return int(text)
    if _NUMBER.fullmatch(text):
        return float(text)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text
