"""``harness qualify``: the main job."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli import add_json_flag, print_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("qualify", help="run the whole pipeline for the engine pin on this host and write a report",
                       description="fetch, patch, ABI check, build every default buildable variant, build the "
                       "binding, fetch the fixture models, run the e2e specs per variant, the cross-variant check "
                       "and ABBA benchmarks of our cpu build against the engine's peer baseline on each bench model (adaptive "
                       "blocks, gated by --fail-on-slower); the engine-ceiling and old-pin gates are decided by CPU simulation "
                       "(Valgrind: instructions and simulated cache misses per token, deterministic on a noisy host) "
                       "beside wall-clock, which alone fails a gate it resolves below the floor; qualify.md opens "
                       "with each gate, its verdict and the instrument that decided it. Writes "
                       "reports/<timestamp>-qualify-<engine>/qualify.{md,json}. Exit 1 when a stage failed, 18 when "
                       "none failed but a gate was decided by no instrument (not a pass); a gate simulation passed "
                       "while wall-clock could not resolve it on this host is a warning (exit 0). "
                       "Moving a pin? Add --old-pin OLD (or --old-rev main) for the pull request's material: the "
                       "API/ABI diff and old-vs-new figures of the engine's own benchmark tool in the same report.")
    p.add_argument("engine", nargs="?", default=None, help="engine name (default: the default text engine)")
    p.add_argument("--blocks", type=int, default=None,
                   help="ABBA blocks: the fewest of an adaptive run, the count of a fixed one (default 4)")
    p.add_argument("--until-halfwidth", type=float, metavar="PCT",
                   help="add blocks until every headline interval is within +-PCT percent (default: the "
                   "engine descriptor's qualify.bench.until_halfwidth, else 3); 0 runs exactly --blocks")
    p.add_argument("--max-blocks", type=int, metavar="N",
                   help="the most blocks an adaptive bench takes (default: qualify.bench.max_blocks, else 12)")
    p.add_argument("--fail-on-slower", action="append", metavar="PCT | NAME=PCT[,...]",
                   help="fail a bench stage when B is slower than A by more than PCT percent with 95%% confidence "
                   "(default: the descriptor's qualify.bench.fail_on_slower); NAME: prefill, decode, aggregate")
    p.add_argument("--threads", type=int, metavar="N",
                   help="compute threads for the bench arms and the cross-variant runs (default: the host's "
                   "physical cores)")
    p.add_argument("--pn", type=int, help="bench prompt tokens, every bench model (default: the descriptor's "
                   "qualify.bench.shapes for the model, else 512)")
    p.add_argument("--gn", type=int, help="bench generated tokens, every bench model (default: "
                   "qualify.bench.shapes, else 128)")
    p.add_argument("--concurrency", default="1,4", help="bench concurrency levels (default 1,4)")
    p.add_argument("--variant", metavar="PAT",
                   help="matrix rows to build and test, fnmatch pattern(s), comma-separated (default: the rows "
                   "marked default: true that the engine builds); what a `harness matrix --ci github` entry passes")
    p.add_argument("--no-bench", action="store_true", help="skip the benchmark stage")
    p.add_argument("--instrument", action="append", metavar="NAME[,NAME...]",
                   help="what the bench stages measure with: walltime, simulation, counters (default: the "
                   "descriptor's qualify.bench.instruments, else walltime,simulation)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--old-pin", metavar="VERSION",
                   help="also compare with the pin this one replaces: the API/ABI diff and an ABBA run of both "
                   "cpu artifacts' own benchmark tool (the old recipe comes from git history and is built when needed)")
    g.add_argument("--old-rev", metavar="GITREV", help="like --old-pin, naming the commit/branch (e.g. main)")
    p.add_argument("--arch", action="append", metavar="ARCH",
                   help="qualify the cross-built rows for ARCH (e.g. aarch64) under emulation: every CPU level under "
                   "the QEMU CPU model that has its features; a row that cannot be built or run here fails with the "
                   "reason (repeatable; 'all': every cross row whose toolchain is installed; default: none, each reported "
                   "as a skipped stage saying how to run it, unless --variant names the row)")
    p.add_argument("--out", type=Path, help="reports directory (default: reports/ in the checkout)")
    add_json_flag(p)
    p.set_defaults(func=cmd_qualify, extras=('build', 'bench'))


def _instruments(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    from harness.cli.bench import parse_instruments

    return list(parse_instruments(values))


def cmd_qualify(args: argparse.Namespace) -> int:
    from harness.qualify import qualify

    conc = tuple(int(c) for c in args.concurrency.split(",") if c)
    q, directory = qualify(args.engine, bench_blocks=args.blocks, bench_pn=args.pn, bench_gn=args.gn,
                           bench_concurrency=conc, out=args.out, run_bench=not args.no_bench,
                           old_pin=args.old_pin, old_rev=args.old_rev, threads=args.threads,
                           fail_on_slower=args.fail_on_slower, until_halfwidth=args.until_halfwidth,
                           max_blocks=args.max_blocks, variant=args.variant, instruments=_instruments(args.instrument),
                           arch=None if args.arch is None else [a for a in args.arch if a != "none"])
    if args.json:
        print_json({"passed": q.passed, "report": str(directory),
                    "stages": [{"name": s.name, "status": s.status, "seconds": s.seconds, "summary": s.summary}
                               for s in q.stages]})
    else:
        print((directory / "qualify.md").read_text())
        print(f"report: {directory}")
    if q.undecided:
        from harness.core.errors import GateUndecidedError

        return GateUndecidedError.exit_code
    return 0 if q.passed else 1
