"""Parse the ``env.vary`` and ``env.kwargs`` run-config strings (the table of specs: :mod:`fedrl.envs.spec`).

Both keys use the form ``"name=value; name=value"`` (``;``-separated, whitespace tolerant,
empty items and a trailing ``;`` ignored). ``env.vary`` values become :class:`ParamSpec` objects,
``env.kwargs`` values keyword arguments for ``gym.make``.

Nothing here evaluates Python: specs are matched by regular expressions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, cast

from fedrl.errors import ConfigError

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
