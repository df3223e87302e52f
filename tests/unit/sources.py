"""The project's Python source folders and the package each is imported as, for the tests that
read the code itself (import cycles, floors, direct reads, engine contract): ``harness/``, the
generic plugins ``plugins/`` (``harness_plugins``) and each engine's ``engines/<name>/plugin/``
(``harness_plugins.<name>``), found as setup.py finds them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[2]


def trees(root: Path = ROOT) -> dict[str, str]:
    """Source folder (relative to ``root``) -> the package it installs as."""
    out = {"harness": "harness", "plugins": "harness_plugins"}
    for init in sorted((root / "engines").glob("*/plugin/__init__.py")):
        out[init.parent.relative_to(root).as_posix()] = f"harness_plugins.{init.parent.parent.name}"
    return out


def plugin_files(root: Path = ROOT) -> list[Path]:
    """Every ``.py`` of the generic plugins and of the engines' plugins."""
    return [p for folder in trees(root) if folder != "harness" for p in sorted((root / folder).rglob("*.py"))]
