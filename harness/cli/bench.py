"""``harness bench`` (ABBA A/B runs), ``harness report compare`` (regressions between runs) and
``harness report merge`` (qualifications from several hosts side by side)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli import add_json_flag, print_json
from harness.core.errors import BenchError, GateUndecidedError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

if TYPE_CHECKING:  # the heavy modules (scipy, matplotlib) load only when a command runs
    from harness.bench.arms import ArmSpec
    from harness.bench.comparison import Comparison
    from harness.bench.session import Outcome
    from harness.bench.stats import Analysis, Interval

BENCH_EPILOG = """\
arms are KIND[:key=value,...]; A is the baseline, B the candidate:
  harness bench --a fake --b fake:slowdown=1.1        a synthetic 10% regression
  harness bench --aa --a fake                         an arm against itself (interval must contain 1.0)
  harness bench --a PEER:model=M.gguf --b in-process:variant=cpu,model=M.gguf
      our engine against a peer baseline arm an engine plugin provides (README: the kinds)
  harness bench --a fake --b fake:slowdown=1.1 --fail-on-slower 5
      exit 13 when B is slower by more than 5% (whole 95% interval below 0.95) on a headline metric,
      exit 18 when the run cannot resolve 5% (the interval straddles 0.95): undecided, not a pass
  harness bench --a A --b B --until-halfwidth 3 --max-blocks 24
      add blocks until every headline interval is within +-3% (or 24 blocks are done)
  harness bench --instrument simulation --a TOOL:artifact=DIR,model=M.gguf --b in-process:model=M.gguf \
      --fail-on-slower 3
      the binding's code path against its engine's tool, counted, not timed: one thread, CPU level
      haswell (Valgrind executes no AVX-512 or AMX), per-token figures from two run lengths; the same
      figure on a busy or a quiet host. --instrument walltime,simulation measures both, side by side
  the simulation gate's error rates (injected 3% kernel and 2% binding regressions, A/A):
      python scripts/sim_error_rates.py --help
  harness bench --concurrency 1 --a TOOL:pin=OLD,model=M.gguf --b TOOL:pin=NEW,model=M.gguf
      old pin vs new pin through an engine's own benchmark tool arm: each pin's recipe (descriptor,
      patches, ABI surface) comes from the newest commit of any branch or tag that pinned it (or
      rev=GITREV); missing artifacts are built first
