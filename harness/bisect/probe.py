"""One commit of a bisect built: fetched, patched, one CPU level, only the programs its gate runs.

The commit's recipe is the engine's descriptor with the source moved to the commit (a git source of
the repository being bisected) and ``upstream.commit`` set to it; the build number is 0 (a commit
between two pins has none). The descriptor's ``bisect:`` block says which defines build a single CPU
level (``bisect.levels.<level>``, on top of the cpu row's) and which programs a gate needs
(``bisect.programs.<kind>``). The ABI check is not run: a probe builds the engine's own programs,
never the binding, and the C surface of a commit between two pins is whatever it is.

A commit whose patch series does not apply, or that does not build, is a :class:`Unbuildable`: the
search skips it (``git bisect skip``) and the result lists it with the reason.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import (
    BuildError,
    ConfigError,
    HarnessError,
    PatchError,
    SourceError,
    UsageError,
)
from harness.core.types import EngineSpec, SourceSpec, Variant

#: The bench level's stand-in where CPU simulation has no forced level (not x86-64): a native build.
NATIVE = "native"


class Unbuildable(HarnessError):
    """This commit cannot be probed (its patches do not apply, it does not configure or compile): skipped."""


@dataclass(frozen=True, kw_only=True)
class Built:
    commit: str
    artifact: Path
    built: bool
    seconds: float
    ccache: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "artifact": str(self.artifact), "built": self.built,
                "seconds": round(self.seconds, 1), "ccache": self.ccache}


def probe_level() -> str:
    """The CPU level a probe holds: the one CPU simulation runs (haswell on x86-64), else a native build."""
    from harness.bench.simulation import level_for_host

    return level_for_host() or NATIVE


def level_defines(engine: EngineSpec, level: str) -> dict[str, str]:
    block = dict(engine.raw.get("bisect", {}).get("levels", {}))
    if level not in block:
        where = engine.root / "engine.yaml"
        known = ", ".join(sorted(block)) or "none"
        msg = (f"{where} says no CMake defines for a build of CPU level {level} alone (bisect.levels.{level}; it maps: "
               f"{known}). A bisect builds one level per commit, the one its instrument runs: add the defines "
               f"that build only {level} on top of the cpu row's")
        raise ConfigError(msg)
    return {k: str(v) for k, v in dict(block[level]).items()}


def programs(engine: EngineSpec, gate_kind: str) -> tuple[str, ...]:
    """The programs ``bisect.programs`` names for a gate of ``gate_kind`` (CMake targets, collected into bin/);
    empty: the descriptor's targets and ``artifacts.bin`` stand."""
    return tuple(engine.raw.get("bisect", {}).get("programs", {}).get(gate_kind) or ())


def probe_spec(engine: EngineSpec, *, url: str, commit: str, gate_kind: str, filter: str = "",
               sparse: tuple[str, ...] = ()) -> EngineSpec:
    """The engine's recipe at ``commit`` of the repository ``url``: what :func:`build` builds."""
    from harness.engine.descriptor import expand_upstream

    base = engine.source
    source = SourceSpec(kind="git", url=url, commit=commit, subdir=base.subdir if base.kind == "git" else "",
                        filter=filter, sparse=tuple(sparse))
    upstream = {**engine.upstream, "commit": commit, "build": 0}
    raw_base = dict(engine.raw.get("cmake", {}).get("base", {}))
    cmake = {**engine.cmake, "base": {k: expand_upstream(str(v), upstream) for k, v in raw_base.items()}}
    named = programs(engine, gate_kind)
    artifacts = {**engine.artifacts, "bin": named or tuple(engine.artifacts.get("bin", ()))}
    return dataclasses.replace(engine, source=source, upstream=upstream, cmake=cmake, targets=named or engine.targets,
                               artifacts=artifacts)


def cpu_row(level: str, gate_kind: str) -> Variant:
    """The cpu row as a probe builds it: one level, named for the level and the gate kind (a probe for a speed
    gate and one for an agreement gate build other programs: their artifacts must not overwrite each other)."""
    from harness.build.matrix import get_variant

    return dataclasses.replace(get_variant("cpu"), name=f"cpu-{level}-{gate_kind}",
                               description=f"one CPU level ({level}), the programs of a {gate_kind} gate: a bisect probe",
                               default=False, ci=False)


def build(engine: EngineSpec, *, level: str, gate_kind: str, patches: bool = True) -> Built:
    """fetch -> patch -> build of ``engine`` (a :func:`probe_spec`) at one CPU level; a no-op when stamped.
    ``patches=False`` builds the upstream commit as it is (the engine's patch series left out)."""
    from harness.build import cmake
    from harness.build.pipeline import _pm
    from harness.core import host as hostmod
    from harness.core import paths
    from harness.source.cache import checking
    from harness.source.patches import apply_series, load_series

    t0 = time.perf_counter()
    pm = _pm(None)
    commit = engine.source.commit
    try:
        with checking():
            # the hook itself, not pipeline.fetch: a commit between two pins has no upstream build to check
            tree = pm.hook.harness_source_fetch(engine=engine.name, spec=engine.source, cache_dir=paths.sources_dir())
    except SourceError as e:
        # not the commit's fault (it is in the repository): the search stops rather than skip it
        hint = ("; the repository lacks objects the checkout needs (a mirror without its large blobs?): pass "
                "--filter blob:none and --sparse PATH for each path the build needs") if "corrupt" in str(e) or \
            "missing" in str(e) else ""
        msg = f"commit {commit[:12]} could not be checked out: {e}{hint}"
        raise SourceError(msg) from e
    if tree is None:
        msg = "no plugin fetches git sources (plugins/source_git.py): reinstall the harness"
        raise UsageError(msg)
    series = load_series(engine.patches_dir) if patches else []
    try:
        patched = apply_series(tree, series, engine=engine.name)
    except PatchError as e:
        msg = f"the patch series does not apply at {commit[:12]}: {_first_line(e)}"
        raise Unbuildable(msg) from e
    row = cpu_row(level, gate_kind)
    try:
        res = cmake.build(pm, engine, row, patched, hostmod.probe(), overrides=level_defines(engine, level))
    except BuildError as e:
        msg = f"{commit[:12]} does not build: {_first_line(e)}"
        raise Unbuildable(msg) from e
    return Built(commit=commit, artifact=res.artifact, built=res.built, seconds=time.perf_counter() - t0,
                 ccache=res.manifest.get("ccache"))


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if re.search(r"error|failed|conflict", ln, re.I)]
    return (lines[0] if lines else text.splitlines()[0] if text else type(e).__name__)[:300]
