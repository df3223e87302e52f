"""Benchmark reports: ``reports/<timestamp>-<name>/`` with results.json, report.md and PNGs.

``results.json`` keeps every raw sample, the host, both arms' ``describe()``
(pins, manifests, versions) and the statistics, so a later ``compare`` can
recompute everything from the samples. ``report.md`` leads with a table in the
shape of the reference README's (configuration, prefill TTFT, warm throughput,
ratio to baseline) plus the interval and the roofline percentages.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.bench.abba import BenchResult
from harness.bench.comparison import CompareRow, Comparison
from harness.bench.gate import GateResult, headlines
from harness.bench.roofline import roofline_pcts
from harness.bench.stats import (
    Analysis,
    Finding,
    Interval,
    analyze,
    engine_side_findings,
    metric_key,
)
from harness.bench.system import findings as system_findings
from harness.core import paths
from harness.core.errors import BenchError, UsageError
from harness.core.inputs import read_text
from harness.core.jsonvalue import json_value

SCHEMA = "harness.bench/1"
RESULTS_JSON = "results.json"
REPORT_MD = "report.md"
SAMPLES_PNG = "samples.png"
RATIOS_PNG = "ratios.png"


@dataclass(frozen=True, kw_only=True)
class ReportFiles:
    directory: Path
    results: Path
    markdown: Path
    plots: tuple[Path, ...]


def default_reports_dir() -> Path:
    return paths.reports_dir()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "bench"


def report_dir(out: Path, name: str, started_at: float) -> Path:
    """A fresh ``<out>/<UTC timestamp>-<name>`` directory (suffixed when it exists)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started_at))
    base = out / f"{stamp}-{_slug(name)}"
    candidate, i = base, 1
    while candidate.exists():
        i += 1
        candidate = base.with_name(f"{base.name}-{i}")
    candidate.mkdir(parents=True)
    return candidate


def all_findings(result: BenchResult, analysis: Analysis) -> list[Finding]:
    """The statistics' findings, then what the machine's state says."""
    found = list(analysis.findings) + engine_side_findings(result.samples)
    if result.system is not None:
        found += system_findings(result.system)
    return found


def build_results(result: BenchResult, analysis: Analysis, *, host: Mapping[str, Any] | None = None,
                  host_measure: Mapping[str, Any] | None = None, gate: GateResult | None = None) -> dict[str, Any]:
    """The ``results.json`` document: JSON values only (no Python reprs)."""
    doc = {
        "schema": SCHEMA,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **result.as_dict(),
        "host": dict(host or {}),
        "host_measure": dict(host_measure) if host_measure else None,
        "roofline": _rooflines(result, analysis, host_measure),
        "headline": [h.as_dict() for h in headlines(analysis, result.config.pn)],
        "gate": None if gate is None else gate.as_dict(),
        "analysis": analysis.as_dict(),
        "findings": [asdict(f) for f in all_findings(result, analysis)],
    }
    return dict(json_value(doc))


def write_report(result: BenchResult, *, out: Path | None = None, analysis: Analysis | None = None,
                 host: Mapping[str, Any] | None = None, host_measure: Mapping[str, Any] | None = None,
                 plots: bool = True, gate: GateResult | None = None,
                 embed_plots: bool = False) -> ReportFiles:
    """Write ``<out>/<timestamp>-<name>/``; ``out`` defaults to ``reports/`` in the checkout.

    :param gate: the ``--fail-on-slower`` verdict, shown in the report.
    :param embed_plots: put the plots into report.md as data URIs (no files needed beside it).
    """
    from harness.bench.markdown import render_markdown

    analysis = analysis or analyze(result.samples, aa=result.aa)
    directory = report_dir(out or default_reports_dir(), result.name, result.started_at)
    doc = build_results(result, analysis, host=host, host_measure=host_measure, gate=gate)
    results_path = directory / RESULTS_JSON
    results_path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    pngs: list[Path] = []
    if plots:
        from harness.bench.plots import plot_ratios, plot_samples

        names = {role: spec.name for role, spec in result.arms.items()}
        pngs = [plot_ratios(analysis, directory / RATIOS_PNG),
                plot_samples(analysis, names, directory / SAMPLES_PNG)]
    md = directory / REPORT_MD
    from harness.core.paths import redact

    # the Markdown is what is pasted into a pull request: no host paths (results.json keeps them, for the tools
    # that read it back on this host)
    md.write_text(redact(render_markdown(doc, analysis, findings=all_findings(result, analysis), plots=pngs,
                                         embed_plots=embed_plots)))
    return ReportFiles(directory=directory, results=results_path, markdown=md, plots=tuple(pngs))


def _rooflines(result: BenchResult, analysis: Analysis, measure: Mapping[str, Any] | None) -> dict[str, Any]:
    if not measure:
        return {}
    c1 = min(result.config.concurrency)
    out: dict[str, Any] = {}
    for role in result.arms:
        dec = analysis.metrics.get(metric_key("decode_tps", c1))
        ttft = analysis.metrics.get(metric_key("ttft_ms", c1))
        if dec is None or ttft is None or role not in dec.arms or role not in ttft.arms:
            continue
        prefill_tps = result.config.pn * c1 / (ttft.arms[role].geomean.point / 1000.0)
        out[role] = roofline_pcts(result.describe.get(role, {}), dict(measure),
                                  decode_tps=dec.arms[role].geomean.point, prefill_tps=prefill_tps)
    return out


