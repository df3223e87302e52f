"""CMake's file API: which files a build's targets write, wherever the engine's CMake puts them.

A stateless query (``.cmake/api/v1/query/client-harness/codemodel-v2``) written before
configure makes CMake describe every target in ``.cmake/api/v1/reply/``: its type and the
paths of its artifacts. The artifact collector reads that instead of guessing directories.
The query has no effect on what is compiled (nor on ccache).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLIENT = "client-harness"
QUERY = "codemodel-v2"
LIBRARY_TYPES = ("SHARED_LIBRARY", "MODULE_LIBRARY")


@dataclass(frozen=True, kw_only=True)
class TargetArtifacts:
    """One CMake target and the absolute paths of the files it writes."""

    name: str
    type: str
    paths: tuple[Path, ...]


def api_dir(build_dir: Path) -> Path:
    return build_dir / ".cmake" / "api" / "v1"


def write_query(build_dir: Path) -> None:
    """Ask the next configure of ``build_dir`` for the codemodel."""
    query = api_dir(build_dir) / "query" / CLIENT / QUERY
    query.parent.mkdir(parents=True, exist_ok=True)
    query.touch()


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        msg = f"{path}: not a JSON object"
        raise ValueError(msg)
    return data


def read_targets(build_dir: Path) -> list[TargetArtifacts] | None:
    """Every target of the last configure, with its artifacts; None when CMake wrote no reply."""
    reply = api_dir(build_dir) / "reply"
    indexes = sorted(reply.glob("index-*.json"))
    if not indexes:
        return None
    try:
        index = _load(indexes[-1])
        entry = index.get("reply", {}).get(CLIENT, {}).get(QUERY, {})
        if "jsonFile" not in entry:
            return None
        model = _load(reply / entry["jsonFile"])
        targets: dict[str, TargetArtifacts] = {}
        for config in model.get("configurations", []):
            for t in config.get("targets", []):
                data = _load(reply / t["jsonFile"])
                paths = tuple(build_dir / a["path"] for a in data.get("artifacts", []))
                old = targets.get(data["name"])
                targets[data["name"]] = TargetArtifacts(
                    name=data["name"], type=data["type"], paths=(old.paths if old else ()) + paths)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return list(targets.values())


def library_dirs(build_dir: Path, targets: list[TargetArtifacts]) -> list[Path]:
    """Directories that shared and module libraries are written to, shallowest first."""
    dirs = {p.parent for t in targets if t.type in LIBRARY_TYPES for p in t.paths}

    def order(d: Path) -> tuple[int, str]:
        rel = d.relative_to(build_dir) if d.is_relative_to(build_dir) else d
        return (len(rel.parts), rel.as_posix())

    return sorted((d for d in dirs if d.is_dir()), key=order)


def executables(targets: list[TargetArtifacts]) -> dict[str, Path]:
    """File name -> path of every executable target's artifact."""
    return {p.name: p for t in targets if t.type == "EXECUTABLE" for p in t.paths}
