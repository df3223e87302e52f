"""The core knows no engine: engines are data plus a plugin package, looked up by name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

CORE = Path(__file__).parents[2] / "harness"
ENGINE_WORDS = re.compile(r"llama|sdcpp|stable.diffusion|\bwan\b|minimax", re.I)
#: Identifiers of libraries the core uses, not engine knowledge: the gguf package's file-type enum.
LIBRARY_NAMES = {"LlamaFileType"}


def _code_strings_and_names(path: Path) -> list[tuple[int, str]]:
    """Every identifier, attribute, import and string literal (docstrings and comments excepted)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            out.append((node.lineno, node.value))
        elif isinstance(node, ast.Name):
            out.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            out.append((node.lineno, node.attr))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out += [(node.lineno, a.name) for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.module:
                out.append((node.lineno, node.module))
    return out


def test_no_module_under_harness_names_an_engine() -> None:
    found = [f"{p.relative_to(CORE.parent)}:{line}: {text[:80]!r}"
             for p in sorted(CORE.rglob("*.py")) for line, text in _code_strings_and_names(p)
             if ENGINE_WORDS.search(text) and text not in LIBRARY_NAMES]
    assert not found, "engine names in the core (move them into the engine's plugin or data):\n" + "\n".join(found)


def test_core_imports_no_engine_package() -> None:
    from harness.engine.plugin import builtin_entry_points

    packages = {value.partition(":")[0] for _, value in builtin_entry_points()}
    assert packages, "no engine package is declared in the harness entry-point group"
    bad = [f"{p.relative_to(CORE.parent)}: {m}" for p in sorted(CORE.rglob("*.py")) for m in packages
           if m in p.read_text()]
    assert not bad, bad
