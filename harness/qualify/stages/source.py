"""The source stages: the pinned source fetched and checked, then the patch series applied."""

from __future__ import annotations

from harness.core.errors import HarnessError
from harness.qualify.context import QualifyContext
from harness.qualify.result import StageResult


def fetch(ctx: QualifyContext) -> StageResult:
    """The pinned source, checked against its manifest."""
    from harness.build import pipeline
    from harness.pin import describe, digest_label
    from harness.source import provenance

    tree = pipeline.fetch(ctx.engine, ctx.pm)
    found = provenance.derive(ctx.engine)
    # named by what it is (package, version, hash or commit), never by where this host caches it
    source = ctx.engine.raw["source"]
    return StageResult(f"{describe(source)} ({digest_label(source, tree.digest)}), checked against its "
                       "manifest", {"source": describe(ctx.engine.raw["source"]), "sha256": tree.digest,
                                    "provenance": list(found.how)})


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
