"""What pyproject.toml cannot say: where the packages are, and the data trees.

- **Packages are found, not listed.** ``harness`` and its sub-packages are found under ``harness/``;
  the generic plugins (sources, variants, cross toolchains) are ``plugins/`` as ``harness_plugins``;
  each engine's plugin is ``engines/<name>/plugin/`` as ``harness_plugins.<name>``. A new engine's
  package ships without an edit here (its entry point in pyproject.toml registers it).
- **Data trees** (engine folders, matrix) are ``data_files`` under ``<prefix>/share/harness/``, walked
  at build time. A checkout uses them in place (harness.core.paths.project_root). An engine's
  ``plugin/`` is a package, not data; its ``e2e/`` specs, descriptor, patches, ABI surface, binding
  source and fixtures are data.
"""

from __future__ import annotations

import os

from setuptools import find_packages, setup

DATA_TREES = ("engines", "matrix")
#: Folders of an engine that ship as its Python package instead (or not at all).
NOT_DATA = {"plugin", "__pycache__"}


def engine_plugins() -> dict[str, str]:
    """``harness_plugins.<name>`` -> ``engines/<name>/plugin`` for each engine folder with a plugin."""
    found = {}
    for name in sorted(os.listdir("engines")):
        if os.path.isfile(os.path.join("engines", name, "plugin", "__init__.py")):
            found[f"harness_plugins.{name}"] = f"engines/{name}/plugin"
    return found


def packages() -> tuple[list[str], dict[str, str]]:
    """(packages, package_dir): harness's own, the generic plugins, each engine's plugin."""
    plugins = engine_plugins()
    found = ["harness", *(f"harness.{p}" for p in find_packages("harness")), "harness_plugins", *plugins]
    return found, {"harness": "harness", "harness_plugins": "plugins", **plugins}


def data_files() -> list[tuple[str, list[str]]]:
    out = []
    for top in DATA_TREES:
        for directory, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in NOT_DATA)
            files = sorted(os.path.join(directory, f) for f in filenames if not f.endswith((".pyc", ".pyo")))
            if files:
                out.append((os.path.join("share", "harness", directory), files))
    return out


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import data_files()
    pkgs, package_dir = packages()
    setup(packages=pkgs, package_dir=package_dir, data_files=data_files())
