"""The matrix for CI runners: ``harness matrix --ci github`` hands the work to the CI a team runs.

The harness does not schedule builds across machines. It prints a GitHub Actions
``strategy.matrix`` (``{"include": [...]}``) the way cibuildwheel prints its build identifiers:
one entry per engine x matrix row x os/arch, the runner label for that os/arch from the
``runners:`` mapping in ``matrix/*.yaml``, and the nox session (with its posargs) that qualifies
the row there. ``.github/workflows/qualify.yml`` feeds it to ``fromJSON``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, UsageError

#: CI systems ``--ci`` knows.
CI_SYSTEMS = ("github",)

#: The nox session each entry runs; its posargs reach ``harness qualify``.
SESSION = "qualify"


@dataclass(frozen=True, kw_only=True)
class Runner:
    """Where builds for one os/arch run."""

    os: str
    arch: str
    github: str | tuple[str, ...]
    """The job's ``runs-on``: one label, or several (a self-hosted runner's)."""
    note: str = ""


def load_runners(directory: Path | None = None) -> list[Runner]:
    """The ``runners:`` of every ``matrix/*.yaml``; an os/arch listed twice is a config error."""
    from harness.build.matrix import matrix_files
    runners: list[Runner] = []
    for f, data in matrix_files(directory):
        for r in data.get("runners", []):
            gh = r["github"]
            runner = Runner(os=r["os"], arch=r["arch"], github=gh if isinstance(gh, str) else tuple(gh),
                            note=r.get("note", ""))
            if any((x.os, x.arch) == (runner.os, runner.arch) for x in runners):
                msg = f"{f}: runner for {runner.os}/{runner.arch} listed twice; keep one entry per os/arch"
                raise ConfigError(msg)
            runners.append(runner)
    return runners


@dataclass(frozen=True)
class CiMatrix:
    """The entries, and why rows or os/arch pairs got none (said on stderr, not in the JSON)."""

    include: list[dict[str, Any]]
    notes: list[str]

    def as_strategy(self) -> dict[str, Any]:
        return {"include": self.include}


def github_matrix(engine: str | None = None, variant: str | None = None,
                  directory: Path | None = None) -> CiMatrix:
    """One entry per engine x row x (os, arch) with a runner. Without ``variant``, the rows marked
    ``ci: true``; with it, the rows it matches (fnmatch, comma-separated). Without ``engine``, every
    engine that builds the row."""
    from harness.build.matrix import load_matrix
    from harness.build.pipeline import rows_for
    from harness.engine.descriptor import engine_names, load_engine

    matrix = load_matrix(directory)
    engines = [load_engine(engine)] if engine else [load_engine(n) for n in engine_names()]
    runners = load_runners(directory)
    include: list[dict[str, Any]] = []
    notes: list[str] = []
    for e in engines:
        chosen = rows_for(e, variant, where=None if variant else (lambda r: r.ci), matrix=matrix)
        notes += [f"{e.name} {row.name}: {why}" for row, why in chosen.skipped]
        for row in chosen.rows:
            for runner in runners:
                if runner.os not in row.os or runner.arch not in row.arch:
                    continue
                include.append({
                    "name": f"{SESSION}-{e.name}-{row.name}-{runner.os}-{runner.arch}",
                    "engine": e.name, "variant": row.name, "os": runner.os, "arch": runner.arch,
                    "runner": runner.github if isinstance(runner.github, str) else list(runner.github),
                    "session": SESSION, "args": _qualify_args(e.name, row.name, row.target),
                })
            uncovered = [o for o in row.os if not any(r.os == o and r.arch in row.arch for r in runners)]
            if uncovered:
                notes.append(f"{e.name} {row.name}: no runner for {', '.join(uncovered)} "
                             f"({'/'.join(row.arch)}; runners: in matrix/*.yaml)")
    if not include:
        msg = ("no CI entry: " + ("; ".join(notes) if notes else "no row selected")
               + ". Pick rows with --variant, or add runners for their os/arch to matrix/*.yaml")
        raise UsageError(msg)
    return CiMatrix(include=include, notes=notes)


def _qualify_args(engine: str, row: str, target: str | None) -> str:
    """``harness qualify`` arguments for one entry. A cross-built row (``target:``) is qualified by
    the emulated stage of a run on the host's own cpu row: ``--arch`` names the target's architecture."""
    if target:
        return f"{engine} --variant cpu --arch {target.split('-', 1)[0]}"
    return f"{engine} --variant {row}"

