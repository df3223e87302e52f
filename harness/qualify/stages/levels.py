"""The CPU-level stages: the smoke probe of the level ggml picks here, the static ISA audit of
every level, and the cross-variant greedy check (every level that runs here, against each other)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.errors import AuditError, EngineCrashError, HarnessError
from harness.qualify.context import Built, Models, QualifyContext
from harness.qualify.result import SkippedStage, StageFailed, StageResult

NO_CPU_ROW = "the cpu variant (the one with CPU levels) was not built"


def _cross_variant_configured(ctx: QualifyContext) -> None:
    from harness.engine.qualify_settings import qualify_settings

    if not qualify_settings(ctx.engine).cross_variant:
        raise SkippedStage(f"not configured for {ctx.engine.name} (qualify.cross_variant in its engine.yaml)")


def smoke(ctx: QualifyContext) -> StageResult:
    """The level ggml chooses on this host passes the smoke probe, probed afresh."""
    _cross_variant_configured(ctx)
    if "cpu" not in ctx.product("build", Built).variants:
        raise SkippedStage(NO_CPU_ROW)
    from harness.runtime import discovery, levels

    engine = ctx.engine
    fingerprint = discovery.committed_fingerprint(engine.name)
    lib = discovery.choose(engine.name, engine.pin, fingerprint, "cpu").location / "lib"
    v = levels.verdict(lib, refresh=True)  # a qualification always probes afresh
    if v.error:
        msg = f"the CPU-level smoke probe could not run: {v.error}"
        raise HarnessError(msg)
    if v.excluded:
        msg = "; ".join(f"cpu level {lvl}: {why}" for lvl, why in v.excluded.items()) + f"; users fall back to {v.chosen}"
        raise EngineCrashError(msg)
    return StageResult(f"{v.chosen} (ggml's choice here) passed the smoke probe in {v.seconds:.1f} s", v.as_dict())


def audit(ctx: QualifyContext) -> StageResult:
    """Every CPU level's instructions against the features its loader checks (no level is run)."""
    if "cpu" not in ctx.product("build", Built).variants:
        raise SkippedStage(NO_CPU_ROW)
    import platform

    from harness.audit.artifact import audit_engine, findings_lines
    from harness.core.host import normalize_arch
    from harness.core.types import PatchedTree

    arch = normalize_arch(platform.machine())
    if ctx.pm.hook.harness_artifact_cpu_levels(tree=ctx.product("patch", PatchedTree).path, arch=arch) is None:
        raise SkippedStage(f"{ctx.engine.name} builds no per-level CPU libraries for {arch} (no plugin defines CPU "
                           "levels in its source): one library, its ISA paths chosen at run time, nothing to audit")

    r = audit_engine(ctx.engine, "cpu")
    bad = findings_lines(r["levels"])
    if bad:
        raise AuditError("; ".join(bad))
    return StageResult(f"{len(r['levels'])} CPU levels clean ({r['arch']}, {r['seconds']:.1f} s)", r)


def cross_variant(ctx: QualifyContext) -> StageResult:
    """The engine's cross-variant check on the chat model: every level answers, token sequences compared."""
    _cross_variant_configured(ctx)
    from harness.engine import registry

    engine = ctx.engine
    impl = registry.get(engine.name)
    if impl.cross_variant is None:
        raise SkippedStage(f"engine {engine.name} provides no cross-variant check")
    r = impl.cross_variant(Path(ctx.product("models", Models).env["HARNESS_CHAT_MODEL"]), threads=ctx.plan.threads)
    return cross_variant_result(r)


def cross_variant_result(r: dict[str, Any]) -> StageResult:
    """The stage's verdict on an engine's cross-variant result: a level or variant that failed the
    greedy check (garbage, a crash) fails it; then one outside its agreement thresholds, named with
    its worst position; else the summary."""
    if not r["passed"]:
        bad = [f"{x['label']}: {x['error']}" if x["status"] in ("crashed", "failed")
               else f"{x['label']}: garbage output (no '{r['expect']}')" for x in r["runs"] if not x["ok"]]
        raise HarnessError("; ".join(bad))
    ran = [x for x in r["runs"] if x["status"] == "ran"]
    not_run = [x["cpu_level"] for x in r["runs"] if x["status"] == "not-run"]
    div = [x["label"] for x in ran if x["diverges_at"] is not None]
    summary = (f"{len(ran)} runs answered '{r['expect']}'"
               + (f"; token sequences diverge on {', '.join(div)}" if div else "; identical token sequences")
               + (f"; audited (static), not run here: {', '.join(not_run)}" if not_run else ""))
    agreement = r.get("agreement")
    if agreement:
        summary += "; " + agreement_summary(agreement)
        failed = [x for x in agreement["results"] if not x["passed"]]
        if failed:
            # StageFailed keeps the figures: the report shows the table with the failing rows
            raise StageFailed(StageResult(summary + ". Outside the agreement thresholds: " + "; ".join(
                f"{x['label']} against {agreement['reference']} ({x['kind']}): {', '.join(x['violations'])}, "
                f"worst position corpus token {x['summary']['kld_max_token']} (window {x['summary']['kld_max_window']}, "
                f"position {x['summary']['kld_max_position']}, KLD {x['summary']['kld_max']:.3g})" for x in failed), r))
    return StageResult(summary, r)


def agreement_summary(agreement: dict[str, Any]) -> str:
    """One line: per comparison its mean KLD and top-1 against the reference, and the rows that could not run."""
    parts = [f"{x['label']} KLD {x['summary']['kld_mean']:.2g} top-1 {100 * x['summary']['top1']:.1f}%"
             + ("" if not x["violations"] else " (outside)") for x in agreement["results"]]
    text = f"agreement against {agreement['reference']}: " + (", ".join(parts) or "no other level ran")
    if agreement.get("errors"):
        text += "; could not compare: " + ", ".join(e["label"] for e in agreement["errors"])
    return text
