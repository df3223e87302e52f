"""The plugin manager: built-ins first, then the ``harness`` entry-point group.

The generic built-ins (sources, variants, cross toolchains) are an explicit tuple. Installed engines
are declared in one place only: the ``harness`` entry-point group, this distribution's own engines
included (pyproject.toml ``[project.entry-points.harness]``). This distribution's entries are
built-in and always registered; other distributions' entries are third-party plugins, skipped
when :data:`DISABLE_AUTOLOAD_ENV` is set. An engine folder on ``$HARNESS_ENGINES_PATH`` with a
``plugin/`` package is registered from the folder itself (:func:`folder_plugins`) when the user
trusts that engine (``--trust NAME``): one folder is a whole engine, nothing installed.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import TYPE_CHECKING, Any

import pluggy

from harness.engine import hookspec

if TYPE_CHECKING:
    from pathlib import Path

hookimpl = pluggy.HookimplMarker("harness")

#: Built-in plugins, registered in this order under these short names.
BUILTIN_PLUGINS: tuple[tuple[str, str], ...] = (
    ("source-pypi-sdist", "harness_plugins.source_pypi_sdist"),
    ("source-git", "harness_plugins.source_git"),
    ("source-local-archive", "harness_plugins.source_local_archive"),
    ("variant-cpu", "harness_plugins.variant_cpu"),
    ("variant-cuda", "harness_plugins.variant_cuda"),
    ("variant-vulkan", "harness_plugins.variant_vulkan"),
    ("variant-metal", "harness_plugins.variant_metal"),
    ("variant-mlx", "harness_plugins.variant_mlx"),
    ("cross-gnu", "harness_plugins.cross_gnu"),
    ("bench-fake", "harness_plugins.bench_fake"),
)


#: Set to any non-empty value to skip third-party (entry-point) plugins.
DISABLE_AUTOLOAD_ENV = "HARNESS_DISABLE_PLUGIN_AUTOLOAD"
ENTRY_POINT_GROUP = "harness"
#: The distribution whose ``harness`` entry points are built-in.
DISTRIBUTION = "harness"


def builtin_entry_points() -> tuple[tuple[str, str], ...]:
    """(name, module) of this distribution's own ``harness`` entry points: the built-in engines."""
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)
             if ep.dist is not None and ep.dist.name == DISTRIBUTION}
    return tuple(found.items())


def _load(value: str) -> Any:
    """The object an entry-point value names (``module`` or ``module:attribute``)."""
    module, _, attr = value.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


def builtin_plugins() -> tuple[tuple[str, str], ...]:
    """The generic built-ins, then this distribution's entry points (the engine packages)."""
    return BUILTIN_PLUGINS + builtin_entry_points()


def folder_plugins(installed: set[str], *, autoload: bool = True) -> list[tuple[str, Any]]:
    """(name, module) of each engine folder's ``plugin/`` package on ``$HARNESS_ENGINES_PATH`` whose
    engine no installed entry point provides: an engine added as one folder outside the checkout
    (``engines/<name>/plugin/``) is imported as ``harness_plugins.<name>`` from there, so its own
    relative imports work as they would installed.

    A folder's plugin is code the user brought in: it is imported only when the user trusts the
    engine by name (``--trust NAME``, ``HARNESS_TRUST``; :mod:`harness.engine.trust`), and never when
    ``autoload`` is off (:data:`DISABLE_AUTOLOAD_ENV`). Without it the folder is a data-only recipe:
    fetch, patch, ABI, build and matrix work from its descriptor alone."""
    import importlib.util
    import sys
    from pathlib import Path

    from harness.engine.descriptor import ENGINES_PATH_ENV
    from harness.engine.trust import is_builtin_folder, trusted_names

    out = []
    trusted = trusted_names() if autoload else frozenset()
    for folder in [Path(p).expanduser() for p in os.environ.get(ENGINES_PATH_ENV, "").split(os.pathsep) if p]:
        for init in sorted(folder.glob("*/plugin/__init__.py")):
            name = init.parent.parent.name
            if name in installed or not name.isidentifier():
                continue
            if name not in trusted and not (autoload and is_builtin_folder(init.parent.parent)):
                continue
            module = f"harness_plugins.{name}"
            if (own := _own_module(module, init)) is not None:
                from harness.core import progress

                progress.info(f"warning: the plugin of {init.parent.parent} is not imported: it would be {module}, "
                              f"which is the harness's own module ({own}); an engine with a plugin/ cannot be named "
                              f"{name} (rename its folder and its descriptor's name)")
                continue
            if module not in sys.modules:
                spec = importlib.util.spec_from_file_location(module, init, submodule_search_locations=[str(init.parent)])
                if spec is None or spec.loader is None:
                    continue
                mod = importlib.util.module_from_spec(spec)
                sys.modules[module] = mod
                try:
                    spec.loader.exec_module(mod)
                except BaseException:
                    del sys.modules[module]
                    raise
            out.append((f"engine-{name}", sys.modules[module]))
            installed.add(name)
    return out


def _own_module(module: str, init: Path) -> str | None:
    """Where the harness's own ``module`` is when it is not the folder plugin ``init`` (a folder named
    after a built-in plugin module, ``variant_cpu``, would be registered as that module), else None."""
    import importlib.util
    import sys
    from pathlib import Path

    loaded = sys.modules.get(module)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        same = where is not None and Path(where).resolve() == init.resolve()
        return None if same else str(where or module)
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return None if spec is None else str(spec.origin or module)


def make_manager(*, autoload: bool | None = None, extra: tuple[Any, ...] = ()) -> pluggy.PluginManager:
    """Build a fresh plugin manager (tests use this; the CLI uses :func:`get_manager`)."""
    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    for name, value in builtin_plugins():
        pm.register(_load(value), name=name)
    if autoload is None:
        autoload = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    engines = {name.removeprefix("engine-") for name, _ in builtin_entry_points()}
    for name, module in folder_plugins(engines, autoload=autoload):
        pm.register(module, name=name)
    for plugin in extra:
        pm.register(plugin)
    if autoload:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    pm.check_pending()
    return pm


@functools.cache
def get_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager."""
    return make_manager()


def describe(pm: pluggy.PluginManager) -> list[dict[str, Any]]:
    """Plugins in registration order, with the hooks each implements."""
    rows = []
    for name, plugin in pm.list_name_plugin():
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        dist = next((d for p, d in pm.list_plugin_distinfo() if p is plugin), None)
        origin = f"{dist.project_name} {dist.version}" if dist else "built-in"
        rows.append({"name": name, "module": getattr(plugin, "__name__", repr(plugin)),
                     "origin": origin, "hooks": hooks})
    return rows
