"""CMake's file API: which files a build's targets write, wherever the engine's CMake puts them.

A stateless query (``.cmake/api/v1/query/client-harness/codemodel-v2``) written before
configure makes CMake describe every target in ``.cmake/api/v1/reply/``: its type and the
paths of its artifacts. The artifact collector reads that instead of guessing directories.
The query has no effect on what is compiled (nor on ccache).

The reply is written by CMake inside the build's sandbox: it is read through the confined
accessor (:class:`harness.sandbox.confined.Tree`), and a path it names outside the build dir
(``/home/you``) is refused, never globbed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from harness.sandbox.confined import ConfinementError, Tree, parts_of

CLIENT = "client-harness"
QUERY = "codemodel-v2"
LIBRARY_TYPES = ("SHARED_LIBRARY", "MODULE_LIBRARY")
API = ".cmake/api/v1"


@dataclass(frozen=True, kw_only=True)
class TargetArtifacts:
    """One CMake target and the paths of the files it writes, relative to the build dir."""

    name: str
    type: str
    paths: tuple[str, ...]


def write_query(build: Tree) -> None:
    """Ask the next configure of ``build`` for the codemodel."""
    build.touch(f"{API}/query/{CLIENT}/{QUERY}")


def _load(build: Tree, rel: str) -> dict[str, Any]:
    data = json.loads(build.read_text(rel))
    if not isinstance(data, dict):
        msg = f"{build.root / rel}: not a JSON object"
        raise ValueError(msg)
    return data


def _inside(build: Tree, path: str) -> str:
    """A reply's artifact path relative to the build dir; ConfinementError when it is elsewhere."""
    rel = build.relative(path) if os.path.isabs(path) else os.path.normpath(path)
    if rel is None or rel == ".." or rel.startswith("../"):
        msg = (f"CMake's file-API reply in {build.root} names {path}, outside the build dir: the collector reads "
               "only the build's own files. Remove the output directory setting that puts it there "
               "(CMAKE_*_OUTPUT_DIRECTORY in the engine's CMake or the patch series)")
        raise ConfinementError(msg)
    parts_of(rel)
    return rel


def read_targets(build: Tree) -> list[TargetArtifacts] | None:
    """Every target of the last configure, with its artifacts; None when CMake wrote no reply."""
    reply = f"{API}/reply"
    indexes = build.glob(f"{reply}/index-*.json")
    if not indexes:
        return None
    try:
        index = _load(build, indexes[-1])
        entry = index.get("reply", {}).get(CLIENT, {}).get(QUERY, {})
        if "jsonFile" not in entry:
            return None
        model = _load(build, f"{reply}/{entry['jsonFile']}")
        targets: dict[str, TargetArtifacts] = {}
        for config in model.get("configurations", []):
            for t in config.get("targets", []):
                data = _load(build, f"{reply}/{t['jsonFile']}")
                paths = tuple(_inside(build, str(a["path"])) for a in data.get("artifacts", []))
                old = targets.get(data["name"])
                targets[data["name"]] = TargetArtifacts(
                    name=str(data["name"]), type=str(data["type"]), paths=(old.paths if old else ()) + paths)
    except ConfinementError:
        raise
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return list(targets.values())


def library_dirs(build: Tree, targets: list[TargetArtifacts]) -> list[str]:
    """Directories (relative to the build dir) that shared and module libraries are written to,
    shallowest first; only real directories, never a link."""
    dirs = {os.path.dirname(p) for t in targets if t.type in LIBRARY_TYPES for p in t.paths}
    return sorted((d for d in dirs if build.kind(d) == "dir"), key=lambda d: (len(parts_of(d)), d))


def executables(targets: list[TargetArtifacts]) -> dict[str, str]:
    """File name -> path (relative to the build dir) of every executable target's artifact."""
    return {os.path.basename(p): p for t in targets if t.type == "EXECUTABLE" for p in t.paths}
