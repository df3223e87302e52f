"""qualify's benchmark stages: our build against the engine's peer on each bench model, and
this pin against the old one through the engine's own benchmark tool.

What they run comes from the engine descriptor's ``qualify.bench`` section (bench models,
gate, adaptive blocks), overridden by the command line; threads default to the host's
physical cores. A stage whose gate fails is failed with its figures kept
(:class:`~harness.stages.StageFailed`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.abba import BenchConfig
from harness.bench.gate import parse_gate, resolve_gate
from harness.errors import UsageError
from harness.stages import SkippedStage, StageFailed, StageResult
from harness.types import EngineSpec

#: Adaptive-block defaults when the descriptor says nothing.
UNTIL_HALFWIDTH = 3.0
MAX_BLOCKS = 12


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """How qualify benchmarks: shape, stopping rule, gate, threads and the models."""

    blocks: int = 4
    """Blocks of a fixed run; the fewest blocks of an adaptive one."""
    pn: int = 512
    gn: int = 128
    concurrency: tuple[int, ...] = (1, 4)
    until_halfwidth: float | None = UNTIL_HALFWIDTH
    max_blocks: int | None = MAX_BLOCKS
    gate: dict[str, float] = field(default_factory=dict)
    """Selector -> percent slower that fails the stage (``--fail-on-slower``)."""
    threads: int = 1
    threads_source: str = ""
    models: tuple[str, ...] = ("HARNESS_MODEL",)
    """Model environment variables (from ``harness models``), one bench stage each."""

    def config(self, concurrency: tuple[int, ...] | None = None) -> BenchConfig:
        return BenchConfig(blocks=self.blocks, pn=self.pn, gn=self.gn, concurrency=concurrency or self.concurrency,
                           until_halfwidth=self.until_halfwidth,
                           max_blocks=self.max_blocks if self.until_halfwidth is not None else None)

    def as_dict(self) -> dict[str, Any]:
        return {"blocks": self.blocks, "pn": self.pn, "gn": self.gn, "concurrency": list(self.concurrency),
                "until_halfwidth": self.until_halfwidth, "max_blocks": self.max_blocks, "gate": dict(self.gate),
                "threads": self.threads, "threads_source": self.threads_source, "models": list(self.models)}


def bench_plan(engine: EngineSpec, *, blocks: int | None = None, pn: int = 512, gn: int = 128,
               concurrency: tuple[int, ...] = (1, 4), until_halfwidth: float | None = None,
               max_blocks: int | None = None, fail_on_slower: Sequence[str] | None = None,
               threads: int | None = None) -> BenchPlan:
    """The plan from the descriptor's ``qualify.bench`` and the command line (which wins).

    ``until_halfwidth=0`` turns adaptive blocks off (``blocks`` is then the fixed count).
    """
    from harness.host import resolve_threads

    raw: Mapping[str, Any] = (engine.raw.get("qualify") or {}).get("bench") or {}
    width = until_halfwidth if until_halfwidth is not None else raw.get("until_halfwidth", UNTIL_HALFWIDTH)
    gate = parse_gate(fail_on_slower) if fail_on_slower else parse_gate(raw.get("fail_on_slower"))
    resolve_gate(gate, concurrency)  # a typo fails before the build, not after it
    n_threads, source = resolve_threads(threads)
    models = tuple(str(m) for m in raw.get("models") or ("HARNESS_MODEL",))
    if not models:
        msg = f"qualify.bench.models of {engine.name} is empty; expected model variables such as HARNESS_MODEL"
        raise UsageError(msg)
    return BenchPlan(blocks=blocks or int(raw.get("blocks", 4)), pn=pn, gn=gn, concurrency=concurrency,
                     until_halfwidth=float(width) if width else None,
                     max_blocks=max_blocks or int(raw.get("max_blocks", MAX_BLOCKS)), gate=gate,
                     threads=n_threads, threads_source=source, models=models)


def stage_name(model_var: str) -> str:
    """``HARNESS_MODEL`` -> ``bench``; ``HARNESS_BANDWIDTH_MODEL`` -> ``bench-bandwidth``."""
    core = re.sub(r"^HARNESS_|_?MODEL$", "", model_var).lower().replace("_", "-")
    return f"bench-{core}" if core else "bench"


def _stage_result(outcome: Any, report_root: Path, model: str) -> StageResult:
    files = outcome.files
    rel = str(files.directory.relative_to(report_root))
    state = outcome.result.system
    data = {"report": rel, "markdown": files.markdown.read_text(), "model": model,
            "headline": [h.as_dict() for h in outcome.headline],
            "gate": None if outcome.gate is None else outcome.gate.as_dict(),
            "stop": None if outcome.result.stop is None else outcome.result.stop.as_dict(),
            "blocks": outcome.result.blocks_run, "threads": None if state is None else state.threads}
    result = StageResult(f"{model}: {outcome.summary()}", data)
    if not outcome.passed:
        raise StageFailed(result)
    return result


def peer_bench(engine: EngineSpec, peer: str, model: str, plan: BenchPlan, *, out: Path, report_root: Path,
               host: Mapping[str, Any], host_measure: Mapping[str, Any] | None) -> StageResult:
    """The engine's peer (A) against our cpu build (B) on ``model``."""
    from harness.bench.arms import ArmSpec
    from harness.bench.session import run_and_report

    # Both arms get a context that holds every concurrent request whole.
    n_ctx = max(plan.concurrency) * (plan.pn + plan.gn) + 64
    common = f"model={model},threads={plan.threads},n_ctx={n_ctx},max_num_seqs={max(plan.concurrency)}"
    a = ArmSpec.parse(f"{peer}:{common}")
    b = ArmSpec.parse(f"backend:{common},variant=cpu")
    outcome = run_and_report(a, b, plan.config(), name=f"qualify-{engine.name}-{engine.pin}-{Path(model).stem}",
                             out=out, host=host, host_measure=host_measure, gate=plan.gate,
                             threads_source=plan.threads_source)
    return _stage_result(outcome, report_root, Path(model).name)


