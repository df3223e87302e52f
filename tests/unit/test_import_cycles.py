"""No import circles in ``harness/`` and ``plugins/``.

The graph is read from the source with :mod:`ast`: every ``import`` and ``from ... import``, at
module level, inside functions and under ``if TYPE_CHECKING:`` alike (a circle that only a lazy
import keeps from failing is still two modules that cannot be read, tested or moved apart). An
import names the deepest module it reaches (``from harness import pipeline`` is an edge to
``harness.build.pipeline``; ``from harness.build.pipeline import fetch`` too); a package's ``__init__`` is the
package's own module. A circle is a strongly connected component of that graph.

:data:`KNOWN` lists the circles not yet broken, each as its exact set of modules. The test fails
on any other circle and on a listed one that changed or went away, so the list only shrinks:
delete an entry when its circle is broken, shrink it when it loses modules.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

from tests.unit.sources import trees

ROOT = Path(__file__).parents[2]
#: Source folder -> the package it is imported as.
TREES = trees()

#: Circles not broken yet, each as its exact set of modules (none left: issue 28 part 1 broke the
#: last one, hookspec -> registry/video.job -> ... -> plugin -> hookspec, by moving what an engine
#: provides from name-filtering hooks onto the registered engine object).
KNOWN: tuple[frozenset[str], ...] = ()


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> source file, for every ``.py`` under the trees."""
    out: dict[str, Path] = {}
    for folder, package in trees(root).items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imported(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Every dotted name an import in ``tree`` reaches (module-level, in functions, TYPE_CHECKING)."""
    here = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the trees it imports."""
    mods = modules(root)

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in mods:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets = {resolve(d) for d in _imported(tree, name, path.name == "__init__.py")}
        edges[name] = {t for t in targets if t is not None and t != name}
    return edges


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def shortest_circle(edges: dict[str, set[str]], component: frozenset[str]) -> list[str]:
    """One concrete circle through the component's first module: ``a -> b -> ... -> a``."""
    start = min(component)
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(edges[node] & component):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return sorted(component)


def _describe(edges: dict[str, set[str]], component: frozenset[str]) -> str:
    return f"{sorted(component)}\n    e.g. {' -> '.join(shortest_circle(edges, component))}"


def test_no_new_import_circle() -> None:
    edges = graph()
    new = [c for c in circles(edges) if c not in KNOWN]
    assert not new, ("import circles (module-level, function-level and TYPE_CHECKING imports count):\n  "
                     + "\n  ".join(_describe(edges, c) for c in new)
                     + "\nbreak the circle (move what both sides need into a module of its own); if a listed "
                     "circle lost modules, shrink its KNOWN entry to what is left")


def test_the_known_circles_are_still_there_as_listed() -> None:
    found = circles(graph())
    gone = [sorted(c) for c in KNOWN if c not in found]
    assert not gone, ("KNOWN circles that are broken or changed (delete or shrink their entries, so the "
                      "list only shrinks):\n  " + "\n  ".join(map(str, gone)))


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "harness"
    (pkg / "sub").mkdir(parents=True)
    (tmp_path / "plugins").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.sub.b import X\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    import harness.c\n")
    (pkg / "c.py").write_text("from harness import a\n")
    (tmp_path / "plugins" / "p.py").write_text("from harness.sub import b\nimport os\n")
    edges = graph(tmp_path)
    assert edges["harness.a"] == {"harness.sub.b"} and edges["harness.sub"] == {"harness.sub.b"}
    assert edges["harness.sub.b"] == {"harness.c"} and edges["harness.c"] == {"harness.a"}
    assert edges["harness_plugins.p"] == {"harness.sub.b"}
    (found,) = circles(edges)
    assert found == {"harness.a", "harness.sub.b", "harness.c"}
    assert shortest_circle(edges, found) == ["harness.a", "harness.sub.b", "harness.c", "harness.a"]
