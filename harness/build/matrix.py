"""The variant matrix: rows of ``matrix/*.yaml`` as frozen dataclasses, selected by pattern.

A row states intent (``cpu_levels: runtime``, ``gpu: cuda``); an engine's descriptor spells each
intent as CMake defines (``cmake.intents``). :func:`row_defines` applies that mapping and
:func:`engine_support` says why an engine does not build a row.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pluggy
from packaging.version import InvalidVersion, Version

from harness.core import inputs, paths
from harness.core.datafile import load_yaml
from harness.core.errors import ConfigError, UnknownNameError, UsageError
from harness.core.types import Buildability, EngineSpec, HostInfo, Variant
from harness.engine.descriptor import engine_names, load_engine, with_current_build_data


@functools.cache
def _schema() -> dict[str, Any]:
    return dict(json.loads(resources.files("harness").joinpath("schemas/matrix.schema.json").read_text()))


def matrix_files(directory: Path | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every ``matrix/*.yaml``, checked against the matrix schema, in name order."""
    directory = directory or paths.project_root() / "matrix"
    files = []
    for f in sorted(directory.glob("*.yaml")):
        data = load_yaml(inputs.read_text(f, kind="descriptor", error=ConfigError), where=f)
        errors = list(jsonschema.Draft202012Validator(_schema()).iter_errors(data))
        if errors:
            lines = [f"{f}: {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
            raise ConfigError("invalid matrix file:\n" + "\n".join(lines))
        files.append((f, dict(data)))
    return files


def load_matrix(directory: Path | None = None) -> list[Variant]:
    """All rows of every ``matrix/*.yaml``, in file then row order."""
    rows: list[Variant] = []
    for _, data in matrix_files(directory):
        for row in data.get("rows", []):
            rows.append(
                Variant(
                    name=row["name"],
                    platform=row["platform"],
                    description=row.get("description", ""),
                    os=tuple(row.get("os", ())),
                    arch=tuple(row.get("arch", ())),
                    tools=dict(row.get("tools", {})),
                    intent={k: str(v) for k, v in row["intent"].items()},
                    cuda_archs=tuple(row.get("cuda_archs", ())),
                    ci=bool(row.get("ci", False)),
                    default=bool(row.get("default", False)),
                    engines=tuple(row.get("engines", ())),
                    extra=dict(row.get("extra", {})),
                    target=str(row.get("target", "")),
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


def intent_defines(engine: EngineSpec, key: str, value: str) -> dict[str, str] | None:
    """How ``engine`` spells one intent (``gpu``, ``none``) as CMake defines; None when it does not
    map it (an empty dict is a mapping: the intent needs no define for this engine)."""
    mapped = with_current_build_data(engine).intents.get(key, {}).get(value)
    return None if mapped is None else dict(mapped)


def unmapped_intents(engine: EngineSpec, variant: Variant) -> list[str]:
    """The row's intent entries the engine's descriptor does not map (``gpu: metal``)."""
    return [f"{k}: {v}" for k, v in variant.intent.items() if intent_defines(engine, k, v) is None]


def _descriptor(engine: EngineSpec) -> str:
    path = engine.root / "engine.yaml"
    root = paths.project_root()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def engine_support(engine: EngineSpec, variant: Variant) -> str | None:
    """None when ``engine`` builds ``variant``; else why not (the row's ``engines:``, the descriptor's
    ``variants:`` list or its intent map)."""
    where = _descriptor(engine)
    if variant.engines and engine.name not in variant.engines:
        return (f"not supported by {engine.name}: the row is for {', '.join(variant.engines)} only "
                "(engines: in the matrix)")
    if engine.variants and variant.name not in engine.variants:
        return (f"not supported by {engine.name}: its descriptor builds only {', '.join(engine.variants)} "
                f"(variants: in {where})")
    unmapped = unmapped_intents(engine, variant)
    if unmapped:
        return (f"not supported by {engine.name}: its descriptor does not map the row's intent "
                f"{', '.join(unmapped)} (cmake.intents in {where})")
    return None


def row_defines(engine: EngineSpec, variant: Variant) -> dict[str, str]:
    """The row's intent in ``engine``'s CMake spelling, in the row's intent order."""
    unmapped = unmapped_intents(engine, variant)
    if unmapped:
        msg = (f"variant {variant.name} is not supported by {engine.name}: its descriptor does not map "
               f"{', '.join(unmapped)} (add them under cmake.intents in {_descriptor(engine)})")
        raise UsageError(msg)
    defines: dict[str, str] = {}
    for k, v in variant.intent.items():
        defines.update(intent_defines(engine, k, v) or {})
    return defines


def buildability(pm: pluggy.PluginManager, variant: Variant, host: HostInfo,
                 engine: EngineSpec | None = None) -> Buildability:
    """Ask the plugin owning ``variant.platform``; no owner means not buildable.

    With ``engine``, a row that engine does not build is not buildable (the reason says why);
    without one, a note names every known engine that does not build it.
    """
    result: Buildability | None = pm.hook.harness_variant_requirements(variant=variant, host=host)
    if result is None:
        result = Buildability(variant=variant.name, buildable=False, runnable=False,
                              reasons=(f"no plugin implements platform {variant.platform!r}",))
    if engine is not None:
        reason = engine_support(engine, variant)
        if reason:
            return dataclasses.replace(result, buildable=False, runnable=False, reasons=(reason, *result.reasons))
        return result
    notes = engine_notes(variant)
    return dataclasses.replace(result, notes=(*result.notes, *notes)) if notes else result


def engine_notes(variant: Variant) -> list[str]:
    """``not supported by <engine>: ...`` for each engine with a descriptor that does not build the row."""
    notes = []
    for name in engine_names():
        try:
            reason = engine_support(load_engine(name), variant)
        except ConfigError as e:
            reason = f"{name}: descriptor invalid ({str(e).splitlines()[-1]})"
        if reason:
            notes.append(reason)
    return notes
