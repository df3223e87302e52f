"""The pin move's numerical agreement: this pin (B) against the old one (A) on the pinned corpus.

Whether the model still computes the same function after a pin move, beside how fast: the next-token
distributions of both pins' cpu builds at the same CPU level (ggml's pick on this host), compared
position by position (:mod:`harness.agree`). The old pin runs its own recipe's artifact and binding,
built when needed by the arm's plugin (``pin=`` / ``rev=`` on an in-process arm). Thresholds are the
descriptor's ``pin`` kind (``qualify.agreement.thresholds.pin``): gated only where it says so,
reported for the pull request otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from harness.qualify.context import NO_OLD_PIN, Built, Models, QualifyContext
from harness.qualify.result import SkippedStage, StageFailed, StageResult

#: The model the agreement thresholds were measured on (qualification's chat model, SmolLM2).
MODEL_VAR = "HARNESS_CHAT_MODEL"
#: Where the stage writes agree.json, agree.md and kld.png, inside the qualification's directory.
REPORT_DIR = "agree-old-pin"
#: Bootstrap resamples (as the cross-variant rows).
RESAMPLES = 1000


def old_pin(ctx: QualifyContext) -> StageResult:
    """The old pin's cpu build (A, the reference) against this pin's (B) on the engine's agreement corpus."""
    opts = ctx.options
    if not (opts.old_pin or opts.old_rev):
        raise SkippedStage(NO_OLD_PIN)
    engine = ctx.engine
    from harness.engine.qualify_settings import qualify_settings

    if not qualify_settings(engine).agreement:
        raise SkippedStage(f"not configured for {engine.name} (qualify.agreement in its engine.yaml)")
    if "cpu" not in ctx.product("build", Built).variants:
        raise SkippedStage("the cpu variant was not built")
    model = ctx.product("models", Models).env.get(MODEL_VAR)
    if not model:
        raise SkippedStage(f"no {MODEL_VAR} model (`harness models fetch` writes the fixtures)")
    from harness.agree import report
    from harness.agree.corpus import load_corpus
    from harness.agree.run import DEFAULT_WINDOW, agree
    from harness.agree.thresholds import agreement_settings, for_engine

    settings, table = agreement_settings(engine.name), for_engine(engine.name)
    label = str(opts.old_pin or opts.old_rev)
    old = f"pin={opts.old_pin}" if opts.old_pin else f"rev={opts.old_rev}"
    common = f"variant=cpu,engine={engine.name}"
    result = agree(f"in-process:{common},{old},name={engine.name} {label}",
                   f"in-process:{common},name={engine.name} {engine.pin}", model=model, corpus=load_corpus(),
                   window=int(settings.get("window", DEFAULT_WINDOW)), max_tokens=settings.get("tokens"),
                   threads=ctx.plan.threads, kind="pin", threshold=table.get("pin"), resamples=RESAMPLES)
    data = result.as_dict()
    data["markdown"] = report.markdown(data)
    data["old"] = label
    data["report"] = REPORT_DIR
    out = ctx.report / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    (out / "agree.md").write_text(data["markdown"])
    report.plot(data, result.kld, out / "kld.png")
    (out / "agree.json").write_text(json.dumps({**data, "kld": result.kld}, indent=1, default=str) + "\n")
    stage = StageResult(summary(data), data)
    if not result.passed:
        raise StageFailed(stage)
    return stage


def summary(data: dict[str, Any]) -> str:
    """One line: the old pin -> this pin, mean KLD with its interval, top-1, perplexity ratio, verdict."""
    s = data["summary"]
    lo, hi = s["ci"]["kld_mean"]
    line = (f"{data['arms']['B']['name']} against {data['arms']['A']['name']}: mean KLD {s['kld_mean']:.3g} "
            f"[{lo:.3g}, {hi:.3g}], p99 {s['kld_p99']:.3g}, top-1 {100 * s['top1']:.2f}%, "
            f"perplexity ratio {s['ppl_ratio']:.4f} over {s['n_positions']} positions")
    thr = data.get("threshold")
    if data["violations"]:
        gated = bool(thr and thr.get("gate", True))
        line += ("; FAILED: " if gated else "; outside the pin thresholds (reported, not gated): ") \
            + "; ".join(data["violations"])
    elif thr:
        line += "; within the pin thresholds"
    return line

