"""One benchmark from arms to verdict: run, analyse, gate, write the report.

``harness bench`` and qualify's bench stages share this, so a gate means the same
everywhere and every report records the same things (system state, threads, stop).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.abba import BenchConfig, BenchResult, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.gate import GateResult, Headline, evaluate, fmt_speed, headlines, resolve_gate
from harness.bench.report import ReportFiles, write_report
from harness.bench.stats import Analysis, Interval, analyze


@dataclass(frozen=True, kw_only=True)
class Outcome:
    result: BenchResult
    analysis: Analysis
    gate: GateResult | None
    files: ReportFiles
    headline: tuple[Headline, ...]

    @property
    def passed(self) -> bool:
        """False when the gate failed, or an A/A run's interval excludes 1.0."""
        gate_ok = self.gate is None or self.gate.passed
        return gate_ok and (not self.result.aa or bool(self.analysis.aa_ok))

    def summary(self) -> str:
        """One line: headline speed ratios, the gate's verdict, and how many blocks it took."""
        heads = "; ".join(f"{h.label} {fmt_speed(h.speed)}" + _resolves(h.speed) for h in self.headline)
        bits = [heads]
        if self.gate is not None and self.gate.checks:
            bits.append(self.gate.verdict())
        stop = self.result.stop
        bits.append(f"{self.result.blocks_run} blocks"
                    + (f" ({stop.reason})" if stop is not None and stop.reason != "blocks" else ""))
        return "; ".join(b for b in bits if b)


def _resolves(speed: Interval | None) -> str:
    """`` (resolves ±0.9%)``: the smallest difference the interval can tell from none."""
    width = None if speed is None else speed.half_width_pct
    return "" if width is None else f" (resolves ±{width:.1f}%)"


def with_threads(spec: ArmSpec, threads: int) -> ArmSpec:
    """``spec`` with ``threads`` set, unless its own options already say."""
    if "threads" in spec.options:
        return spec
    return dataclasses.replace(spec, options={**spec.options, "threads": threads})


def run_and_report(a: ArmSpec, b: ArmSpec, config: BenchConfig, *, name: str | None = None, out: Path | None = None,
                   host: Mapping[str, Any] | None = None, host_measure: Mapping[str, Any] | None = None,
                   gate: Mapping[str, float] | None = None, threads_source: str = "", aa: bool = False,
                   isolate: bool = True, extra_plugins: Sequence[str] = (), plots: bool = True,
                   embed_plots: bool = False, malloc_hugetlb: bool | None = None) -> Outcome:
    """Run the benchmark and write its report; ``gate`` maps selectors to percent (see :func:`parse_gate`).

    ``malloc_hugetlb`` is every arm's glibc malloc hugepages setting (None: ``$HARNESS_MALLOC_HUGETLB``,
    on by default; see :mod:`harness.core.hugepages`).

    The gate is resolved against the run's concurrency before any arm starts, so a
    typo fails in a second, not after the run.
    """
    thresholds = resolve_gate(gate, config.concurrency) if gate else {}
    result = run_abba(a, b, config, name=name, aa=aa, isolate=isolate, extra_plugins=extra_plugins,
                      threads_source=threads_source, malloc_hugetlb=malloc_hugetlb)
    analysis = analyze(result.samples, aa=aa)
    verdict = evaluate(thresholds, analysis, config.pn) if thresholds else None
    files = write_report(result, out=out, analysis=analysis, host=host, host_measure=host_measure, plots=plots,
                         gate=verdict, embed_plots=embed_plots)
    return Outcome(result=result, analysis=analysis, gate=verdict, files=files,
                   headline=tuple(headlines(analysis, config.pn)))
