"""The import paths of modules that moved into packages (issue 28) work for one release, and warn."""

from __future__ import annotations

import importlib
import sys

import pytest

from harness import _moved


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_an_old_module_path_warns_and_gives_the_new_module(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    new = _moved.MOVED[old]
    for name in [m for m in sys.modules if m == old or m.startswith(old + ".")]:
        monkeypatch.delitem(sys.modules, name)
    if new is None:  # an old package that held only moved modules: importing it alone says nothing
        assert importlib.import_module(old).__path__ == []
        return
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}:"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_from_an_old_package_import_a_moved_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import harness
    import harness.abi

    for name in ("harness.commands", "harness.commands.core", "harness.abi.cli"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delattr(harness, "commands", raising=False)
    monkeypatch.delattr(harness.abi, "cli", raising=False)
    with pytest.warns(DeprecationWarning, match="harness.commands.core moved to harness.cli.inspect"):
        from harness.commands import core
    with pytest.warns(DeprecationWarning, match="harness.abi.cli moved to harness.cli.abi"):
        from harness.abi import cli
    import harness.cli.abi
    import harness.cli.inspect

    assert core is harness.cli.inspect and cli is harness.cli.abi


@pytest.mark.parametrize(("package", "module", "name"), [("harness.build", "harness.build.cmake", "build_key"),
                                                          ("harness.source", "harness.source.cache", "ensure_tree")])
def test_a_name_of_a_module_that_became_a_package_warns(package: str, module: str, name: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"{package}.{name} moved to {module}.{name}:"):
        value = getattr(importlib.import_module(package), name)
    assert value is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError):
        _ = importlib.import_module(package).no_such_name


def test_every_moved_name_is_still_a_name_of_its_new_module() -> None:
    import harness.build
    import harness.source

    for package, module in ((harness.build, "harness.build.cmake"), (harness.source, "harness.source.cache")):
        new = importlib.import_module(module)
        missing = sorted(n for n in package._MOVED_NAMES if not hasattr(new, n))
        assert not missing, f"{module} lost {missing}: drop them from {package.__name__}._MOVED_NAMES"


def test_nothing_in_the_repository_imports_an_old_path() -> None:
    """The shims are for other people's code: the repository's own imports are the new paths."""
    import ast
    from pathlib import Path

    root = Path(__file__).parents[2]
    old = {k for k, v in _moved.MOVED.items() if v is not None}
    found = []
    for folder in ("harness", "plugins", "tests", "scripts"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == "test_moved_modules.py" or path == root / "harness" / "_moved.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                found += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names if n in old]
    assert not found, "imports of moved modules by their old path:\n" + "\n".join(found)


@pytest.mark.parametrize(("old", "new"), [("Engine", "Runtime"), ("AsyncEngine", "AsyncRuntime")])
def test_the_runtime_classes_old_names_warn(old: str, new: str) -> None:
    import harness.runtime

    with pytest.warns(DeprecationWarning, match=rf"harness.runtime.{old} is now harness.runtime.{new}"):
        value = getattr(harness.runtime, old)
    assert value is getattr(harness.runtime, new)
