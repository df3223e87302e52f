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


def peer(ctx: QualifyContext, *, fixture: str) -> StageResult:
    """Our cpu build (B) against the engine's peer baseline (A) on the fixture model ``fixture``."""
    if not ctx.options.run_bench:
        raise SkippedStage("disabled (--no-bench)")
    engine = ctx.engine
    from harness.engine.qualify_settings import qualify_settings

    baseline = qualify_settings(engine).bench_peer
    if not baseline:
        raise SkippedStage(f"no peer baseline for {engine.name} (qualify.bench_peer in its engine.yaml)")
    if "cpu" not in ctx.product("build", Built).variants:
        raise SkippedStage("the cpu variant (our bench arm) was not built in this run")
    model = ctx.product("models", Models).path(fixture)
    if not model:
        raise SkippedStage(f"no fixture model {fixture} (`harness models fetch` writes the fixtures)")
    from harness.bench.roofline import measure_host
    from harness.core import host as hostmod

    return peer_bench(engine, baseline, model, ctx.plan.for_model(fixture), out=ctx.report / "bench", report_root=ctx.report,
                      host=hostmod.as_dict(ctx.host), host_measure=measure_host())


def old_pin(ctx: QualifyContext, fixture: str | None = None) -> StageResult:
    """This pin (B) against the old one (A), each cpu artifact through the engine's own benchmark tool, on one
    bench model (``fixture``; None: the last, the bandwidth-bound one where the descriptor lists it): wall-clock
    ABBA, and the simulation instrument where the model has run lengths (``qualify.bench.simulation``), so a
    code-path change of the move is decided on a noisy host too."""
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

    models = ctx.product("models", Models)
    if fixture is None:  # the last bench model: the bandwidth-bound one where the descriptor lists it
        fixture = next((v for v in reversed(ctx.plan.models) if models.path(v)), None)
    model = models.path(fixture) if fixture else None
    if model is None or fixture is None:
        raise SkippedStage(f"none of the bench models ({', '.join(ctx.plan.models)}) is in place")
    first = not ctx.plan.models or fixture == ctx.plan.models[0]
    return old_pin_bench(ctx.engine, old, artifact_dir(ctx.engine, get_variant("cpu")), model,
                         ctx.report / ("bench-old-pin" if first else f"bench-old-pin-{fixture}"),
                         host=hostmod.as_dict(ctx.host), plan=ctx.plan.for_model(fixture),
                         host_measure=measure_host(), fixture=fixture)


def simulate_pair(plan: BenchPlan, fixture: str, a: tuple[str, Mapping[str, Any]], b: tuple[str, Mapping[str, Any]],
                  *, out: Path, gate: Mapping[str, float]) -> tuple[Any, str | None]:
    """Arms A and B (kind, options) under the simulation instrument when the plan has it:
    (:class:`~harness.bench.simulation.SimResult`, None), or (None, why it did not run)."""
    if "simulation" not in plan.instruments:
        return None, "not in this run's instruments"
    shape = plan.sim_plan(fixture)
    if shape is None:
        return None, (f"qualify.bench.simulation names no run lengths for {fixture} (a bandwidth-bound model: "
                      "simulation does not model DRAM bandwidth; the code path is simulated on the other bench model)")
    from harness.bench import simulation
    from harness.core.errors import HostError

    level = simulation.level_for_host()
    try:
        ta = simulation.target_for(a[0], a[1], level=level)
        tb = simulation.target_for(b[0], b[1], level=level)
        return simulation.simulate(ta, tb, shape, out, gate=gate, level=level), None
    except HostError as e:
        return None, str(e)


def _gate_pcts(outcome: Any, plan_gate: Mapping[str, float]) -> dict[str, float]:
    """prefill/decode -> percent, from the run's gate checks (or the plan's ``all``)."""
    pcts: dict[str, float] = {}
    if outcome.gate is not None:
        for c in outcome.gate.checks:
            pcts.setdefault(c.label.split(" @ ", 1)[0], c.threshold_pct)
    for metric in ("prefill", "decode"):
        if metric not in pcts and (metric in plan_gate or "all" in plan_gate):
            pcts[metric] = float(plan_gate.get(metric, plan_gate.get("all", 0.0)))
    return pcts


