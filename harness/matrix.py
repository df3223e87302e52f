"""The variant matrix: rows of ``matrix/*.yaml`` as frozen dataclasses, selected by pattern."""

from __future__ import annotations

import fnmatch
import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pluggy
import yaml
from packaging.version import InvalidVersion, Version

from harness import paths
from harness.errors import ConfigError, UnknownNameError
from harness.types import Buildability, HostInfo, Variant


@functools.cache
def _schema() -> dict[str, Any]:
    return dict(json.loads(resources.files("harness").joinpath("schemas/matrix.schema.json").read_text()))


def load_matrix(directory: Path | None = None) -> list[Variant]:
    """All rows of every ``matrix/*.yaml``, in file then row order."""
    directory = directory or paths.project_root() / "matrix"
    rows: list[Variant] = []
    for f in sorted(directory.glob("*.yaml")):
        data = yaml.safe_load(f.read_text())
        errors = list(jsonschema.Draft202012Validator(_schema()).iter_errors(data))
        if errors:
            lines = [f"{f}: {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
            raise ConfigError("invalid matrix file:\n" + "\n".join(lines))
        for row in data["rows"]:
            rows.append(
                Variant(
                    name=row["name"],
                    backend=row["backend"],
                    description=row.get("description", ""),
                    os=tuple(row.get("os", ())),
                    arch=tuple(row.get("arch", ())),
                    tools=dict(row.get("tools", {})),
                    defines={k: str(v) for k, v in row["defines"].items()},
                    cuda_archs=tuple(row.get("cuda_archs", ())),
                    ci=bool(row.get("ci", False)),
                    default=bool(row.get("default", False)),
                    engines=tuple(row.get("engines", ())),
                    extra=dict(row.get("extra", {})),
                )
            )
    names = [r.name for r in rows]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        msg = f"duplicate matrix rows: {', '.join(sorted(dupes))}"
        raise ConfigError(msg)
    return rows


def select(rows: list[Variant], patterns: str | list[str]) -> list[Variant]:
    """Rows whose name matches any fnmatch pattern (``cpu*``, ``cuda,vulkan``)."""
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p]
    chosen = [r for r in rows if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)]
    for p in patterns:
        if not any(fnmatch.fnmatchcase(r.name, p) for r in rows):
            raise UnknownNameError("variant", p, [r.name for r in rows])
    return chosen


def get_variant(name: str, rows: list[Variant] | None = None) -> Variant:
    rows = rows if rows is not None else load_matrix()
    for r in rows:
        if r.name == name:
            return r
    raise UnknownNameError("variant", name, [r.name for r in rows])


def version_at_least(found: str | None, minimum: str) -> bool:
    if found is None:
        return False
    try:
        return Version(found) >= Version(minimum)
    except InvalidVersion:
        return False


OS_NAMES = {"darwin": "macOS", "linux": "Linux", "windows": "Windows"}


def generic_reasons(variant: Variant, host: HostInfo) -> list[str]:
    """The checks every row shares: OS, arch, tools with minimum versions."""
    reasons = []
    if variant.os and host.os not in variant.os:
        wanted = "/".join(OS_NAMES.get(o, o) for o in variant.os)
        reasons.append(f"needs {wanted} {'/'.join(variant.arch)}, host is {host.os} {host.arch}")
    elif variant.arch and host.arch not in variant.arch:
        reasons.append(f"needs arch {'/'.join(variant.arch)}, host is {host.os} {host.arch}")
    for tool, minimum in variant.tools.items():
        info = host.tool(tool)
        if not info.found:
            reasons.append(f"{tool} not found (need >= {minimum})")
        elif minimum != "0" and not version_at_least(info.version, minimum):
            reasons.append(f"{tool} {info.version} found, need >= {minimum}")
    return reasons


def buildability(pm: pluggy.PluginManager, variant: Variant, host: HostInfo) -> Buildability:
    """Ask the plugin owning ``variant.backend``; no owner means not buildable."""
    result: Buildability | None = pm.hook.harness_variant_requirements(variant=variant, host=host)
    if result is None:
        return Buildability(variant=variant.name, buildable=False, runnable=False,
                            reasons=(f"no plugin implements backend {variant.backend!r}",))
    return result
