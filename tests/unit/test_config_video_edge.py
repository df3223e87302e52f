"""``harness.config`` imports nothing from ``harness.video``: the edge runs one way.

The video path stands on the config (it loads and validates a config, then plans from it); what
both need of the video families (the family table, the video bounds, the canvas) sits below both,
in :mod:`harness.families`, which imports neither. The imports are read from the source with
:mod:`ast`: module level, inside functions and under ``if TYPE_CHECKING:`` alike, and the names
``importlib.import_module`` and ``__import__`` are given as literals, so a lazy import is no way
round.
"""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).parents[2] / "harness"


def imported(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every dotted name ``source`` (the text of ``module``) imports, wherever the import sits."""
    here = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def reaches(names: set[str], package: str) -> list[str]:
    return sorted(n for n in names if n == package or n.startswith(package + "."))


def imports_of(package: str) -> dict[str, list[str]]:
    """Module of ``harness.<package>`` -> the names it imports."""
    out: dict[str, list[str]] = {}
    for path in sorted((HARNESS / package).rglob("*.py")):
        parts = ["harness", package, *path.relative_to(HARNESS / package).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = sorted(imported(path.read_text(encoding="utf-8"), ".".join(parts),
                                               is_package=is_package))
    return out


def test_config_imports_nothing_of_video() -> None:
    found = {m: hits for m, names in imports_of("config").items() if (hits := reaches(set(names), "harness.video"))}
    assert not found, f"harness.config imports harness.video (move what it needs into harness.families): {found}"


def test_the_family_data_imports_neither_config_nor_video() -> None:
    mods = imports_of("families")
    assert "harness.families.table" in mods and "harness.families.limits" in mods
    found = {m: hits for m, names in mods.items()
             if (hits := reaches(set(names), "harness.config") + reaches(set(names), "harness.video"))}
    assert not found, f"harness.families must sit below config and video: {found}"


def test_the_walk_sees_every_kind_of_import() -> None:
    source = '''
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from harness.video.job import VideoJob
import harness.video.mux
from harness import video
def f():
    from harness.video.target import load_target
    from ..video import pipeline
    importlib.import_module("harness.video.request")
'''
    names = imported(source, "harness.config.select")
    assert reaches(names, "harness.video") == [
        "harness.video", "harness.video.job", "harness.video.job.VideoJob", "harness.video.mux",
        "harness.video.pipeline", "harness.video.request", "harness.video.target",
        "harness.video.target.load_target"]
    assert not reaches(imported("from harness.videos import x\nimport harness.config", "harness.config.a"),
                       "harness.video")
