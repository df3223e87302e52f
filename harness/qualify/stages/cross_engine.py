"""The cross-engine stages: another engine on the same weights, where the descriptor's
``qualify.cross_engine`` names one (``peer``, this engine's ``model`` variable and the peer's
``peer_model`` fixture: the same weights in its format).

``peer-build`` builds the peer's cpu row and binding (stamped: seconds when cached);
``cross-engine`` runs the engine plugin's greedy check against it; ``bench-vs-<peer>`` is an ABBA
run of the two in-process bindings, the peer as A: prefill, decode, aggregate and peak RSS. The
report's side-by-side table reads the last two.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.qualify.context import Built, Models, QualifyContext
from harness.qualify.result import SkippedStage, StageFailed, StageResult
from harness.qualify.runner import Stage


def settings(ctx: QualifyContext) -> Mapping[str, str] | None:
    from harness.engine.qualify_settings import qualify_settings

    return qualify_settings(ctx.engine).cross_engine


def bench_name(peer: str) -> str:
    return f"bench-vs-{peer}"


def stages(ctx: QualifyContext) -> list[Stage]:
    """The three stages, or none when the descriptor names no peer."""
    cfg = settings(ctx)
    if cfg is None:
        return []
    return [Stage(name="peer-build", run=peer_build),
            Stage(name="cross-engine", run=check, needs=("binding", "models", "peer-build")),
            Stage(name=bench_name(str(cfg["peer"])), run=bench, needs=("binding", "models", "peer-build"))]


def _cfg(ctx: QualifyContext) -> Mapping[str, str]:
    cfg = settings(ctx)
    assert cfg is not None  # stages() lists these stages only then
    return cfg


def _models(ctx: QualifyContext) -> tuple[str, str]:
    cfg, models = _cfg(ctx), ctx.product("models", Models)
    model, peer_model = models.path(cfg["model"]), models.path(cfg["peer_model"])
    if model is None or peer_model is None:
        missing = [f for f, p in ((cfg["model"], model), (cfg["peer_model"], peer_model)) if p is None]
        raise SkippedStage(f"no fixture model {' or '.join(missing)} (`harness models fetch --engine "
                           f"{ctx.engine.name}` writes the pair)")
    return model, peer_model


def peer_build(ctx: QualifyContext) -> StageResult:
    """The peer's cpu row and its binding (each stamped: a second run costs seconds)."""
    from harness.binding.wheel import build_binding
    from harness.build.pipeline import build_variant
    from harness.engine.descriptor import load_engine

    peer = load_engine(str(_cfg(ctx)["peer"]))
    r = build_variant(peer, "cpu", ctx.pm)
    b = build_binding(peer, r.artifact)
    return StageResult(f"{peer.name} {peer.pin} cpu ({'built' if r.built else 'cached'}), binding "
                       f"{Path(b.wheel).name} ({'built' if b.built else 'cached'})",
                       {"engine": peer.name, "pin": peer.pin, "artifact": str(r.artifact), "wheel": str(b.wheel),
                        "built": r.built, "seconds": round(r.seconds, 1), "binding_seconds": round(b.seconds, 1)})


def check(ctx: QualifyContext) -> StageResult:
    """The engine plugin's greedy check: fails on a prompt-length disagreement or a divergence
    that is no near-tie (the plugin's ``summary.passed``)."""
    from harness.engine import registry

    impl = registry.get(ctx.engine.name)
    if impl.cross_engine is None:
        raise SkippedStage(f"engine {ctx.engine.name} provides no cross-engine check")
    model, peer_model = _models(ctx)
    r = impl.cross_engine(Path(model), Path(peer_model), threads=ctx.plan.threads)
    s = r["summary"]
    text = (f"{s['identical']}/{s['prompts']} prompts token-identical with {r['peer']} "
            f"({s['tokens_before_divergence']}/{s['tokens']} greedy tokens before any divergence)")
    if s["clear_divergences"]:
        text += f"; {s['clear_divergences']} divergence(s) where {r['peer']}'s top-1 was clear"
    if not s["prompt_counts_agree"]:
        text += "; the prompt token counts differ (the tokenizers disagree)"
    if not s.get("completion_counts_agree", True):
        text += "; the generated token counts differ"
    result = StageResult(text, r)
    if not s["passed"]:
        raise StageFailed(result)
    return result


def bench(ctx: QualifyContext) -> StageResult:
    """The peer's in-process binding (A) against this engine's (B), each on its format of the weights."""
    if not ctx.options.run_bench:
        raise SkippedStage("disabled (--no-bench)")
    if "cpu" not in ctx.product("build", Built).variants:
        raise SkippedStage("the cpu variant was not built in this run")
    from harness.bench.arms import IN_PROCESS, ArmSpec
    from harness.bench.roofline import measure_host
    from harness.bench.session import run_and_report
    from harness.core import host as hostmod
    from harness.qualify.stages.bench import bench_stage_result

    cfg, plan, engine = _cfg(ctx), ctx.plan, ctx.engine
    model, peer_model = _models(ctx)
    n_ctx = max(plan.concurrency) * (plan.pn + plan.gn) + 64
    common: dict[str, Any] = {"threads": plan.threads, "n_ctx": n_ctx, "max_num_seqs": max(plan.concurrency),
                              "variant": "cpu"}
    peer = str(cfg["peer"])
    a = ArmSpec(kind=IN_PROCESS, name=f"{peer} in-process", options={"engine": peer, "model": peer_model, **common})
    b = ArmSpec(kind=IN_PROCESS, name=f"{engine.name} in-process", options={"engine": engine.name, "model": model,
                                                                            **common})
    out = ctx.report / bench_name(peer)
    # a comparison of two engines, not a regression of one: no gate unless the command line gives one
    outcome = run_and_report(a, b, plan.config(), name=f"qualify-{engine.name}-vs-{peer}", out=out,
                             host=hostmod.as_dict(ctx.host), host_measure=measure_host(), gate=plan.gate,
                             threads_source=plan.threads_source)
    rss = {role: max((s.peak_rss_bytes for s in outcome.result.samples if s.arm == role), default=0)
           for role in ("A", "B")}
    stop = (f" --until-halfwidth {plan.until_halfwidth:g} --max-blocks {plan.max_blocks}"
            if plan.until_halfwidth is not None else "")
    commands = [f"harness bench --a '{a.spec}' --b '{b.spec}' --blocks {plan.blocks}{stop} --pn {plan.pn} "
                f"--gn {plan.gn} --concurrency {','.join(map(str, plan.concurrency))}"]
    return bench_stage_result(outcome, ctx.report, Path(model).name, label=f"{engine.name} vs {peer}",
                              extra={"peer": peer, "engine": engine.name, "peer_model": peer_model,
                                     "arms": {"A": a.spec, "B": b.spec}, "peak_rss_bytes": rss, "commands": commands})
