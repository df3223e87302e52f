"""Qualification: the whole pipeline for one engine pin on this host, with one report.

fetch -> patch (+check) -> ABI check -> build default variants -> binding -> models
-> e2e specs per variant -> cross-variant check -> ABBA bench vs the peer -> report.

Every stage is recorded (passed / failed / skipped, seconds, figures). A failed
stage skips the stages that need it; the run fails if any stage failed.

The package: :mod:`~harness.qualify.stages` (one module per stage or stage family, listed in
order by :func:`~harness.qualify.stages.stages_for`), :mod:`~harness.qualify.runner` (order,
skipping, timing, the hand-off between stages), :mod:`~harness.qualify.context` (what every stage
reads), :mod:`~harness.qualify.bench_plan` and :mod:`~harness.qualify.report` (qualify.json/.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from harness.qualify.context import QualifyContext, QualifyOptions
from harness.qualify.report import render_markdown, write_qualification
from harness.qualify.result import SkippedStage, StageFailed, StageResult
from harness.qualify.runner import Qualification, Stage, StageRecord

__all__ = ["Qualification", "QualifyContext", "QualifyOptions", "SkippedStage", "Stage", "StageFailed",
           "StageRecord", "StageResult", "qualify", "render_markdown", "write_qualification"]


def qualify(engine_name: str | None = None, *, bench_blocks: int | None = None, bench_pn: int | None = None,
            bench_gn: int | None = None, bench_concurrency: tuple[int, ...] = (1, 4), out: Path | None = None,
            run_bench: bool = True, old_pin: str | None = None, old_rev: str | None = None,
            threads: int | None = None, fail_on_slower: Sequence[str] | None = None,
            until_halfwidth: float | None = None, max_blocks: int | None = None,
            variant: str | None = None, arch: Sequence[str] | None = None,
            instruments: Sequence[str] | None = None) -> tuple[Qualification, Path]:
    """Every stage for the engine's pin; with ``old_pin``/``old_rev`` also the pin move's PR material:
    the ABI/API diff from the old pin and an old-vs-new ABBA run of the engine's own benchmark tool
    on the cpu variant. ``engine_name`` None: the default text engine.

    The bench stages run on every model of the descriptor's ``qualify.bench.models``, adaptively
    (``until_halfwidth``, ``max_blocks``; 0 for a fixed ``bench_blocks``), and fail on the gate
    (``fail_on_slower``, default from the descriptor); ``threads`` defaults to the physical cores.
    ``variant``: the matrix rows to build and test (fnmatch patterns), instead of the default rows.

    ``arch``: the architectures whose cross-built rows (``target:`` in the matrix) are built and
    qualified under emulation; None: every cross row this host can build and run (its toolchain
    is installed); ``[]``: none."""
    from harness.core import host as hostmod
    from harness.core import paths
    from harness.engine import registry
    from harness.engine.descriptor import load_engine
    from harness.engine.plugin import get_manager
    from harness.qualify.bench_plan import bench_plan
    from harness.qualify.stages import stages_for

    pm = get_manager()
    engine = load_engine(engine_name or registry.default("text").name)
    plan = bench_plan(engine, blocks=bench_blocks, pn=bench_pn, gn=bench_gn, concurrency=bench_concurrency,
                      until_halfwidth=until_halfwidth, max_blocks=max_blocks, fail_on_slower=fail_on_slower,
                      threads=threads, instruments=instruments)
    q = Qualification(engine=engine.name)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    report = (out or paths.reports_dir()) / f"{stamp}-qualify-{engine.name}"
    report.mkdir(parents=True, exist_ok=True)
    ctx = QualifyContext(engine=engine, pm=pm, host=hostmod.probe(), plan=plan, report=report,
                         options=QualifyOptions(run_bench=run_bench, old_pin=old_pin, old_rev=old_rev,
                                                variant=variant, arch=None if arch is None else tuple(arch)))
    q.header.update(_header(ctx))
    q.run_stages(stages_for(ctx), ctx)
    return q, write_qualification(q, report)


def _header(ctx: QualifyContext) -> dict[str, object]:
    """What qualify.json says about the run before its stages: engine, pin, host, plan."""
    from harness.core import host as hostmod
    from harness.pin import describe, source_arg
    from harness.runtime.levels import LEVEL_ENV

    engine, plan = ctx.engine, ctx.plan
    old: dict[str, object] | None = None
    if ctx.options.old_pin or ctx.options.old_rev:
        from harness.build import recipes

        spec = recipes.resolve(engine.name, pin=ctx.options.old_pin, rev=ctx.options.old_rev)
        old = {"pin": spec.pin, "source": describe(spec.raw["source"]), "upstream": spec.upstream,
               "recipe_commit": spec.recipe_commit or None, "asked": ctx.options.old_rev or ctx.options.old_pin,
               "how": "--old-rev" if ctx.options.old_rev else "--old-pin"}
    return {"engine": engine.name, "pin": engine.pin, "upstream": engine.upstream,
            "source": describe(engine.raw["source"]), "source_arg": source_arg(engine.raw["source"]),
            "recipe": _checkout_state(), "old": old,
            "host": hostmod.as_dict(ctx.host), "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "threads": plan.threads, "threads_source": plan.threads_source, "bench_plan": plan.as_dict(),
            # a level forced for the whole run (HARNESS_CPU_LEVEL): `report merge` names it per host
            "cpu_level_forced": os.environ.get(LEVEL_ENV) or None, "variant_pattern": ctx.options.variant}


def _checkout_state() -> dict[str, object] | None:
    """The commit the working tree's recipe sits on, and whether it has edits (a report says which recipe ran)."""
    import subprocess

    from harness.core import paths

    root = paths.project_root()
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30, check=False)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "engines"], capture_output=True,
                               text=True, timeout=30, check=False)
    except OSError:
        return None
    if head.returncode:
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