def old_pin_bench(engine: EngineSpec, old_opts: dict[str, str], new_artifact: Path, model: str, out: Path, *,
                  host: Mapping[str, Any], plan: BenchPlan, host_measure: Mapping[str, Any] | None = None) -> StageResult:
    """Old pin (A) vs this pin (B), each through its own cpu artifact's benchmark tool, in ABBA blocks."""
    from harness import registry
    from harness.bench.arms import ArmSpec
    from harness.bench.session import run_and_report
    from harness.plugin import get_manager

    kind = registry.get(engine.name).old_pin_bench_arm
    if kind is None:
        raise SkippedStage(f"engine {engine.name} names no benchmark tool for old pin vs new pin")
    common = {"model": model, "threads": plan.threads, "variant": "cpu", "engine": engine.name}
    # builds the old pin's recipe when needed
    a_opts = get_manager().hook.harness_bench_arm_prepare(kind=kind, options={**old_opts, **common})
    label = old_opts.get("pin") or old_opts.get("rev")
    a = ArmSpec(kind=kind, name=f"{kind} {label}", options=a_opts)
    b = ArmSpec(kind=kind, name=f"{kind} {engine.pin}", options={**common, "artifact": str(new_artifact)})
    outcome = run_and_report(a, b, plan.config((1,)), name=f"old-pin-{label}-vs-{engine.pin}", out=out, host=host,
                             host_measure=host_measure, gate=plan.gate, threads_source=plan.threads_source)
    return _stage_result(outcome, out.parent, Path(model).name)


#: The binding's floor against the engine's own benchmark tool when the descriptor sets none
#: (``qualify.ceiling.min_ratio``): prefill and decode at >= 97% of it.
CEILING_MIN_RATIO = 0.97


def ceiling_min_ratio(engine: EngineSpec) -> float:
    raw = (engine.raw.get("qualify") or {}).get("ceiling") or {}
    ratio = float(raw.get("min_ratio", CEILING_MIN_RATIO))
    if not 0 < ratio <= 1:
        msg = f"qualify.ceiling.min_ratio of {engine.name} is {ratio}; expected a ratio in (0, 1], e.g. 0.97"
        raise UsageError(msg)
    return ratio


