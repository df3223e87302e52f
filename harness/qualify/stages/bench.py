"""The benchmark stages: our build against the engine's peer on each bench model, and this pin
against the old one through the engine's own benchmark tool.

They run the :class:`~harness.qualify.bench_plan.BenchPlan` of the context. A stage whose gate
fails is failed with its figures kept (:class:`~harness.qualify.result.StageFailed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.core.types import EngineSpec
from harness.qualify.bench_plan import BenchPlan
from harness.qualify.context import NO_OLD_PIN, Built, Models, QualifyContext
from harness.qualify.result import SkippedStage, StageFailed, StageResult, StageUndecided


def peer(ctx: QualifyContext, *, model_var: str) -> StageResult:
    """Our cpu build (B) against the engine's peer baseline (A) on the model ``model_var`` names."""
    if not ctx.options.run_bench:
        raise SkippedStage("disabled (--no-bench)")
    engine = ctx.engine
    baseline = engine.raw.get("qualify", {}).get("bench_peer")
    if not baseline:
        raise SkippedStage(f"no peer baseline for {engine.name} (qualify.bench_peer in its engine.yaml)")
    if "cpu" not in ctx.product("build", Built).variants:
        raise SkippedStage("the cpu variant (our bench arm) was not built in this run")
    model = ctx.product("models", Models).env.get(model_var)
    if not model:
        raise SkippedStage(f"no {model_var} model (`harness models fetch` writes the fixtures)")
    from harness.bench.roofline import measure_host
    from harness.core import host as hostmod

    return peer_bench(engine, baseline, model, ctx.plan, out=ctx.report / "bench", report_root=ctx.report,
                      host=hostmod.as_dict(ctx.host), host_measure=measure_host())


def old_pin(ctx: QualifyContext) -> StageResult:
    """This pin (B) against the old one (A), each cpu artifact through the engine's own benchmark tool."""
    opts = ctx.options
    if not (opts.old_pin or opts.old_rev):
        raise SkippedStage(NO_OLD_PIN)
    if not opts.run_bench:
        raise SkippedStage("disabled (--no-bench)")
    if "cpu" not in ctx.product("build", Built).variants:
        raise SkippedStage("the cpu variant was not built")
    old: dict[str, str] = {"pin": opts.old_pin} if opts.old_pin else {"rev": str(opts.old_rev)}
    from harness.bench.roofline import measure_host
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant
    from harness.core import host as hostmod

    env = ctx.product("models", Models).env
    # the last bench model: the bandwidth-bound one where the descriptor lists it, where kernels show
    model = next((env[v] for v in reversed(ctx.plan.models) if v in env), None)
    if model is None:
        raise SkippedStage(f"none of the bench models ({', '.join(ctx.plan.models)}) is in place")
    return old_pin_bench(ctx.engine, old, artifact_dir(ctx.engine, get_variant("cpu")), model,
                         ctx.report / "bench-old-pin", host=hostmod.as_dict(ctx.host), plan=ctx.plan,
                         host_measure=measure_host())


def bench_stage_result(outcome: Any, report_root: Path, model: str, *, label: str | None = None,
                  extra: Mapping[str, Any] | None = None) -> StageResult:
    """A bench stage's result: the report's place, headline, gate and stop; failed when the gate failed.
    ``label`` replaces the model name at the head of the summary, ``extra`` adds data."""
    files = outcome.files
    rel = str(files.directory.relative_to(report_root))
    state = outcome.result.system
    data = {"report": rel, "markdown": files.markdown.read_text(), "model": model,
            "headline": [h.as_dict() for h in outcome.headline],
            "gate": None if outcome.gate is None else outcome.gate.as_dict(),
            "stop": None if outcome.result.stop is None else outcome.result.stop.as_dict(),
            "blocks": outcome.result.blocks_run, "threads": None if state is None else state.threads,
            **(extra or {})}
    result = StageResult(f"{label or model}: {outcome.summary()}", data)
    if outcome.gate is not None and outcome.gate.status == "undecided" and not (outcome.result.aa and not
                                                                               outcome.analysis.aa_ok):
        raise StageUndecided(result)
    if not outcome.passed:
        raise StageFailed(result)
    return result


def peer_bench(engine: EngineSpec, peer: str, model: str, plan: BenchPlan, *, out: Path, report_root: Path,
               host: Mapping[str, Any], host_measure: Mapping[str, Any] | None) -> StageResult:
    """The engine's peer (A) against our cpu build (B) on ``model``."""
    from harness.bench.arms import ArmSpec
    from harness.bench.session import run_and_report

    # Both arms get a context that holds every concurrent request whole.
    n_ctx = max(plan.concurrency) * (plan.pn + plan.gn) + 64
    common = f"model={model},threads={plan.threads},n_ctx={n_ctx},max_num_seqs={max(plan.concurrency)}"
    a = ArmSpec.parse(f"{peer}:{common}")
    b = ArmSpec.parse(f"in-process:{common},variant=cpu")
    outcome = run_and_report(a, b, plan.config(), name=f"qualify-{engine.name}-{engine.pin}-{Path(model).stem}",
                             out=out, host=host, host_measure=host_measure, gate=plan.gate,
                             threads_source=plan.threads_source)
    return bench_stage_result(outcome, report_root, Path(model).name)


def old_pin_bench(engine: EngineSpec, old_opts: dict[str, str], new_artifact: Path, model: str, out: Path, *,
                  host: Mapping[str, Any], plan: BenchPlan, host_measure: Mapping[str, Any] | None = None) -> StageResult:
    """Old pin (A) vs this pin (B), each through its own cpu artifact's benchmark tool, in ABBA blocks."""
    from harness.bench.arms import ArmSpec
    from harness.bench.session import run_and_report
    from harness.engine import registry
    from harness.engine.plugin import get_manager

    kind = registry.get(engine.name).old_pin_bench_arm
    if kind is None:
        raise SkippedStage(f"engine {engine.name} names no benchmark tool for old pin vs new pin")
    common = {"model": model, "threads": plan.threads, "variant": "cpu", "engine": engine.name}
    # builds the old pin's recipe when needed
    a_opts = get_manager().hook.harness_bench_arm_prepare(kind=kind, options={**old_opts, **common})
    label = old_opts.get("pin") or old_opts.get("rev")
    a = ArmSpec(kind=kind, name=f"{kind} {label}", options=a_opts)
    b = ArmSpec(kind=kind, name=f"{kind} {engine.pin}", options={**common, "artifact": str(new_artifact)})
    outcome = run_and_report(a, b, plan.config((1,)), name=f"old-pin-{label}-vs-{engine.pin}", out=out, host=host,
                             host_measure=host_measure, gate=plan.gate, threads_source=plan.threads_source)
    return bench_stage_result(outcome, out.parent, Path(model).name)
