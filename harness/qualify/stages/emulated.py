"""The emulated stages: each cross-built row (``target:`` in the matrix) built here and every one of
its CPU levels run under the QEMU CPU model that has its features."""

from __future__ import annotations

import functools
from pathlib import Path

from harness.core.errors import HarnessError, HostError
from harness.core.types import Variant
from harness.qualify.context import Models, QualifyContext
from harness.qualify.result import SkippedStage, StageResult
from harness.qualify.runner import Stage

NEEDS = ("abi-check", "models")


#: Why the main job does not run the emulated rows unless asked: their cross build alone is ~8 minutes
#: cold on 2 cores, and the levels under QEMU another minute; the test command runs them on the tiny model.
NOT_ASKED = ("not asked for: --arch aarch64 (or --arch all) qualifies the cross-built rows under emulation "
             "(~9 min cold on 2 cores: the cross build 474 s, the levels 54 s); the test command runs every "
             "aarch64 level on the tiny model")


def stages(ctx: QualifyContext) -> list[Stage]:
    """One stage per cross row this host can build and run when ``--arch`` asks (``all``: every row whose
    toolchain is installed); without ``--arch``, each such row is a skipped stage saying how to run it;
    a row named by ``--arch`` that cannot run here is a failed stage with the reason."""
    from harness.build.pipeline import rows_for
    from harness.qualify.emulate import cross_rows

    arch = ctx.options.arch
    if arch is None and not ctx.options.variant:  # a CI entry's --variant still runs the rows it names
        here, _ = cross_rows(ctx.engine, None)
        return [Stage(name=f"emulated-{row.name}", run=functools.partial(not_asked)) for row in here]
    if arch is not None and "all" in arch:
        arch = None
    here, not_here = cross_rows(ctx.engine, list(arch) if arch is not None else None)
    if ctx.options.variant and arch is None:  # a CI entry's rows: the cross rows its pattern names, not every one
        wanted = {v.name for v in rows_for(ctx.engine, ctx.options.variant).rows}
        here = [r for r in here if r.name in wanted]
    out = [Stage(name=f"emulated-{row.name}", run=functools.partial(emulated, row=row), needs=NEEDS)
           for row in here]
    if arch:  # asked for by name: a row that cannot run here is a failure, with the reason
        out += [Stage(name=f"emulated-{s['variant']}", run=functools.partial(cannot, reason=s["reason"]))
                for s in not_here]
    return out


def emulated(ctx: QualifyContext, *, row: Variant) -> StageResult:
    """Build ``row``, check its exports, run each level on the probe model and the chat model."""
    from harness.engine import registry
    from harness.qualify.emulate import emulate

    impl = registry.get(ctx.engine.name)
    models: dict[str, Path] = {}
    expect: dict[str, str] = {}
    if impl.probe_model is not None:
        models["tiny"] = impl.probe_model()
    chat = ctx.product("models", Models).env.get("HARNESS_CHAT_MODEL")
    if chat:
        models["SmolLM2"], expect["SmolLM2"] = Path(chat), "Paris"
    # Four greedy tokens (the answer is the first) and no llama-bench: under emulation SmolLM2
    # decodes at 0.1-1 tok/s, so the full table (`harness emulate --bench`, nox -s cross-aarch64)
    # would add some 20 minutes to every qualification.
    r = emulate(ctx.engine, row, models=models, expect=expect, bench_model=None, threads=ctx.plan.threads,
                n_tokens=4)
    if not r["passed"]:
        raise HarnessError("; ".join(r["failures"]))
    iso = [x["level"] for x in r["levels"] if x["isolated"]]
    return StageResult(f"{len(r['levels'])} {r['triple']} levels ran under qemu {r['qemu']} "
                       f"({len(iso)} isolated by a CPU model; not isolated: {', '.join(r['not_isolated']) or 'none'});"
                       f" build {r['build']['seconds']} s, runs {r['seconds']} s", r)


def not_asked(ctx: QualifyContext) -> StageResult:
    """A cross row the main job skips unless ``--arch`` asks for it."""
    raise SkippedStage(NOT_ASKED)


def cannot(ctx: QualifyContext, *, reason: str) -> StageResult:
    """A row ``--arch`` asked for that this host cannot build or run."""
    raise HostError(reason)
