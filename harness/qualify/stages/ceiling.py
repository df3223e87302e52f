"""The engine-ceiling stage: our binding against the engine's own benchmark tool on the same artifact.

Same CPU level, model and shape, one stream; the binding may not be slower than the descriptor's
``qualify.ceiling.min_ratio`` of the tool. It runs before the peer benchmark: a binding below its
engine's ceiling makes every comparison with a peer a statement about the binding, not the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.core.types import EngineSpec
from harness.engine.qualify_settings import CEILING_MIN_RATIO, qualify_settings
from harness.qualify.bench_plan import BenchPlan
from harness.qualify.context import Built, Models, QualifyContext
from harness.qualify.result import SkippedStage, StageResult

__all__ = ["CEILING_MIN_RATIO", "ceiling", "ceiling_bench", "ceiling_min_ratio"]


def ceiling(ctx: QualifyContext, *, fixture: str) -> StageResult:
    """The stage: the ceiling run on the fixture model ``fixture``, with the cpu row's artifact."""
    if not ctx.options.run_bench:
        raise SkippedStage("disabled (--no-bench)")
    if "cpu" not in ctx.product("build", Built).variants:
        raise SkippedStage("the cpu variant (the binding's and the tool's artifact) was not built in this run")
    model = ctx.product("models", Models).path(fixture)
    if not model:
        raise SkippedStage(f"no fixture model {fixture} (`harness models fetch` writes the fixtures)")
    from harness.bench.roofline import measure_host
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant
    from harness.core import host as hostmod

    return ceiling_bench(ctx.engine, artifact_dir(ctx.engine, get_variant("cpu")), model, ctx.plan.for_model(fixture),
                         out=ctx.report / "ceiling", report_root=ctx.report, host=hostmod.as_dict(ctx.host),
                         host_measure=measure_host(), fixture=fixture)


def ceiling_min_ratio(engine: EngineSpec) -> float:
    """The descriptor's floor (its schema keeps it in (0, 1]), else :data:`CEILING_MIN_RATIO`."""
    return qualify_settings(engine).ceiling_min_ratio


def ceiling_bench(engine: EngineSpec, artifact: Path, model: str, plan: BenchPlan, *, out: Path, report_root: Path,
                  host: Mapping[str, Any], host_measure: Mapping[str, Any] | None,
                  fixture: str = "") -> StageResult:
    """The engine ceiling: the engine's own benchmark tool (A) against our binding (B) on the same
    artifact, CPU level, model and shape, one stream; B may not be slower than ``min_ratio`` of A
    (a binding that loads the model or runs its batches differently shows here, on any host).

    Decided by simulation first (the binding's overhead is a code path: instructions and simulated
    misses per token, one thread, a level Valgrind executes), then wall-clock ABBA at the host's
    threads and level, which alone sees threading (an OpenMP team stalled behind a loader thread)."""
    from harness.bench.arms import ArmSpec, prepare_options
    from harness.bench.session import run_and_report
    from harness.engine import registry
    from harness.qualify.stages.bench import bench_stage_result, simulate_pair

    kind = registry.get(engine.name).old_pin_bench_arm
    if kind is None:
        raise SkippedStage(f"engine {engine.name} names no benchmark tool of its own (old_pin_bench_arm)")
    ratio = ceiling_min_ratio(engine)
    pct = round(100 * (1 - ratio), 3)
    common = {"model": model, "threads": plan.threads, "variant": "cpu", "engine": engine.name}
    a_opts = prepare_options(kind, {**common, "artifact": str(artifact)}) or {**common, "artifact": str(artifact)}
    a = ArmSpec(kind=kind, name=kind, options=a_opts)
    b = ArmSpec.parse(f"in-process:model={model},threads={plan.threads},n_ctx={plan.pn + plan.gn + 64},"
                      f"max_num_seqs=1,variant=cpu,name=binding")
    sim, note = simulate_pair(plan, fixture, (kind, {**common, **a_opts, "name": kind}),
                              ("in-process", {"model": model, "variant": "cpu", "engine": engine.name, "name": "binding"}),
                              out=out / "simulation", gate={"prefill": pct, "decode": pct})
    config = plan.config((1,))
    if config.until_halfwidth is not None:
        # a ratio near 1.0 passes a PCT gate only with a half-width under PCT: aim at half of it
        config = dataclasses.replace(config, until_halfwidth=min(config.until_halfwidth, pct / 2))
    outcome = run_and_report(a, b, config, name=f"ceiling-{engine.name}-{engine.pin}-{Path(model).stem}",
                             out=out, host=host, host_measure=host_measure, gate={"prefill": pct, "decode": pct},
                             threads_source=plan.threads_source)
    tool = outcome.result.describe.get("A") or {}  # the tool's arm runs the level the binding runs
    level = tool.get("cpu_level")
    return bench_stage_result(outcome, report_root, Path(model).name,
                         label=f"{Path(model).name}, cpu level {level or '?'}, binding / {kind} (floor {ratio:.2f}x)",
                         extra={"min_ratio": ratio, "cpu_level": level, "commands": list(tool.get("commands") or [])},
                         sim=sim, sim_note=note, advisory=sim is None)
