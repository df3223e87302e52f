"""Qualification's stages, one module per stage or stage family, each stage a plain function of the
:class:`~harness.qualify.context.QualifyContext` returning a :class:`~harness.qualify.result.StageResult`.

:func:`stages_for` lists them in the order they run, each with the stages it needs.
"""

from __future__ import annotations

import functools

from harness.qualify.bench_plan import ceiling_stage_name, stage_name
from harness.qualify.context import QualifyContext
from harness.qualify.runner import Stage
from harness.qualify.stages import (
    abi,
    agreement,
    bench,
    build,
    ceiling,
    cross_engine,
    e2e,
    emulated,
    levels,
    models,
    source,
)


def stages_for(ctx: QualifyContext) -> list[Stage]:
    """fetch -> patch -> ABI check -> build -> binding, the models, the checks of what was built,
    the emulated cross rows, per bench model the engine ceiling then the peer benchmark, another
    engine on the same weights (greedy tokens, both bindings benchmarked), and the pin move's ABI
    diff, benchmark and numerical agreement."""
    return [
        Stage(name="fetch", run=source.fetch),
        Stage(name="patch", run=source.patch, needs=("fetch",)),
        Stage(name="abi-check", run=abi.check, needs=("patch",)),
        Stage(name="build", run=build.build, needs=("abi-check",)),
        Stage(name="binding", run=build.binding, needs=("build",)),
        Stage(name="models", run=models.fetch),
        Stage(name="cpu-levels", run=levels.smoke, needs=("binding",)),
        Stage(name="isa-audit", run=levels.audit, needs=("build",)),
        Stage(name="e2e", run=e2e.e2e, needs=("binding", "models")),
        Stage(name="cross-variant", run=levels.cross_variant, needs=("binding", "models")),
        *emulated.stages(ctx),
        *bench_stages(ctx),
        *cross_engine.stages(ctx),
        Stage(name="old-pin-abi", run=abi.old_pin, needs=("patch",)),
        *old_pin_bench_stages(ctx),
        Stage(name="old-pin-agreement", run=agreement.old_pin, needs=("binding", "models")),
    ]


def bench_stages(ctx: QualifyContext) -> list[Stage]:
    """Per bench model: the binding against the engine's own benchmark tool first (a binding below its
    engine's ceiling makes every comparison with a peer a statement about the binding, not the
    engine), then our build against the peer."""
    out: list[Stage] = []
    for n, fixture in enumerate(ctx.plan.models):
        out += [Stage(name=ceiling_stage_name(fixture, n), run=functools.partial(ceiling.ceiling, fixture=fixture),
                      needs=("binding", "models")),
                Stage(name=stage_name(fixture, n), run=functools.partial(bench.peer, fixture=fixture),
                      needs=("binding", "models"))]
    return out


def old_pin_bench_stages(ctx: QualifyContext) -> list[Stage]:
    """Per bench model, the old pin (A) against this one (B): ``old-pin-bench`` on the first (simulated where the
    descriptor gives run lengths: the old-vs-new code path decided deterministically), ``old-pin-bench-<fixture>``
    on the others (the bandwidth-bound model: wall-clock)."""
    models = ctx.plan.models or (None,)
    return [Stage(name="old-pin-" + (stage_name(f, n) if f else "bench"),
                  run=functools.partial(bench.old_pin, fixture=f), needs=("build", "models"))
            for n, f in enumerate(models)]
