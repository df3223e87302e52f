"""The ABI stages: the patched headers against the committed surface (before any build), and the
full API/ABI diff from the pin this one replaces."""

from __future__ import annotations

import time
from pathlib import Path

from harness.core.types import EngineSpec, PatchedTree
from harness.qualify.context import NO_OLD_PIN, QualifyContext
from harness.qualify.result import SkippedStage, StageResult


def check(ctx: QualifyContext) -> StageResult:
    """The ABI check of the patched tree (the C surface), then the binding's whole compile surface (every
    translation unit syntax-only against the same headers); hands on the C check's
    :class:`~harness.abi.check.CheckResult`. Either failing fails the stage, before any build."""
    from harness.abi.binding import check_binding, raise_for
    from harness.abi.check import check_engine

    tree = ctx.product("patch", PatchedTree).path
    r = check_engine(ctx.engine, tree)
    binding = check_binding(ctx.engine, tree)
    if binding is not None:
        raise_for(binding)
    compiled = (f"; the binding's {len(binding.units)} translation units compile syntax-only against them in "
                f"{binding.seconds:.2f} s{' (stamped)' if binding.cached else ''}") if binding else ""
    return StageResult(f"matches the committed surface ({r.functions} functions, {r.structs} structs, "
                       f"{len(r.targets)} targets) in {r.seconds:.2f} s{compiled}",
                       {"fingerprint": r.fingerprint, "seconds": r.seconds,
                        "binding": binding.as_json() if binding else None}, product=r)


def old_pin(ctx: QualifyContext) -> StageResult:
    """The diff from ``--old-pin`` / ``--old-rev`` to this pin."""
    opts = ctx.options
    if not (opts.old_pin or opts.old_rev):
        raise SkippedStage(NO_OLD_PIN)
    from harness.build import recipes

    old = recipes.resolve(ctx.engine.name, pin=opts.old_pin, rev=opts.old_rev)
    return old_pin_abi_diff(ctx.engine, old, ctx.product("patch", PatchedTree).path)


def old_pin_abi_diff(engine: EngineSpec, old: EngineSpec, new_tree: Path) -> StageResult:
    """The full API/ABI diff old pin -> this pin, and how much of it the binding's used set sees."""
    from harness.abi import surface as surf
    from harness.abi.check import load_committed
    from harness.abi.cpp import at_tree, diff_records, merge_used, recipe_used
    from harness.abi.cpp import render_markdown as cpp_markdown
    from harness.abi.diff import diff, render_markdown, render_versions_down, versions_down
    from harness.abi.revisions import snapshot_pin
    from harness.build import pipeline

    t0 = time.perf_counter()
    old_tree = pipeline.fetch(old).path
    a = snapshot_pin(str(old_tree), engine, None, recipe=old)  # the old recipe's tree: parsed in its sandbox
    b = snapshot_pin(str(new_tree), engine, None)
    changes = diff(a, b)
    committed = load_committed(engine.name, engine.surface_path)
    used = set(committed.get("used") or [])
    used_changes = diff(surf.filter_surface(a, used), surf.filter_surface(b, used)) if used else []
    # the C++ the binding uses, old and new binding together (a member only the old binding touched is
    # what a move removed from under it)
    cpp = committed.get("cpp") or {}
    cpp = merge_used(cpp, recipe_used(old)) if cpp else cpp
    cpp_lines = diff_records(at_tree(engine, old_tree, cpp, recipe=old), at_tree(engine, new_tree, cpp)) if cpp else []
    seconds = time.perf_counter() - t0
    rev = old.recipe_commit[:12] if old.recipe_commit else old.pin
    footer = (f"_{len(changes)} differences ({len(used_changes)} in what the binding uses) on "
              f"{', '.join(b['targets'])}; `harness abi diff {rev} {engine.pin} --used --markdown`, {seconds:.1f} s._")
    md = render_markdown(changes, old=f"{engine.name} {old.pin}", new=f"{engine.name} {engine.pin}", footer=footer)
    if cpp:
        md = render_versions_down(changes) + cpp_markdown(cpp_lines) + "\n" + md
    used_lines = [str(c) for c in used_changes]
    return StageResult(f"{old.pin} -> {engine.pin}: {len(changes)} differences, {len(used_changes)} in the binding's "
                       f"used set, {len(cpp_lines)} in the C++ it uses", {
        "old_pin": old.pin, "old_recipe_commit": old.recipe_commit or None, "differences": len(changes),
        "used_differences": len(used_changes), "used_lines": used_lines, "cpp_differences": cpp_lines,
        "versions_down": [str(c) for c in versions_down(changes)],
        "markdown": md, "seconds": round(seconds, 2)})
