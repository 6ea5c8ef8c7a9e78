"""Nothing outside ``fedrl/server/`` reaches through ``Federation`` into one of its components (issue 42).

Outside the server package a ``Federation`` is used through its own methods and properties
(``fed.plan(...)``, ``fed.count_sent(...)``, ``fed.models``); ``fed.selector.note(...)`` or
``fed.dp.account()`` would make the caller part of the server's protocol. Checked from the source
with ``ast``: every name bound to a ``Federation`` (a parameter or variable annotated with it, or
assigned ``Federation(...)``) must not appear as ``name.<member>.<anything>``, except for the
run's config (``fed.cfg``, plain data).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_MEMBERS = frozenset({"cfg"})


def _is_federation(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation).strip("'\"")
    return text.split(".")[-1] == "Federation" or text.endswith("Federation | None")


def reaches_through(source: str) -> list[str]:
    """``name.member.attr`` uses of names bound to a Federation in ``source`` (``line: expression``)."""
    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _is_federation(node.annotation):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_federation(node.annotation):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                ast.unparse(node.value.func).split(".")[-1] == "Federation":
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and \
                isinstance(node.value.value, ast.Name) and node.value.value.id in names and \
                node.value.attr not in ALLOWED_MEMBERS:
            out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def outside_the_server() -> list[Path]:
    files = [p for p in (ROOT / "fedrl").rglob("*.py") if "server" not in p.relative_to(ROOT / "fedrl").parts[:1]]
    # not hidden folders: a benchmark's Flower home (simulations/results-*/.flwr-home) holds a copy
    # of the whole app, server included
    sims = [p for p in (ROOT / "simulations").rglob("*.py")
            if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    return sorted(files + sims + [ROOT / "server_app.py", ROOT / "client_app.py"])


def test_nothing_outside_the_server_reads_a_component_of_federation() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in outside_the_server()
             if (hits := reaches_through(p.read_text(encoding="utf-8")))}
    assert not found, f"reaches through Federation into a component (add a Federation method): {found}"


def test_the_check_sees_a_reach_through() -> None:
    src = ("def f(fed: Federation, other: int) -> None:\n    fed.selector.note([1], [])\n    fed.plan(1, 2)\n"
           "    fed.cfg.round.timeout_s\n    other.x.y\n"
           "def g() -> None:\n    f2 = Federation(cfg)\n    f2.dp.account()\n")
    assert reaches_through(src) == ["2: fed.selector.note", "8: f2.dp.account"]
