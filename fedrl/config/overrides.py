"""``--run-config`` strings checked for what Flower's parser would silently drop or mangle.

Flower 1.42 (``flwr.common.config.parse_config_args``) finds ``key=value`` pairs with
``re.findall`` of ``FLOWER_PAIR`` and hands only the matches to a TOML parser. Whatever the
pattern does not match is dropped without a word: ``num-server-rounds=`` (no value),
``num-server-rounds=5 garbage`` (``garbage``), ``env.vary='length=uniform(0.2, 0.5)`` (an
unclosed quote: the value ends at the space and ``0.5)`` is dropped). TOML then cuts an unquoted
value at ``#`` (a comment). ``check_override`` refuses each of these, naming ``--run-config``
and the offending text, so ``fedrl check`` never says OK to a value Flower would not use.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from fedrl.errors import ConfigError

# Copied from flwr/common/config.py (parse_config_args), Flower 1.42; a test checks it still agrees.
FLOWER_PAIR = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")
KEY = "--run-config"
_FORMAT = "write key=value pairs separated by spaces, strings in quotes (e.g. run-name='x')"


def is_toml_file(overrides: list[str]) -> bool:
    """Whether Flower reads ``overrides`` as the path of one TOML file (it does when there is exactly one
    string and it ends in ``.toml``)."""
    return len(overrides) == 1 and overrides[0].endswith(".toml")


def as_pairs(values: Mapping[str, object]) -> str:
    """One ``--run-config`` string that Flower's parser reads back as exactly ``values``.

    ``flwr run`` takes a TOML file only as its sole ``--run-config``; ``fedrl run`` adds
    ``output-dir``, so it hands a preset's values over as pairs. Strings are quoted (single
    quotes: TOML literal strings, no escapes), booleans lower-case, numbers by ``repr``.

    Raises:
        ConfigError: ``--run-config`` for a string holding both quote characters (no pair can carry it)
            or a value that is not a string, bool, int or finite float.
    """
    out = []
    for key, v in values.items():
        if isinstance(v, bool):
            text = "true" if v else "false"
        elif isinstance(v, int):
            text = str(v)
        elif isinstance(v, float) and math.isfinite(v):
            text = repr(v)
        elif isinstance(v, str) and "\n" in v:
            raise ConfigError(KEY, f"{key}: a line break cannot be passed to flwr run as key=value")
        elif isinstance(v, str) and "'" not in v:
            text = f"'{v}'"
        elif isinstance(v, str) and '"' not in v and "\\" not in v:
            text = f'"{v}"'
        else:
            raise ConfigError(KEY, f"{key} = {v!r} cannot be passed to flwr run as key=value; use a string without "
                                   "both quote characters, a bool, an int or a finite number")
        out.append(f"{key}={text}")
    return " ".join(out)


def check_override(text: str) -> None:
    """Raise ``ConfigError('--run-config', ...)`` unless every non-blank character of ``text`` is part of
    a ``key=value`` pair that Flower keeps, pairs are separated by whitespace, and no unquoted value
    holds a ``#`` (which TOML would read as the start of a comment)."""
    end = 0
    for m in FLOWER_PAIR.finditer(text):
        _check_gap(text[end:m.start()])
        if m.start() == end and end > 0:
            raise ConfigError(KEY, f"{text[:m.end()]!r}: no space before {m.group(0)!r}; {_FORMAT}")
        value = m.group(2)
        if "#" in value and value[0] not in "'\"":
            raise ConfigError(KEY, f"{m.group(0)!r}: an unquoted '#' starts a TOML comment and the rest would be "
                                   "dropped; quote the value")
        if value[0] in "'\"" and (len(value) == 1 or value[-1] != value[0]):
            raise ConfigError(KEY, f"{m.group(0)!r}: unclosed {value[0]} quote; {_FORMAT}")
        end = m.end()
    _check_gap(text[end:])


def _check_gap(gap: str) -> None:
    """Text between two pairs: Flower drops it, so only whitespace may be there."""
    if not gap.strip():
        return
    token = gap.split()[0]
    if "=" not in token:
        why = f"{token!r} is not key=value"
    elif token.endswith("=") and token.count("=") == 1:
        why = f"{token!r} has no value"
    else:
        why = f"{token!r} cannot be read as key=value"
    raise ConfigError(KEY, f"{why}, and Flower would drop it without a word; {_FORMAT}")
