"""One engine interface: engines are named by registration alone, and no hook filters by engine name.

Each test names a list of engines that used to be kept by hand, or a hook whose implementations
compared engine names (issue 28, part 1). What an engine provides is a field of the
:class:`~harness.engine.registry.EngineImpl` it registers; the engine packages are declared in one
place, the ``harness`` entry-point group (pyproject.toml ``[project.entry-points.harness]``).
"""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
from pathlib import Path

import yaml

from harness.engine import hookspec, registry
from harness.engine.plugin import BUILTIN_PLUGINS, builtin_entry_points, make_manager
from tests.unit.sources import trees

ROOT = Path(__file__).parents[2]
#: Hooks whose every implementation began with ``if engine != NAME: return None``; each is now a
#: field of the registered engine (match, config_check, e2e_specs, video_limits, video_generate),
#: and harness_engine_names repeated harness_engine_register.
NAME_FILTERING_HOOKS = ("harness_engine_match", "harness_config_check", "harness_e2e_specs",
                        "harness_video_limits", "harness_video_generate", "harness_engine_names")
#: Hooks that were called and never implemented.
DEAD_HOOKS = ("harness_patch_applied", "harness_variant_environment", "harness_report_write")
#: Hook parameters named ``engine`` that carry a name only for messages (never compared).
ENGINE_NAME_FOR_MESSAGES = {"harness_source_fetch"}


def _engines() -> tuple[str, ...]:
    names = registry.names(make_manager(autoload=False))
    assert len(names) >= 2, names
    return names


def _sources() -> list[Path]:
    return [p for folder in trees() for p in sorted((ROOT / folder).rglob("*.py"))]


def test_the_name_filtering_and_dead_hooks_are_gone() -> None:
    specs = {name for name, _ in inspect.getmembers(hookspec, inspect.isfunction) if name.startswith("harness_")}
    assert not specs & {*NAME_FILTERING_HOOKS, *DEAD_HOOKS}
    found = [f"{p.relative_to(ROOT)}: {hook}" for p in _sources() for hook in (*NAME_FILTERING_HOOKS, *DEAD_HOOKS)
             if hook in p.read_text(encoding="utf-8")]
    assert not found, found


def test_no_hook_compares_engine_names() -> None:
    # the issue's own check: grep -rn "if engine != " harness plugins (the config hook spelt it context.engine)
    compare = re.compile(r"\bif (context\.)?engine != ")
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in _sources()
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if compare.search(line)]
    assert not found, found
    for name, fn in inspect.getmembers(hookspec, inspect.isfunction):
        if name.startswith("harness_") and "engine" in inspect.signature(fn).parameters:
            annotation = str(inspect.signature(fn).parameters["engine"].annotation)
            assert annotation == "EngineSpec" or name in ENGINE_NAME_FOR_MESSAGES, (name, annotation)


def test_list_1_plugins_init_lists_no_engine_package() -> None:
    import harness_plugins

    assert not hasattr(harness_plugins, "ENGINE_PLUGINS")
    tree = ast.parse((ROOT / "plugins" / "__init__.py").read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AnnAssign)]


def test_list_2_pyproject_entry_points_are_the_one_registration() -> None:
    """The entry points are the one list: every built-in engine comes from one, and the core's
    own tuple of generic plugins names no engine package."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    group = declared["project"]["entry-points"]["harness"]
    assert dict(builtin_entry_points()) == group
    engine_modules = {value.partition(":")[0] for value in group.values()}
    assert not engine_modules & {module for _, module in BUILTIN_PLUGINS}
    pm = make_manager(autoload=False)
    for name in _engines():
        owners = [plugin for plugin_name, plugin in pm.list_name_plugin() if plugin_name in group
                  and any(impl.name == name for impl in getattr(plugin, "harness_engine_register", list)())]
        assert owners, f"engine {name} is not registered through the harness entry-point group"


def test_list_3_noxfile_asks_the_registry() -> None:
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    engines = set(_engines())
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assert "ENGINES" not in [t.id for t in targets if isinstance(t, ast.Name)]
    listed = [n for n in ast.walk(tree) if isinstance(n, ast.Tuple | ast.List | ast.Set)
              and len({e.value for e in n.elts if isinstance(e, ast.Constant)} & engines) > 1]
    assert not listed, [ast.unparse(n) for n in listed]


def test_list_4_video_families_name_no_engine() -> None:
    data = yaml.safe_load((ROOT / "harness" / "families" / "families.yaml").read_text(encoding="utf-8"))
    assert "engines" not in data
    keys = {str(k) for family in data["families"].values() for k in family}
    assert not keys & set(_engines())
    from harness.config.video_rules import family_for

    assert family_for(None, "sdcpp").name == "wan"  # the engine says so itself


def test_list_5_localai_vocabulary_names_no_engine() -> None:
    data = yaml.safe_load((ROOT / "harness" / "config" / "localai.yaml").read_text(encoding="utf-8"))
    assert "speculative_engines" not in data
    assert not [name for name, spec in data["backends"].items() if "engine" in (spec or {})]
    from harness.config.localai import resolve_backend

    engines = _engines()
    assert resolve_backend("llama-cpp", engines).engine == "llamacpp"  # the engine says so itself
