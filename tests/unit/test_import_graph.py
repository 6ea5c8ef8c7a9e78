"""No import cycles among fedrl's modules (issue 14: layering), checked from the source with ``ast``.

Every module of ``fedrl/`` is parsed, never imported. Its imports fall in three kinds:

- ``module``: run when the module is imported (module level, class bodies, ``try`` blocks);
- ``lazy``: inside a function, run on first call (they hide a cycle from the import system, not
  from the design, so they count);
- ``typing``: under ``if TYPE_CHECKING:``, never run; kept apart and not checked for cycles.

Importing ``fedrl.a.b`` runs ``fedrl/a/__init__.py`` first, so an edge to ``fedrl.a.b`` also
counts as an edge to the package ``fedrl.a`` (except from inside ``fedrl.a`` itself, where the
package is already being imported).

Two graphs: modules (no cycle at all), and layers, a subpackage of fedrl or a top-level module
each (``fedrl.rl``, ``fedrl.privacy``, ``fedrl.config``): a layer cycle is two stages that need
each other, such as rl <-> privacy through DP-SGD, even when no two modules do.
"""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

Kind = Literal["module", "lazy", "typing"]
Graph = dict[str, set[str]]

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fedrl"

# Layers (a subpackage of fedrl, or a top-level module) whose runtime imports may close a cycle: none (issue 42
# removed the last six, from the config and the algorithm registry through rl, privacy and wire). Each entry
# would be (layer, layer it imports): why. An entry must still exist and still close a cycle; a cycle through
# any other edge fails. No cycle between modules is allowed at all.
KNOWN_LAYER_CYCLE_EDGES: dict[tuple[str, str], str] = {}

# The bottom of the package (issue 42): shared types and the model's flat layout. Each imports, at run time,
# only fedrl modules named here (its allowed set, fedrl.errors and fedrl.seeding always allowed).
BOTTOM: dict[str, frozenset[str]] = {
    "fedrl.model": frozenset(),
    "fedrl.registry": frozenset(),
    "fedrl.wire": frozenset({"fedrl.model"}),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, kind: Kind = "module") -> Iterator[tuple[Kind, ast.Import | ast.ImportFrom]]:
    """Every import statement below ``tree`` with the kind it has there."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield kind, node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), "typing")
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), kind)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _imports(node, "typing" if kind == "typing" else "lazy")
        else:
            yield from _imports(node, kind)


def _targets(name: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: Iterable[str]) -> set[str]:
    """The fedrl modules an import statement in module ``name`` loads."""
    known = set(known)
    if isinstance(node, ast.Import):
        wanted = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the module's package, up level - 1 more
            here = name.split(".") if is_package else name.split(".")[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join([*here, *([base] if base else [])])
        # `from pkg import sub` loads pkg.sub when it is a module, else it takes a name from pkg.
        wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = set()
    for target in wanted:
        while target and target not in known:  # `import fedrl.a.b.Name`-like spellings: the longest module
            target = target.rpartition(".")[0]
        if not target.startswith("fedrl"):
            continue
        out.add(target)
        parts = target.split(".")
        for i in range(1, len(parts)):  # the packages above the target that the importer is not inside
            package = ".".join(parts[:i])
            if not (name == package or name.startswith(package + ".")):
                out.add(package)
    out.discard(name)
    return out


def import_graph() -> dict[Kind, Graph]:
    """``{kind: {module: modules it imports}}`` over every fedrl module."""
    mods = modules()
    graphs: dict[Kind, Graph] = {k: defaultdict(set) for k in ("module", "lazy", "typing")}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for kind, node in _imports(tree):
            graphs[kind][name] |= _targets(name, path.name == "__init__.py", node, mods)
    return {k: dict(g) for k, g in graphs.items()}


def union(*graphs: Graph) -> Graph:
    out: Graph = defaultdict(set)
    for g in graphs:
        for a, bs in g.items():
            out[a] |= bs
    return dict(out)


def find_cycle(graph: Graph) -> list[str] | None:
    """One cycle as a path ``[a, b, ..., a]``, or ``None`` when the graph is acyclic (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph.get(start, ())))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def without(graph: Graph, edges: Iterable[tuple[str, str]]) -> Graph:
    drop = set(edges)
    return {a: {b for b in bs if (a, b) not in drop} for a, bs in graph.items()}


def reaches(graph: Graph, src: str, dst: str) -> bool:
    seen, todo = {src}, [src]
    while todo:
        for b in graph.get(todo.pop(), ()):
            if b == dst:
                return True
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return False