def ceiling_bench(engine: EngineSpec, artifact: Path, model: str, plan: BenchPlan, *, out: Path, report_root: Path,
                  host: Mapping[str, Any], host_measure: Mapping[str, Any] | None) -> StageResult:
    """The engine ceiling: the engine's own benchmark tool (A) against our binding (B) on the same
    artifact, CPU level, model and shape, one stream; B may not be slower than ``min_ratio`` of A
    (a binding that loads the model or runs its batches differently shows here, on any host)."""
    from harness import registry
    from harness.bench.arms import ArmSpec
    from harness.bench.session import run_and_report
    from harness.plugin import get_manager

    kind = registry.get(engine.name).old_pin_bench_arm
    if kind is None:
        raise SkippedStage(f"engine {engine.name} names no benchmark tool of its own (old_pin_bench_arm)")
    ratio = ceiling_min_ratio(engine)
    pct = round(100 * (1 - ratio), 3)
    gate = {"prefill": pct, "decode": pct}
    common = {"model": model, "threads": plan.threads, "variant": "cpu", "engine": engine.name}
    a_opts = get_manager().hook.harness_bench_arm_prepare(kind=kind, options={**common, "artifact": str(artifact)})
    a = ArmSpec(kind=kind, name=kind, options=a_opts)
    b = ArmSpec.parse(f"backend:model={model},threads={plan.threads},n_ctx={plan.pn + plan.gn + 64},"
                      f"max_num_seqs=1,variant=cpu,name=backend")
    outcome = run_and_report(a, b, plan.config((1,)), name=f"ceiling-{engine.name}-{engine.pin}-{Path(model).stem}",
                             out=out, host=host, host_measure=host_measure, gate=gate,
                             threads_source=plan.threads_source)
    arms = outcome.result.describe
    level = _arm_level(arms)
    files = outcome.files
    data = {"report": str(files.directory.relative_to(report_root)), "markdown": files.markdown.read_text(),
            "model": Path(model).name, "min_ratio": ratio, "cpu_level": level,
            "commands": _arm_commands(arms),
            "headline": [h.as_dict() for h in outcome.headline],
            "gate": None if outcome.gate is None else outcome.gate.as_dict(),
            "blocks": outcome.result.blocks_run}
    figures = "; ".join(f"{h.name} {h.speed.point:.3f}x" + (f" [{h.speed.lo:.3f}, {h.speed.hi:.3f}]"
                                                             if h.speed.lo is not None and h.speed.hi is not None else "")
                        for h in outcome.headline if h.speed is not None) or outcome.summary()
    result = StageResult(f"{Path(model).name}, cpu level {level or '?'}: binding / {kind} {figures} "
                         f"(floor {ratio:.2f}x)", data)
    if not outcome.passed:
        raise StageFailed(result)
    return result


def _arm_level(arms: Any) -> str | None:
    for desc in (arms.values() if isinstance(arms, Mapping) else []):
        if isinstance(desc, Mapping):
            level = desc.get("cpu_level") or desc.get("cpu_variant")
            if level:
                return str(level)
    return None


def _arm_commands(arms: Any) -> list[str]:
    out: list[str] = []
    for desc in (arms.values() if isinstance(arms, Mapping) else []):
        if isinstance(desc, Mapping):
            out += [str(c) for c in desc.get("commands") or []]
    return out


#: Sections of a bench report that qualify.md shows; the others go into a collapsed block.
SHOWN_SECTIONS = ("Headline", "System state", "Findings")


def bench_section(title: str, data: Mapping[str, Any]) -> list[str]:
    """A bench stage's part of qualify.md: the report's headline, system state and findings, the rest folded.

    The report's sections become subsections, and its relative image links are made
    relative to the qualification directory.
    """
    rel = data["report"]
    md = str(data["markdown"])
    body = md.split("\n", 1)[1] if "\n" in md else md
    parts = re.split(r"(?m)^(?=## )", body)
    preamble, sections = parts[0], parts[1:]

    def heading(part: str) -> str:
        return part.split("\n", 1)[0].removeprefix("## ").strip()

    def demoted(part: str) -> list[str]:
        return [ln.replace("](", f"]({rel}/", 1) if ln.startswith("![") and "](data:" not in ln
                else "#" + ln if ln.startswith("## ") else ln for ln in part.rstrip().splitlines()]

    shown = [p for p in sections if heading(p) in SHOWN_SECTIONS]
    folded = [p for p in sections if heading(p) not in SHOWN_SECTIONS]
    lines = ["", f"## {title}", "", f"Full report: [{rel}/report.md]({rel}/report.md)", ""]
    for part in (preamble, *shown):
        lines += [*demoted(part), ""]
    if folded:
        lines += [f"<details><summary>{', '.join(heading(p) for p in folded)}</summary>", ""]
        for part in folded:
            lines += [*demoted(part), ""]
        lines += ["</details>"]
    return lines
