"""The core (``harness/``) never imports a plugin (``harness_plugins``): it asks the plugin manager.

What a plugin knows (a variant platform's devices, a source kind) reaches the core through a hook
or through what the plugin registers. The one place the core names plugin modules is the plugin
manager's explicit registration list (:data:`harness.engine.plugin.BUILTIN_PLUGINS`), which the
manager loads by name to register them; no other import of ``harness_plugins`` is allowed, in any
form: ``import``, ``from ... import``, inside a function, under ``TYPE_CHECKING``, or a module
name in a string (``importlib.import_module("harness_plugins.x")``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
#: A module name (or entry-point value) under harness_plugins, as a whole string.
PLUGIN_MODULE = re.compile(r"harness_plugins(\.\w+)*(:[\w.]+)?")
REGISTRATION_FILE = ROOT / "harness" / "engine" / "plugin.py"
REGISTRATION_NAME = "BUILTIN_PLUGINS"


def _is_plugin(module: str) -> bool:
    return module == "harness_plugins" or module.startswith("harness_plugins.")


def _registration_value(tree: ast.Module) -> ast.expr | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == REGISTRATION_NAME for t in targets):
            return node.value  # type: ignore[union-attr]
    return None


def plugin_imports(tree: ast.Module, *, allowed: ast.expr | None = None) -> list[tuple[int, str]]:
    """(line, what) for each reference to a plugin module in ``tree``, except inside ``allowed`` (a node of it)."""
    exempt = {id(n) for n in ast.walk(allowed)} if allowed is not None else set()
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _is_plugin(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and _is_plugin(node.module):
            found.append((node.lineno, f"from {node.module} import {', '.join(a.name for a in node.names)}"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exempt
              and PLUGIN_MODULE.fullmatch(node.value)):
            found.append((node.lineno, f"module name {node.value!r}"))
    return found


def test_no_core_module_imports_a_plugin() -> None:
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        allowed = _registration_value(tree) if path == REGISTRATION_FILE else None
        found += [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in plugin_imports(tree, allowed=allowed)]
    assert not found, ("the core imports plugins (ask the plugin manager: a hook, or what the plugin "
                       "registers):\n  " + "\n  ".join(found))


def test_the_one_allowance_is_the_managers_registration_list() -> None:
    from harness.engine import plugin

    tree = ast.parse(REGISTRATION_FILE.read_text(encoding="utf-8"))
    allowed = _registration_value(tree)
    assert allowed is not None, f"{REGISTRATION_NAME} is gone from {REGISTRATION_FILE}: update this test"
    named = {n.value for n in ast.walk(allowed) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and PLUGIN_MODULE.fullmatch(n.value)}
    # what is exempt is exactly what the manager registers, and each is a module of plugins/
    assert named == {module for _, module in plugin.BUILTIN_PLUGINS}
    for module in named:
        rel = Path("plugins", *module.split(".")[1:])
        assert (ROOT / rel.with_suffix(".py")).is_file() or (ROOT / rel / "__init__.py").is_file(), module


def test_the_walk_sees_every_way_in() -> None:
    source = '''
import importlib
from typing import TYPE_CHECKING
import harness_plugins.variant_cuda
from harness_plugins import variant_cpu
if TYPE_CHECKING:
    from harness_plugins.llamacpp.engine import Engine
def f():
    import harness_plugins
    return importlib.import_module("harness_plugins.variant_vulkan")
DOC = "harness_plugins is plugins/ installed under another name"
BUILTIN_PLUGINS = (("variant-cpu", "harness_plugins.variant_cpu"),)
'''
    tree = ast.parse(source)
    found = plugin_imports(tree, allowed=_registration_value(tree))
    assert sorted(line for line, _ in found) == [4, 5, 7, 9, 10], found
    assert (12, "module name 'harness_plugins.variant_cpu'") in plugin_imports(tree)