def bench_stage_result(outcome: Any, report_root: Path, model: str, *, label: str | None = None,
                       extra: Mapping[str, Any] | None = None, sim: Any = None, sim_note: str | None = None,
                       advisory: bool = False) -> StageResult:
    """A bench stage's result: the report's place, headline, each gate's decision (which instrument
    decided it: :mod:`harness.bench.verdict`), stop. Failed when a gate failed; undecided when one
    was decided by nothing, unless ``advisory`` (a peer comparison simulation cannot run: then a
    warning that says so); a warning when simulation decided what wall-clock could not resolve.
    ``label`` replaces the model name at the head of the summary, ``extra`` adds data."""
    from harness.bench.verdict import decide, overall

    files = outcome.files
    rel = str(files.directory.relative_to(report_root))
    state = outcome.result.system
    decisions = decide(outcome.gate, sim)
    data = {"report": rel, "markdown": files.markdown.read_text(), "model": model,
            "headline": [h.as_dict() for h in outcome.headline],
            "gate": None if outcome.gate is None else outcome.gate.as_dict(),
            "decisions": [d.as_dict() for d in decisions],
            "simulation": None if sim is None else sim.as_dict(),
            "simulation_markdown": None if sim is None else sim.markdown(),
            "simulation_note": sim_note,
            "stop": None if outcome.result.stop is None else outcome.result.stop.as_dict(),
            "blocks": outcome.result.blocks_run, "threads": None if state is None else state.threads,
            **(extra or {})}
    verdicts = "; ".join(f"{d.gate} {d.status}" + (f" ({d.instrument})" if d.instrument else "") for d in decisions)
    head = f"{label or model}: {outcome.summary()}"
    result = StageResult(head + (f"; decided: {verdicts}" if verdicts else ""), data)
    if outcome.result.aa and not outcome.analysis.aa_ok:
        raise StageFailed(result)
    status = overall(decisions) if decisions else ("passed" if outcome.passed else "FAILED")
    if status == "FAILED":
        raise StageFailed(result)
    if status == "undecided":
        if not advisory:
            raise StageUndecided(result)
        note = ("not decided on this host: wall-clock could not resolve the gate and simulation did not measure "
                f"these arms ({sim_note or 'no simulation target'}); advisory, not a pass of the gate")
        return StageResult(f"{result.summary}; {note}", {**data, "advisory": note}, status="warning")
    return StageResult(result.summary, data, status="warning" if status == "warning" else "passed")


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
    # the peer is a prebuilt wheel (one library, its own SIMD dispatch): no simulation target runs it
    return bench_stage_result(outcome, report_root, Path(model).name, advisory=True,
                              sim_note=f"no simulation target for the {peer} arm")


def old_pin_bench(engine: EngineSpec, old_opts: dict[str, str], new_artifact: Path, model: str, out: Path, *,
                  host: Mapping[str, Any], plan: BenchPlan, host_measure: Mapping[str, Any] | None = None,
                  fixture: str = "") -> StageResult:
    """Old pin (A) vs this pin (B), each through its own cpu artifact's benchmark tool, in ABBA blocks."""
    from harness.bench.arms import ArmSpec, prepare_options
    from harness.bench.session import run_and_report
    from harness.engine import registry

    kind = registry.get(engine.name).old_pin_bench_arm
    if kind is None:
        raise SkippedStage(f"engine {engine.name} names no benchmark tool for old pin vs new pin")
    common = {"model": model, "threads": plan.threads, "variant": "cpu", "engine": engine.name}
    # builds the old pin's recipe when needed
    a_opts = prepare_options(kind, {**old_opts, **common}) or {**old_opts, **common}
    label = old_opts.get("pin") or old_opts.get("rev")
    a = ArmSpec(kind=kind, name=f"{kind} {label}", options=a_opts)
    b = ArmSpec(kind=kind, name=f"{kind} {engine.pin}", options={**common, "artifact": str(new_artifact)})
    sim, note = simulate_pair(plan, fixture, (kind, {**a.options, "name": a.name}), (kind, {**b.options, "name": b.name}),
                              out=out / "simulation", gate=_sim_gate(plan.gate))
    outcome = run_and_report(a, b, plan.config((1,)), name=f"old-pin-{label}-vs-{engine.pin}", out=out, host=host,
                             host_measure=host_measure, gate=plan.gate, threads_source=plan.threads_source)
    return bench_stage_result(outcome, out.parent, Path(model).name, sim=sim, sim_note=note, advisory=sim is None)


def _sim_gate(gate: Mapping[str, float]) -> dict[str, float]:
    """The plan's gate as simulation reads it: prefill and decode (aggregate has no one-stream figure)."""
    out = {m: float(gate[m]) for m in ("prefill", "decode") if m in gate}
    if "all" in gate:
        out = {"prefill": float(gate["all"]), "decode": float(gate["all"]), **out}
    return out