# ---------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------


def load_results(source: Path | str | Mapping[str, Any]) -> dict[str, Any]:
    """A run's results.json (or its report dir); a file that is missing, unreadable, not JSON or not a
    bench result is the user's input error (:class:`UsageError`, exit 2), never the regression code."""
    if isinstance(source, Mapping):
        return dict(source)
    path = Path(source)
    if os.path.isdir(path):  # os.path's test: a name too long for the file system is not one, not an OSError
        path = path / RESULTS_JSON
    try:  # a regular file within the report limit: a FIFO or /dev/zero is refused unread
        text = read_text(path, kind="report", error=BenchError)
    except BenchError as e:  # an input the user named, not a regression: the usage code (2), not 13
        msg = f"cannot read benchmark results: {e}; expected a results.json written by `harness bench`"
        raise UsageError(msg) from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        msg = f"{path} is not JSON ({str(e)[:200]}); expected a results.json written by `harness bench`"
        raise UsageError(msg) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        msg = f"{path}: expected schema {SCHEMA!r}, found {found!r}; was it written by `harness bench`?"
        raise UsageError(msg)
    return doc


def _noise(iv: Interval, z_crit: float) -> float | None:
    if iv.lo is None or iv.hi is None or iv.lo <= 0:
        return None
    return (math.log(iv.hi) - math.log(iv.lo)) / (2.0 * z_crit)


def compare(old: Path | str | Mapping[str, Any], new: Path | str | Mapping[str, Any], *,
            z_crit: float = 1.96, min_pct: float = 1.0) -> Comparison:
    """Compare two runs metric by metric, recomputing both analyses from their raw samples.

    A change counts when it exceeds ``z_crit`` times the combined noise of both runs
    (each run's interval half-width on the log scale, as a standard error) and is at
    least ``min_pct`` percent.
    """
    docs = [load_results(old), load_results(new)]
    results = [BenchResult.from_dict(d) for d in docs]
    analyses = [analyze(r.samples, aa=r.aa) for r in results]
    notes: list[str] = []
    for role in ("A", "B"):
        pins = [d["arms"][role].get("describe", {}).get("pin") for d in docs]
        if pins[0] != pins[1]:
            notes.append(f"arm {role} changed pin: {pins[0]} -> {pins[1]}")
    if docs[0].get("host", {}).get("cpu_model") != docs[1].get("host", {}).get("cpu_model"):
        notes.append("the runs were on different CPUs: absolute figures are not comparable, ratios are")
    threads = [(d.get("system") or {}).get("threads") for d in docs]
    if threads[0] != threads[1]:
        notes.append(f"the runs used different thread counts per arm: {threads[0]} -> {threads[1]}")
    rows: list[CompareRow] = []
    for key, ms_old in analyses[0].metrics.items():
        ms_new = analyses[1].metrics.get(key)
        if ms_new is None:
            continue
        pairs: list[tuple[str, Interval, Interval]] = []
        if ms_old.ratio is not None and ms_new.ratio is not None:
            pairs.append(("B/A", ms_old.ratio.ratio, ms_new.ratio.ratio))
        pairs += [(role, ms_old.arms[role].geomean, ms_new.arms[role].geomean)
                  for role in ("A", "B") if role in ms_old.arms and role in ms_new.arms]
        for what, o, n in pairs:
            rows.append(_compare_row(key, what, o, n, ms_old.higher_is_better, z_crit, min_pct))
    for row in rows:
        if row.what == "A" and row.verdict in ("regression", "improvement"):
            notes.append(f"baseline A moved on {row.metric} ({row.change_pct:+.1f}%): the host or "
                         "the baseline changed; trust the B/A ratio over absolute figures")
            break
    return Comparison(old=str(docs[0].get("name")), new=str(docs[1].get("name")), rows=tuple(rows),
                      notes=tuple(notes))


def _compare_row(key: str, what: str, o: Interval, n: Interval, higher: bool, z_crit: float,
                 min_pct: float) -> CompareRow:
    change = 100.0 * (n.point / o.point - 1.0)
    so, sn = _noise(o, z_crit), _noise(n, z_crit)
    if so is None or sn is None:
        return CompareRow(metric=key, what=what, old=o, new=n, change_pct=change, z=None,
                          verdict="no interval")
    diff = math.log(n.point) - math.log(o.point)
    spread = math.hypot(so, sn)
    z = (diff if higher else -diff) / spread if spread > 0 else math.copysign(math.inf, diff if higher else -diff)
    verdict = "within noise"
    if abs(change) >= min_pct and abs(z) > z_crit:
        verdict = "improvement" if z > 0 else "regression"
    return CompareRow(metric=key, what=what, old=o, new=n, change_pct=change,
                      z=z if math.isfinite(z) else None, verdict=verdict)