what a gate can promise is measured, not assumed (reports/reference-20261201-bench-error-rates, a 2-core
Sapphire Rapids VM, 0.7B Q4_0, decode p128 g64, 8 fresh-process blocks, ~70 s per comparison): a 95%
half-width of about +-2.7%; --fail-on-slower 2 raised 0 false alarms in 20 A/A runs and caught 5 of 20
real 3% slowdowns (the other 15 undecided, exit 18); 95% power against 3% at a 2% gate needs ~138 blocks
there. Rerun it on your host: nox -s bench-error-rates
an arm's display name is name=LABEL in its spec (default: the kind and what sets it apart, e.g.
in-process:cpu); the full spec stays in results.json. Arms get threads=N (the host's physical cores,
or --threads) unless their spec sets threads.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench", help="benchmark arm B against baseline A in interleaved ABBA blocks",
        description="Measure both arms in ABBA blocks, each block in a fresh worker process per arm "
        "(the process is the sampling unit: two processes of one arm differ by a steady offset, which "
        "the interval must cover), warmed by one discarded measurement: prefill TTFT at --pn, decode "
        "tok/s over --gn and aggregate tok/s at each --concurrency. Writes reports/<timestamp>-<name>/ "
        "(results.json, report.md, PNGs).",
        epilog=BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, metavar="KIND[:k=v,...]", help="baseline arm")
    p.add_argument("--b", metavar="KIND[:k=v,...]", help="candidate arm (omit with --aa)")
    p.add_argument("--aa", action="store_true",
                   help="A/A run: measure --a against a second copy of itself; fails unless every "
                   "interval contains 1.0")
    p.add_argument("--blocks", type=int, default=4,
                   help="ABBA blocks (default: 4); with --until-halfwidth, the fewest blocks")
    p.add_argument("--until-halfwidth", type=float, metavar="PCT",
                   help="adaptive: after --blocks, add AB/BA block pairs until every headline interval "
                   "(prefill, decode, aggregate) is within +-PCT percent; the report says what stopped it")
    p.add_argument("--max-blocks", type=int, metavar="N",
                   help="with --until-halfwidth: stop after N blocks whatever the intervals (default: 32)")
    p.add_argument("--max-seconds", type=float, metavar="S",
                   help="with --until-halfwidth: a wall-clock budget; no block pair starts that would end past "
                   "it, and the report says what the budget resolved")
    p.add_argument("--fail-on-slower", action="append", metavar="PCT | NAME=PCT[,...]",
                   help="three verdicts per metric from the 95%% interval of its speed ratio: FAILED (exit 13) "
                   "when the whole interval is below 1-PCT/100, passed when the whole interval is at or above "
                   "it, undecided (exit 18, not a pass) when it straddles it: a PCT gate needs a half-width "
                   "under PCT; a bare PCT gates every headline metric, NAME=PCT one of prefill, decode, "
                   "aggregate (or a metric key such as decode_tps@c4); repeatable")
    p.add_argument("--reuse-process", action="store_true",
                   help="one worker process per arm for the whole run (faster to start, but the interval "
                   "then misses the per-process offset; for debugging an arm, not for a verdict)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="compute threads per arm (default: the host's physical cores); an arm's own "
                   "threads= option wins")
    p.add_argument("--no-malloc-hugetlb", action="store_true",
                   help="start every arm's processes without glibc's malloc hugepages (by default they get "
                   "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 on Linux with glibc 2.35+, which madvises malloc's "
                   "large blocks, the engines' weight buffers among them, for transparent hugepages: +9-22%% "
                   "decode measured under THP madvise; both arms alike either way; same as "
                   "HARNESS_MALLOC_HUGETLB=0). The report records which")
    p.add_argument("--pn", type=int, default=512, help="prompt tokens (default: 512)")
    p.add_argument("--gn", type=int, default=128, help="generated tokens (default: 128)")
    p.add_argument("--concurrency", default="1,4", metavar="C[,C...]",
                   help="concurrency levels for aggregate tok/s (default: 1,4)")
    p.add_argument("--name", help="report name (default: KIND-vs-KIND, or aa-KIND)")
    p.add_argument("--out", type=Path, help="reports directory (default: reports/ in the checkout)")
    p.add_argument("--no-roofline", action="store_true",
                   help="skip the host bandwidth/GEMM measurement (cached after the first run)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--embed-plots", action="store_true",
                   help="embed the plots in report.md as data URIs (for viewers that show them)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="extra plugin module for the arm workers (repeatable)")
    p.add_argument("--instrument", action="append", metavar="NAME[,NAME...]",
                   help="what measures the arms (default: walltime): walltime (ABBA blocks, intervals), "
                   "simulation (each arm's one-thread request under Valgrind's cachegrind: instructions and "
                   "simulated cache misses per token, deterministic on a noisy host; needs valgrind), counters "
                   "(hardware instructions and cycles through perf_event_open, where the host exposes them); "
                   "several give their ratios side by side and each gate says which decided it")
    p.add_argument("--sim-shape", metavar="P1,P2,G1,G2[,R]", default=None,
                   help="simulation run lengths: per-token prefill from prompts P1 and P2, decode from G1 and G2 "
                   "generated tokens; every shape runs 1+R times (default R=1), each figure takes its least run "
                   "(outliers only add work) and the spread within shapes sets the 99%% interval "
                   "(default: 32,96,4,20,1; R=2 narrows it and survives more outliers)")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    add_json_flag(p)
    p.set_defaults(func=cmd_bench, extras=('bench',))

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
    c.add_argument("--markdown", action="store_true",
                   help="print a table to paste into a pull request (B/A per metric, old vs new, verdict)")
    add_json_flag(c)
    c.set_defaults(func=cmd_report_compare, extras=('bench',))
    m = rsub.add_parser("merge", help="combine qualification reports from several hosts into one report",
                        description="Put qualification reports (reports/*-qualify-*/qualify.json) from different "
                        "hosts, CPU levels or variants side by side: a stage x host table, the CPU levels each "
                        "host ran or audited, each host's bench headline ratios with their 95% intervals (never "
                        "averaged across hosts), and the differences that matter (a stage or CPU level that "
                        "passes on one host and fails on another, a ratio faster on one and slower on another). "
                        "Reports of different engines, pins or patch series are refused "
                        f"(exit {UsageError.exit_code}). Writes merged.md and merged.json.")
    m.add_argument("reports", type=Path, nargs="+", metavar="DIR",
                   help="a qualification report directory, its qualify.json, or a directory holding several "
                   "(a CI run's downloaded artifacts)")
    m.add_argument("--out", type=Path,
                   help="output directory (default: reports/<timestamp>-merged-qualify-<engine>/)")
    add_json_flag(m)
    m.set_defaults(func=cmd_report_merge)


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
    from harness.bench.arms import prepare_arm as prepare

    return prepare(spec)


def cmd_bench(args: argparse.Namespace) -> int:
    from harness.bench.abba import BenchConfig
    from harness.bench.arms import ArmSpec, check_kind
    from harness.bench.gate import parse_gate, resolve_gate
    from harness.bench.report import all_findings
    from harness.bench.session import run_and_report, with_threads
    from harness.core import progress
    from harness.core.host import resolve_threads

    instruments = parse_instruments(args.instrument)
    threads, source = resolve_threads(args.threads)
    a_spec = ArmSpec.parse(args.a)
    b_spec = ArmSpec.parse(args.b) if args.b else None
    for spec in (a_spec, b_spec):
        if spec is not None:  # before anything is measured or built
            check_kind(spec, tuple(args.plugin))
    if "threads" in a_spec.options or (b_spec is not None and "threads" in b_spec.options):
        source = "set in the arm spec"
    a = prepare_arm(with_threads(a_spec, threads))
    if args.aa:
        if args.b:
            msg = "--aa measures --a against itself; expected no --b, found --b " + args.b
            raise UsageError(msg)
        b = ArmSpec(kind=a.kind, name=a.name, options=dict(a.options))
    elif b_spec is None:
        msg = "expected --b KIND[:k=v,...] (the candidate), or --aa to run --a against itself"
        raise UsageError(msg)
    else:
        b = prepare_arm(with_threads(b_spec, threads))
    config = BenchConfig(blocks=args.blocks, pn=args.pn, gn=args.gn,
                         concurrency=parse_concurrency(args.concurrency), until_halfwidth=args.until_halfwidth,
                         max_blocks=args.max_blocks, max_seconds=args.max_seconds,
                         fresh_process=not args.reuse_process)
    gate = parse_gate(args.fail_on_slower)
    thresholds = resolve_gate(gate, config.concurrency)  # a typo fails now, not after the run
    if config.until_halfwidth is not None:
        for key, pct in thresholds.items():
            if config.until_halfwidth >= pct:
                progress.info(f"[yellow]warning:[/] --until-halfwidth {config.until_halfwidth:g} stops at ±{config.until_halfwidth:g}%, "
                              f"which cannot resolve the {pct:g}% gate on {key} (it needs a half-width under "
                              f"{pct:g}%): expect 'undecided' unless B differs by much more", markup=True)

    sim_plan = None
    if "simulation" in instruments or "counters" in instruments:
        from harness.bench.simulation import SimPlan

        sim_plan = SimPlan.parse(args.sim_shape) if args.sim_shape else SimPlan()
    if "walltime" not in instruments:
        return _bench_without_walltime(args, a, b, gate, instruments, sim_plan)

    from harness.core import host as hostmod

    host = hostmod.as_dict(hostmod.probe())
    measure = None
    if not args.no_roofline:
        from harness.bench.roofline import measure_host

        with progress.spinner("measuring this host's bandwidth and GEMM roofline (cached)"):
            measure = measure_host()
    outcome = run_and_report(a, b, config, name=args.name, out=args.out, host=host, host_measure=measure,
                             gate=gate, threads_source=source, aa=args.aa, isolate=not args.in_process,
                             extra_plugins=tuple(args.plugin), plots=not args.no_plots,
                             embed_plots=args.embed_plots, malloc_hugetlb=False if args.no_malloc_hugetlb else None)
    analysis, files, verdict = outcome.analysis, outcome.files, outcome.gate
    stop = outcome.result.stop
    extra = _other_instruments(args, a, b, gate, instruments, sim_plan, files.directory)
    decisions = None
    if extra.get("simulation") is not None:
        from harness.bench.verdict import decide

        decisions = decide(verdict, extra["simulation"], gate_pcts=_metric_pcts(gate))
    if args.json:
        print_json({"report": str(files.directory), "results": str(files.results),
                    "markdown": str(files.markdown), "plots": [str(p) for p in files.plots],
                    "aa": args.aa, "aa_ok": analysis.aa_ok, "summary": summary(analysis),
                    "headline": [h.as_dict() for h in outcome.headline],
                    "gate": None if verdict is None else verdict.as_dict(),
                    "blocks": outcome.result.blocks_run, "stop": None if stop is None else stop.as_dict(),
                    "system": None if outcome.result.system is None else outcome.result.system.as_dict(),
                    "findings": [asdict(f) for f in all_findings(outcome.result, analysis)],
                    **_extra_json(extra, decisions)})
    else:
        _print_bench(outcome)
        _print_extra(extra, decisions)
    if decisions is not None:
        return _decided_rc(decisions, aa_failed=args.aa and not analysis.aa_ok)
    rc = 0
    if args.aa and not analysis.aa_ok:
        progress.console.print("[bold red]A/A check failed:[/] an interval excludes 1.0 for an arm "
                               "measured against itself; the numbers of this setup cannot be trusted",
                               highlight=False)
        rc = BenchError.exit_code
    if verdict is not None and not verdict.passed:
        if args.json:  # the human summary above already said it otherwise
            progress.console.print(f"[bold red]{verdict.verdict()}[/]", highlight=False, soft_wrap=True)
            for check in [*verdict.failures, *verdict.undecided]:
                progress.console.print(f"  {check.message}", highlight=False, soft_wrap=True)
        rc = rc or (BenchError.exit_code if verdict.failures else GateUndecidedError.exit_code)
    return rc


def parse_instruments(values: list[str] | None) -> tuple[str, ...]:
    """``--instrument`` values (repeatable, comma lists) -> instrument names, checked."""
    from harness.bench.simulation import INSTRUMENTS

    names = tuple(dict.fromkeys(n.strip() for v in (values or ["walltime"]) for n in v.split(",") if n.strip()))
    bad = [n for n in names if n not in INSTRUMENTS]
    if bad or not names:
        from harness.core.errors import did_you_mean

        hint = did_you_mean(bad[0], INSTRUMENTS) if bad else ""
        msg = f"unknown --instrument {', '.join(bad) or '(empty)'}{hint}; expected one or more of {', '.join(INSTRUMENTS)}"
        raise UsageError(msg)
    if names == ("counters",):
        msg = "--instrument counters needs walltime or simulation beside it (counters confirm, they do not gate)"
        raise UsageError(msg)
    return names


def _metric_pcts(gate: dict[str, float]) -> dict[str, float]:
    """The gate's prefill/decode percents as simulation reads them (``all`` applies to both)."""
    out: dict[str, float] = {m: gate[m] for m in ("prefill", "decode") if m in gate}
    if "all" in gate:
        out = {"prefill": gate["all"], "decode": gate["all"], **out}
    return out


def _other_instruments(args: argparse.Namespace, a: ArmSpec, b: ArmSpec, gate: dict[str, float],
                       instruments: tuple[str, ...], sim_plan: Any, directory: Path) -> dict[str, Any]:
    """Simulation and counters for the arms, written into ``directory`` (simulation.json/.md, counters.json)."""
    import json

    from harness.bench import counters, simulation

    extra: dict[str, Any] = {"simulation": None, "counters": None, "counters_note": None}
    if "simulation" not in instruments and "counters" not in instruments:
        return extra
    level = simulation.level_for_host()
    # the arm's name labels its target (name= of --a/--b); the figures are keyed by the target, never by it
    ta = simulation.target_for(a.kind, {**a.options, "name": a.name}, level=level)
    tb = simulation.target_for(b.kind, {**b.options, "name": b.name}, level=level)
    if args.aa:
        tb = simulation.target_for(a.kind, {**a.options, "name": f"{a.name} (2)"}, level=level)
    if "simulation" in instruments:
        sim = simulation.simulate(ta, tb, sim_plan, directory / "simulation", gate=_metric_pcts(gate) or None,
                                  level=level, aa=args.aa)
        (directory / "simulation.json").write_text(json.dumps(sim.as_dict(), indent=2) + "\n")
        (directory / "simulation.md").write_text(sim.markdown())
        extra["simulation"] = sim
    if "counters" in instruments:
        avail = counters.probe()
        if avail.available:
            extra["counters"] = counters.measure([ta, tb], sim_plan)
            (directory / "counters.json").write_text(json.dumps(extra["counters"], indent=2) + "\n")
        else:
            extra["counters_note"] = f"counters: not available on this host ({avail.reason})"
    return extra


def _extra_json(extra: dict[str, Any], decisions: Any) -> dict[str, Any]:
    sim = extra.get("simulation")
    return {"simulation": None if sim is None else sim.as_dict(), "counters": extra.get("counters"),
            "counters_note": extra.get("counters_note"),
            "decisions": None if decisions is None else [d.as_dict() for d in decisions]}


def _print_extra(extra: dict[str, Any], decisions: Any) -> None:
    out = _stdout()
    sim = extra.get("simulation")
    if sim is not None:
        out.print(sim.summary(), highlight=False, soft_wrap=True)
    if extra.get("counters"):
        for c in extra["counters"]["checks"]:
            out.print(f"counters {c['metric']}: instructions B/A speed {c['instructions_speed']:.4f}x, "
                      f"cycles {c['cycles_speed']:.4f}x", highlight=False)
    if extra.get("counters_note"):
        out.print(extra["counters_note"], highlight=False, soft_wrap=True)
    for d in decisions or ():
        style = {"passed": "green", "warning": "yellow", "undecided": "yellow"}.get(d.status, "red")
        out.print(f"[{style}]{d.line()}[/]", highlight=False, soft_wrap=True)


def _decided_rc(decisions: Any, *, aa_failed: bool) -> int:
    from harness.bench.verdict import overall

    status = overall(decisions)
    if aa_failed or status == "FAILED":
        return BenchError.exit_code
    return GateUndecidedError.exit_code if status == "undecided" else 0


def _bench_without_walltime(args: argparse.Namespace, a: ArmSpec, b: ArmSpec, gate: dict[str, float],
                            instruments: tuple[str, ...], sim_plan: Any) -> int:
    """Simulation (and counters) only: no ABBA blocks; a report dir with simulation.json/.md."""
    import time

    from harness.bench.verdict import decide
    from harness.core import paths, progress

    name = args.name or (f"aa-{a.kind}" if args.aa else f"{a.kind}-vs-{b.kind}")
    directory = (args.out or paths.reports_dir()) / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{name}-simulation"
    directory.mkdir(parents=True, exist_ok=True)
    extra = _other_instruments(args, a, b, gate, instruments, sim_plan, directory)
    decisions = decide(None, extra["simulation"], gate_pcts=_metric_pcts(gate)) if gate else []
    if args.json:
        print_json({"report": str(directory), **_extra_json(extra, decisions)})
    else:
        _print_extra(extra, decisions)
        _stdout().print(f"report: {directory}", highlight=False)
    if args.aa:
        sim = extra["simulation"]
        off = [c for c in sim.checks if not c.lo <= 1.0 <= c.hi]
        if off:
            progress.console.print("[bold red]A/A check failed:[/] " + "; ".join(c.text() for c in off), highlight=False)
            return BenchError.exit_code
    return _decided_rc(decisions, aa_failed=False)


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
    from rich.console import Console
    return Console(soft_wrap=False, width=140)


def _print_bench(outcome: Outcome) -> None:
    from rich.table import Table

    from harness.bench.gate import fmt_speed
    from harness.bench.markdown import GROUP_TITLES, group_findings
    from harness.bench.report import all_findings

    analysis = outcome.analysis
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
    out.print("headline (B/A speed): " + "; ".join(f"{h.label} {fmt_speed(h.speed)} {h.verdict}"
                                                   for h in outcome.headline), highlight=False)
    if outcome.result.stop is not None:
        out.print(outcome.result.stop.text(), highlight=False)
    for level, kind, items in group_findings(all_findings(outcome.result, analysis)):
        color = {"error": "red", "warning": "yellow"}.get(level, "dim")
        if len(items) == 1 or not kind or kind == "system":
            for f in items:
                where = f" {f.metric}" if f.metric else ""
                out.print(f"[{color}]{level}[/]{where}: {f.message}", highlight=False)
            continue
        out.print(f"[{color}]{level}[/] ({len(items)}): {GROUP_TITLES.get(kind, kind)}", highlight=False)
        for f in items:
            out.print(f"  {f.metric}: {f.detail or f.message}", highlight=False)
    if outcome.gate is not None and outcome.gate.checks:
        style = {"passed": "green", "undecided": "yellow"}.get(outcome.gate.status, "red")
        out.print(f"[{style}]{outcome.gate.verdict()}[/]", highlight=False)
        for check in outcome.gate.checks:
            out.print(f"  {check.message}", highlight=False, soft_wrap=True)
    out.print(f"report: {outcome.files.directory}", highlight=False)


def cmd_report_compare(args: argparse.Namespace) -> int:
    from harness.bench.report import compare

    comp = compare(args.old, args.new, min_pct=args.min_pct)
    if args.json:
        print_json(comp.as_dict())
    elif args.markdown:
        from harness.bench.markdown import render_compare_markdown

        print(render_compare_markdown(comp, min_pct=args.min_pct), end="")
    else:
        _print_compare(comp)
    return BenchError.exit_code if comp.regressions else 0


def cmd_report_merge(args: argparse.Namespace) -> int:
    from harness.qualify.merge import write_merged

    merged, out = write_merged(args.reports, args.out)
    if args.json:
        print_json({"report": str(out), **merged})
    else:
        print((out / "merged.md").read_text(), end="")
        print(f"report: {out}")
    return 0


def _print_compare(comp: Comparison) -> None:
    from rich.table import Table
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
