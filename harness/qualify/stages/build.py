"""The build stages: the matrix rows qualify builds, then the binding wheel per row."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import HarnessError
from harness.core.types import PatchedTree, Variant
from harness.qualify.context import Built, QualifyContext
from harness.qualify.result import StageResult

if TYPE_CHECKING:
    from harness.build.cmake import BuildResult


def build(ctx: QualifyContext) -> StageResult:
    """The rows ``--variant`` names, else the default rows the engine builds; those not buildable here
    are skipped saying why. Without ``--variant`` also the rows marked ``extra.qualify: runnable``
    that can run here (vulkan on lavapipe). Hands on :class:`~harness.qualify.context.Built`."""
    from harness.abi.check import CheckResult
    from harness.build.matrix import buildability
    from harness.build.pipeline import BuildInputs, build_row, rows_for

    engine, patterns = ctx.engine, ctx.options.variant
    inputs = BuildInputs(engine=engine, tree=ctx.product("patch", PatchedTree),
                         abi=ctx.product("abi-check", CheckResult), host=ctx.host, pm=ctx.pm)
    built: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    if patterns:  # the rows asked for (a CI entry's); those the engine does not build are skipped, saying why
        chosen = rows_for(engine, patterns)
        skipped += [{"variant": v.name, "reason": why} for v, why in chosen.skipped]
    else:  # the matrix's default rows this engine builds (its variants: list and intent map decide)
        chosen = rows_for(engine, where=lambda v: v.default)
    for v in chosen.rows:
        b = buildability(ctx.pm, v, ctx.host)
        if not b.buildable:
            skipped.append({"variant": v.name, "reason": "; ".join(b.reasons)})
            continue
        built.append(_record(v, build_row(inputs, v)))
    if not built:
        msg = "no default variant is buildable here: " + "; ".join(s["reason"] for s in skipped)
        raise HarnessError(msg)
    variants = tuple(str(b["variant"]) for b in built)
    # Rows qualify runs where they can run (extra.qualify: runnable, e.g. vulkan on lavapipe): built,
    # given a binding and covered by the cross-variant check; the e2e suite stays on the default rows.
    extra: list[str] = []
    runnable = () if patterns else rows_for(engine, where=_runnable_row).rows  # --variant names every row it wants
    for v in runnable:
        b = buildability(ctx.pm, v, ctx.host)
        if not (b.buildable and b.runnable):
            skipped.append({"variant": v.name, "reason": "; ".join(b.reasons) or "no device to run it on"})
            continue
        built.append(_record(v, build_row(inputs, v)))
        extra.append(v.name)
    return StageResult(_summary(built, skipped), {"built": built, "skipped": skipped},
                       product=Built(variants=variants, runnable_extra=tuple(extra)))


def _runnable_row(v: Variant) -> bool:
    return v.extra.get("qualify") == "runnable" and not v.target


def _record(v: Variant, r: BuildResult) -> dict[str, Any]:
    from harness.build.cmake import ccache_summary

    return {"variant": v.name, "artifact": str(r.artifact), "built": r.built, "seconds": round(r.seconds, 1),
            "build_seconds": r.manifest.get("build_seconds"), "ccache": r.manifest.get("ccache"),
            "ccache_summary": ccache_summary(r.manifest)}


def _summary(built: list[dict[str, Any]], skipped: list[dict[str, str]]) -> str:
    rows = ", ".join(f"{b['variant']} ({'built' if b['built'] else 'cached'}"
                     + (f"; {b['ccache_summary']}" if b["built"] and b["ccache_summary"] else "") + ")"
                     for b in built)
    return rows + (f"; not buildable here: {', '.join(s['variant'] for s in skipped)}" if skipped else "")


def binding(ctx: QualifyContext) -> StageResult:
    """The binding wheel for every row the build stage built."""
    from harness.binding.wheel import build_binding
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant

    built = ctx.product("build", Built)
    rows: list[dict[str, Any]] = []
    for v in (*built.variants, *built.runnable_extra):
        r = build_binding(ctx.engine, artifact_dir(ctx.engine, get_variant(v)))
        rows.append({"variant": v, "wheel": str(r.wheel), "built": r.built, "seconds": round(r.seconds, 1)})
    return StageResult(", ".join(f"{r['variant']}: {Path(r['wheel']).name}" for r in rows), {"bindings": rows})
