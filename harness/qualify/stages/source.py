"""The source stages: the pinned source fetched and checked, then the patch series applied."""

from __future__ import annotations

from harness.core.errors import HarnessError
from harness.qualify.context import QualifyContext
from harness.qualify.result import StageResult


def fetch(ctx: QualifyContext) -> StageResult:
    """The pinned source, checked against its manifest."""
    from harness.build import pipeline

    tree = pipeline.fetch(ctx.engine, ctx.pm)
    return StageResult(f"{ctx.engine.pin} at {tree.path}", {"path": str(tree.path), "sha256": tree.digest})


def patch(ctx: QualifyContext) -> StageResult:
    """Every patch of the series applies cleanly; hands on the patched tree."""
    from harness.build import pipeline

    outcomes = pipeline.check_patches(ctx.engine, ctx.pm)
    bad = [o for o in outcomes if o.status != "applies"]
    tree = pipeline.patched_tree(ctx.engine, ctx.pm)
    rows = [{"patch": o.patch.name, "status": o.status, "detail": o.detail} for o in outcomes]
    if bad:
        msg = "; ".join(f"{o.patch.name}: {o.status}" for o in bad)
        raise HarnessError(msg)
    return StageResult(f"{len(outcomes)} patch(es) applied (series {tree.series_hash[:12]})",
                       {"patches": rows, "series_hash": tree.series_hash}, product=tree)