def test_the_parser_sees_every_kind_of_import() -> None:
    src = ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\nimport fedrl.errors\n"
           "from . import seeding\nif TYPE_CHECKING:\n    from fedrl.config import Config\n"
           "def f():\n    from fedrl.secagg.ring import ring_sum\n")
    known = {"fedrl", "fedrl.errors", "fedrl.seeding", "fedrl.config", "fedrl.secagg", "fedrl.secagg.ring", "fedrl.x"}
    seen: dict[str, set[str]] = defaultdict(set)
    for kind, node in _imports(ast.parse(src)):
        seen[kind] |= _targets("fedrl.x", False, node, known)
    assert seen == {"module": {"fedrl.errors", "fedrl.seeding"}, "typing": {"fedrl.config"},
                    "lazy": {"fedrl.secagg", "fedrl.secagg.ring"}}  # fedrl itself: fedrl.x is inside it
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def layer(module: str) -> str:
    """``fedrl.a`` for any module of subpackage ``fedrl.a``; a top-level module is its own layer."""
    return ".".join(module.split(".")[:2])


def layer_graph(graph: Graph) -> Graph:
    out: Graph = defaultdict(set)
    for a, bs in graph.items():
        for b in bs:
            if layer(a) != layer(b) and "fedrl" not in (layer(a), layer(b)):
                out[layer(a)].add(layer(b))
    return dict(out)


def _explain(cycle: list[str], g: dict[Kind, Graph]) -> str:
    """A layer cycle with, for each hop, the module imports that make it."""
    hops, runtime = [], union(g["module"], g["lazy"])
    for a, b in itertools.pairwise(cycle):
        pairs = [(m, t) for m, ts in runtime.items() if layer(m) == a for t in ts if layer(t) == b]
        pairs = [(m, t) for m, t in pairs if t != b] or pairs  # the package itself only when nothing in it is named
        why = sorted(f"{m} -> {t}" + ("" if t in g["module"].get(m, ()) else " (in a function)") for m, t in pairs)
        hops.append(f"{a} -> {b} [{', '.join(why)}]")
    return "; ".join(hops)


def test_no_import_cycle_between_modules() -> None:
    g = import_graph()
    cycle = find_cycle(g["module"])
    assert cycle is None, "module-level import cycle: " + " -> ".join(cycle or [])
    cycle = find_cycle(union(g["module"], g["lazy"]))
    assert cycle is None, ("import cycle through an import inside a function: " + " -> ".join(cycle or [])
                           + "; break it (move the shared piece down a layer), do not hide it in a function")


def test_no_import_cycle_between_layers_but_the_known_ones() -> None:
    g = import_graph()
    runtime = layer_graph(union(g["module"], g["lazy"]))
    cycle = find_cycle(without(runtime, KNOWN_LAYER_CYCLE_EDGES))
    assert cycle is None, "import cycle between layers: " + _explain(cycle or [], g)
    for (a, b) in KNOWN_LAYER_CYCLE_EDGES:
        assert b in runtime.get(a, set()), f"{a} no longer imports {b}: remove it from KNOWN_LAYER_CYCLE_EDGES"
        assert reaches(without(runtime, [(a, b)]), b, a), (
            f"{a} -> {b} no longer closes a cycle: remove it from KNOWN_LAYER_CYCLE_EDGES")


def _runtime_layer_imports(graph: Graph, prefix: str) -> set[str]:
    """The fedrl modules that modules of ``prefix`` (a package or a module) import at run time, outside it."""
    inside = {m for m in graph if m == prefix or m.startswith(prefix + ".")}
    return {t for m in inside for t in graph[m] if t not in inside and t != "fedrl"}


def test_the_bottom_layers_import_nothing_above_them() -> None:
    g = import_graph()
    runtime = union(g["module"], g["lazy"])
    for bottom, allowed in BOTTOM.items():
        ok = allowed | {"fedrl.errors", "fedrl.seeding"}
        above = sorted(t for t in _runtime_layer_imports(runtime, bottom)
                       if not any(t == a or t.startswith(a + ".") for a in ok))
        assert not above, f"{bottom} sits at the bottom of fedrl but imports {above}"


def test_the_bottom_check_sees_a_violation() -> None:
    graph = {"fedrl.model.layout": {"fedrl.rules.base", "fedrl.model.moments"}, "fedrl.model.moments": set()}
    assert _runtime_layer_imports(graph, "fedrl.model") == {"fedrl.rules.base"}
