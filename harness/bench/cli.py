"""``harness bench`` (ABBA A/B runs) and ``harness report compare`` (regressions between runs)."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from harness import progress
from harness.cli import add_json_flag, print_json
from harness.errors import BenchError, UsageError

if TYPE_CHECKING:  # the heavy modules (scipy, matplotlib) load only when a command runs
    from harness.bench.arms import ArmSpec
    from harness.bench.report import Comparison
    from harness.bench.stats import Analysis, Interval

BENCH_EPILOG = """\
arms are KIND[:key=value,...]; A is the baseline, B the candidate:
  harness bench --a fake --b fake:slowdown=1.1        a synthetic 10% regression
  harness bench --aa --a fake                         an arm against itself (interval must contain 1.0)
  harness bench --a PEER:model=M.gguf --b backend:variant=cpu,model=M.gguf
      our engine against a peer baseline arm an engine plugin provides (README: the kinds)
  harness bench --concurrency 1 --a TOOL:pin=OLD,model=M.gguf --b TOOL:pin=NEW,model=M.gguf
      old pin vs new pin through an engine's own benchmark tool arm: each pin's recipe (descriptor,
      patches, ABI surface) comes from the newest commit of any branch or tag that pinned it (or
      rev=GITREV); missing artifacts are built first
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench", help="benchmark arm B against baseline A in interleaved ABBA blocks",
        description="Warm both arms (each in its own worker process), then measure them in ABBA "
        "blocks: prefill TTFT at --pn, decode tok/s over --gn and aggregate tok/s at each "
        "--concurrency. Writes reports/<timestamp>-<name>/ (results.json, report.md, PNGs).",
        epilog=BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, metavar="KIND[:k=v,...]", help="baseline arm")
    p.add_argument("--b", metavar="KIND[:k=v,...]", help="candidate arm (omit with --aa)")
    p.add_argument("--aa", action="store_true",
                   help="A/A run: measure --a against a second copy of itself; fails unless every "
                   "interval contains 1.0")
    p.add_argument("--blocks", type=int, default=4, help="ABBA blocks (default: 4)")
    p.add_argument("--pn", type=int, default=512, help="prompt tokens (default: 512)")
    p.add_argument("--gn", type=int, default=128, help="generated tokens (default: 128)")
    p.add_argument("--concurrency", default="1,4", metavar="C[,C...]",
                   help="concurrency levels for aggregate tok/s (default: 1,4)")
    p.add_argument("--name", help="report name (default: KIND-vs-KIND, or aa-KIND)")
    p.add_argument("--out", type=Path, help="reports directory (default: reports/ in the checkout)")
    p.add_argument("--no-roofline", action="store_true",
                   help="skip the host bandwidth/GEMM measurement (cached after the first run)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="extra plugin module for the arm workers (repeatable)")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    add_json_flag(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("report", help="work with benchmark reports")
    rsub = p.add_subparsers(dest="report_command", metavar="SUBCOMMAND", required=True)
    c = rsub.add_parser("compare", help="flag regressions of NEW against OLD beyond both runs' noise",
                        description="Recompute both runs' statistics from their raw samples and flag "
                        "each metric whose change exceeds the combined noise of the two intervals. "
                        f"Exits {BenchError.exit_code} when the candidate regressed.")
    c.add_argument("old", type=Path, help="results.json (or its report directory) of the reference run")
    c.add_argument("new", type=Path, help="results.json (or its report directory) of the new run")
    c.add_argument("--min-pct", type=float, default=1.0,
                   help="ignore changes smaller than this, percent (default: 1.0)")
    add_json_flag(c)
    c.set_defaults(func=cmd_report_compare)


def parse_concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        msg = f"expected comma-separated positive integers for --concurrency, found {text!r}; e.g. 1,4"
        raise UsageError(msg)
    return levels


def prepare_arm(spec: ArmSpec) -> ArmSpec:
    """Let the arm's plugin prepare it here, in the parent (builds show progress), before workers start."""
    from harness.plugin import get_manager

    options = get_manager().hook.harness_bench_arm_prepare(kind=spec.kind, options=dict(spec.options))
    return spec if options is None else dataclasses.replace(spec, options=options)


def cmd_bench(args: argparse.Namespace) -> int:
    from harness.bench.abba import BenchConfig, run_abba
    from harness.bench.arms import ArmSpec
    from harness.bench.report import write_report
    from harness.bench.stats import analyze

    a = prepare_arm(ArmSpec.parse(args.a))
    if args.aa:
        if args.b:
            msg = "--aa measures --a against itself; expected no --b, found --b " + args.b
            raise UsageError(msg)
        b = ArmSpec(kind=a.kind, name=a.name, options=dict(a.options))
    elif not args.b:
        msg = "expected --b KIND[:k=v,...] (the candidate), or --aa to run --a against itself"
        raise UsageError(msg)
    else:
        b = prepare_arm(ArmSpec.parse(args.b))
    config = BenchConfig(blocks=args.blocks, pn=args.pn, gn=args.gn,
                         concurrency=parse_concurrency(args.concurrency))

    from harness import host as hostmod

    host = hostmod.as_dict(hostmod.probe())
    measure = None
    if not args.no_roofline:
        from harness.bench.roofline import measure_host

        with progress.spinner("measuring this host's bandwidth and GEMM roofline (cached)"):
            measure = measure_host()
    result = run_abba(a, b, config, name=args.name, aa=args.aa, isolate=not args.in_process,
                      extra_plugins=tuple(args.plugin))
    analysis = analyze(result.samples, aa=args.aa)
    files = write_report(result, out=args.out, analysis=analysis, host=host, host_measure=measure,
                         plots=not args.no_plots)
    if args.json:
        print_json({"report": str(files.directory), "results": str(files.results),
                    "markdown": str(files.markdown), "plots": [str(p) for p in files.plots],
                    "aa": args.aa, "aa_ok": analysis.aa_ok, "summary": summary(analysis),
                    "findings": [asdict(f) for f in analysis.findings]})
    else:
        _print_bench(analysis, files.directory)
    if args.aa and not analysis.aa_ok:
        progress.console.print("[bold red]A/A check failed:[/] an interval excludes 1.0 for an arm "
                               "measured against itself; the numbers of this setup cannot be trusted",
                               highlight=False)
        return BenchError.exit_code
    return 0


def summary(analysis: Analysis) -> dict[str, Any]:
    """``{metric: {ratio, lo, hi, verdict, A, B}}`` for --json."""
    out: dict[str, Any] = {}
    for key, ms in analysis.metrics.items():
        row: dict[str, Any] = {role: arm.geomean.point for role, arm in ms.arms.items()}
        if ms.ratio is not None:
            iv = ms.ratio.ratio
            row.update(ratio=iv.point, lo=iv.lo, hi=iv.hi, verdict=ms.ratio.verdict)
        out[key] = row
    return out


def _ci(iv: Interval, fmt: str = ".3f") -> str:
    text = format(iv.point, fmt)
    return text if iv.lo is None or iv.hi is None else f"{text} [{iv.lo:{fmt}}, {iv.hi:{fmt}}]"


def _stdout() -> Console:
    return Console(soft_wrap=False, width=140)


def _print_bench(analysis: Analysis, directory: Path) -> None:
    t = Table("metric", "A", "B", "B/A (95% CI)", "verdict")
    for ms in analysis.metrics.values():
        if ms.ratio is None:
            continue
        style = {"B faster": "green", "B slower": "red"}.get(ms.ratio.verdict, "")
        t.add_row(f"{ms.label} @ c={ms.concurrency} ({ms.unit})",
                  *(f"{ms.arms[r].geomean.point:.4g}" if r in ms.arms else "n/a" for r in ("A", "B")),
                  _ci(ms.ratio.ratio), f"[{style}]{ms.ratio.verdict}[/]" if style else ms.ratio.verdict)
    out = _stdout()
    out.print(t)
    for f in analysis.findings:
        color = {"error": "red", "warning": "yellow"}.get(f.level, "dim")
        where = f" {f.metric}" if f.metric else ""
        out.print(f"[{color}]{f.level}[/]{where}: {f.message}", highlight=False)
    out.print(f"report: {directory}", highlight=False)


def cmd_report_compare(args: argparse.Namespace) -> int:
    from harness.bench.report import compare

    comp = compare(args.old, args.new, min_pct=args.min_pct)
    if args.json:
        print_json(comp.as_dict())
    else:
        _print_compare(comp)
    return BenchError.exit_code if comp.regressions else 0


def _print_compare(comp: Comparison) -> None:
    t = Table("metric", "what", "old", "new", "change", "z", "verdict")
    for r in comp.rows:
        style = {"regression": "red", "improvement": "green"}.get(r.verdict, "")
        verdict = f"[{style}]{r.verdict}[/]" if style else r.verdict
        fmt = ".3f" if r.what == "B/A" else ".4g"
        t.add_row(r.metric, r.what, _ci(r.old, fmt), _ci(r.new, fmt), f"{r.change_pct:+.1f}%",
                  "n/a" if r.z is None else f"{r.z:+.1f}", verdict)
    out = _stdout()
    out.print(t)
    for note in comp.notes:
        out.print(f"[dim]note:[/] {note}", highlight=False)
    n = len(comp.regressions)
    out.print(f"[red]{n} regression(s) of the candidate[/]" if n else "no regression beyond the noise",
              highlight=False)
