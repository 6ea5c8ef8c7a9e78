"""``pyproject.toml``'s ``[tool.flwr.app.config]`` table, generated from the one schema.

Flower's SuperLink refuses run-config keys the app does not declare, so every key of
``fedrl.config`` must also sit in ``pyproject.toml`` with its default. Written by hand, that
table drifted from the schema (help texts that differed, one corrupted). So the table is
rendered here from ``DEFAULTS`` and ``HELP``, and a test checks that the file holds exactly
this text:

    python -m fedrl.config.toml            # print the table
    python -m fedrl.config.toml --write    # rewrite it in ./pyproject.toml
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fedrl.config import DEFAULTS, HELP

HEADER = "[tool.flwr.app.config]"


def toml_value(value: Any) -> str:
    """A default as TOML: booleans lowercase, strings as basic strings, numbers as Python prints them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML basic-string escapes
    raise TypeError(f"no TOML form for {value!r}")


def render() -> str:
    """The whole table, header included, one ``"key" = default  # help`` line per key."""
    lines = [HEADER] + [f"{json.dumps(k)} = {toml_value(v)}  # {HELP[k]}" for k, v in DEFAULTS.items()]
    return "\n".join(lines) + "\n"


def table_in(text: str) -> str:
    """The ``[tool.flwr.app.config]`` table of a pyproject text, from its header to the next table
    (blank lines after it excluded). Raises ValueError when the header is missing."""
    start = text.index(HEADER)
    rest = text[start:].splitlines(keepends=True)
    end = next((i for i, line in enumerate(rest[1:], 1) if line.startswith("[")), len(rest))
    return "".join(rest[:end]).rstrip("\n") + "\n"


def rewrite(path: Path) -> bool:
    """Replace the table in ``path`` with ``render()``; True when the file changed."""
    text = path.read_text()
    old = table_in(text)
    new_text = text.replace(old, render(), 1)
    if new_text == text:
        return False
    path.write_text(new_text)
    return True


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        changed = rewrite(Path("pyproject.toml"))
        print("pyproject.toml: rewritten" if changed else "pyproject.toml: already current")
        return 0
    if argv:
        print("usage: python -m fedrl.config.toml [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
