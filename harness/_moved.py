"""Import paths of modules that moved into packages (issue 28), kept working for one release.

``import harness.errors`` (or ``from harness import errors``) still works and warns with a
:class:`DeprecationWarning` naming the new path; what it gives is the new module itself (one
object under two names: a class compared by identity, a constant, a monkeypatch are shared).
A finder on ``sys.meta_path`` answers for the old names only (:data:`MOVED`); nothing in this
repository imports an old path (pytest turns the warning into an error). The names of the two
modules that became packages of the same name (``harness.build``, ``harness.source``) are kept
by those packages' ``__getattr__``.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Loader
else:  # importlib.abc costs the start-up 7 ms (importlib.resources); a loader is duck-typed
    Loader = object

#: Old module -> where it lives now (``None``: an old package that held only moved modules).
MOVED: dict[str, str | None] = {
    "harness.errors": "harness.core.errors",
    "harness.paths": "harness.core.paths",
    "harness.progress": "harness.core.progress",
    "harness.inputs": "harness.core.inputs",
    "harness.datafile": "harness.core.datafile",
    "harness.jsonvalue": "harness.core.jsonvalue",
    "harness.extras": "harness.core.extras",
    "harness.types": "harness.core.types",
    "harness.host": "harness.core.host",
    "harness.crash": "harness.core.crash",
    "harness.engines": "harness.engine.descriptor",
    "harness.engine_interface": "harness.engine.interface",
    "harness.registry": "harness.engine.registry",
    "harness.plugin": "harness.engine.plugin",
    "harness.hookspec": "harness.engine.hookspec",
    "harness.patches": "harness.source.patches",
    "harness.index": "harness.source.index",
    "harness.mirrors": "harness.source.mirrors",
    "harness.manifest": "harness.source.manifest",
    "harness.artifacts": "harness.build.artifacts",
    "harness.ccache": "harness.build.ccache",
    "harness.cmake_fileapi": "harness.build.cmake_fileapi",
    "harness.recipes": "harness.build.recipes",
    "harness.matrix": "harness.build.matrix",
    "harness.pipeline": "harness.build.pipeline",
    "harness.backend": "harness.binding.wheel",
    "harness.e2e": "harness.qualify.e2e",
    "harness.pytest_crashnote": "harness.qualify.pytest_crashnote",
    "harness.emulate": "harness.qualify.emulate",
    "harness.report_merge": "harness.qualify.merge",
    "harness.ci_matrix": "harness.qualify.ci_matrix",
    "harness.commands": None,
    "harness.commands.core": "harness.cli.inspect",
    "harness.commands.build": "harness.cli.build",
    "harness.commands.runtime": "harness.cli.runtime",
    "harness.commands.qualify": "harness.cli.qualify",
    "harness.commands.e2e": "harness.cli.e2e",
    "harness.commands.emulate": "harness.cli.emulate",
    "harness.models.cli": "harness.cli.models",
    "harness.abi.cli": "harness.cli.abi",
    "harness.audit.cli": "harness.cli.audit",
    "harness.config.cli": "harness.cli.config",
    "harness.video.cli": "harness.cli.video",
    "harness.bench.cli": "harness.cli.bench",
    "harness.serve.cli": "harness.cli.serve",
}


def warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}: import it from there (the old path goes in the next release)",
                  DeprecationWarning, stacklevel=3)


class _Alias(Loader):
    """Loader that answers an old name with the module now living under the new one."""

    def __init__(self, new: str | None) -> None:
        self.new = new

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        if self.new is None:
            package = ModuleType(spec.name, "moved: its modules live under harness.cli")
            package.__path__ = []
            return package
        warn(spec.name, self.new)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new module is loaded already."""


class _Finder:
    """Finds the old names of :data:`MOVED` (first on ``sys.meta_path``, so before the file system)."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in MOVED:
            return None
        return ModuleSpec(name, _Alias(MOVED[name]), is_package=MOVED[name] is None)


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
