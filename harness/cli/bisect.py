"""``harness bisect``: the first upstream commit that fails a gate, found by ``git bisect run``."""

from __future__ import annotations

import argparse

from harness.cli import add_json_flag, print_json

DESCRIPTION = """\
Find the commit that broke a gate between a good and a bad revision of the
engine's repository. git keeps the search (git bisect run, in a bare clone
under the cache); each step builds one commit (the patch series applied, one
CPU level: the one the gate's instrument runs, haswell on x86-64 for CPU
simulation; the shared ccache) and decides it against the good build:

  decode>=R, prefill>=R  speed per token relative to the good build, by CPU
                         simulation (instructions and estimated cycles under
                         Valgrind: the same figure on any host); decode>=0.97
  kld<=X, top1>=F        agreement of the next-token distributions with the
                         good build's; e.g. kld<=0.01
  e2e:PATH[::TEST]       an e2e spec, run with $HARNESS_ARTIFACT set to the
                         commit's build

A commit that does not build, whose patches do not apply, or that the gate
cannot decide is skipped (git bisect skip) and listed. Every probe is stamped:
the same command again resumes a stopped search, and answers a finished one at
once. The good build must pass and the bad one fail, or nothing is bisected
(exit 20).

examples:
  harness bisect ENGINE --repo ~/mirrors/ENGINE.git --good b11300 \\
      --bad b11549 --gate 'decode>=0.97' --option model=$HARNESS_MODEL
  harness bisect ENGINE --repo URL --good G --bad B --gate 'kld<=0.01' \\
      --option model=M --json
  harness bisect ENGINE --good G --bad B --gate e2e:SPEC.py::greedy
      (a spec file of the engine's e2e/)
  harness bisect ENGINE --repo MIRROR --filter blob:none --sparse src ...
      (a mirror without its large blobs: check out what the build needs)
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bisect", help="find the upstream commit that broke a gate (git bisect run, each step built and gated)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", metavar="ENGINE", help="the engine whose recipe builds each commit (harness engines lists them)")
    p.add_argument("--good", required=True, metavar="REV", help="a commit, tag or branch that passes the gate")
    p.add_argument("--bad", required=True, metavar="REV", help="a later commit that fails it (descends from --good)")
    p.add_argument("--gate", required=True, metavar="GATE",
                   help="decode>=R | prefill>=R | kld<=X | top1>=F | e2e:PATH[::TEST] (see above)")
    p.add_argument("--repo", metavar="URL|PATH", help="the repository to bisect (default: the engine's git source.url)")
    p.add_argument("--option", action="append", default=[], metavar="K=V",
                   help="an option of the gate's runs, e.g. model=PATH (the model the speed and agreement gates run)")
    p.add_argument("--no-patches", action="store_true",
                   help="build each commit as upstream has it (the engine's patch series left out)")
    p.add_argument("--filter", default="", metavar="SPEC",
                   help="git partial-clone filter for each commit's checkout (blob:none: a mirror without large blobs)")
    p.add_argument("--sparse", action="append", default=[], metavar="PATH",
                   help="check out only these paths of each commit (repeatable; what the build needs)")
    p.add_argument("--sim-shape", metavar="P1,P2,G1,G2[,R]",
                   help="CPU simulation's run lengths (harness bench --sim-shape; default 32,96,4,20)")
    add_json_flag(p)
    p.set_defaults(func=cmd_bisect, extras=("build", "bench"))


def _options(items: list[str]) -> dict[str, str]:
    from harness.core.errors import UsageError

    out = {}
    for item in items:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise UsageError(f"--option takes K=V (e.g. model=PATH), got {item!r}")
        out[k.strip()] = v
    return out


def cmd_bisect(args: argparse.Namespace) -> int:
    from harness.bisect import gates, search
    from harness.engine.descriptor import load_engine

    gate = gates.Gate.parse(args.gate)
    engine = load_engine(args.engine)
    res = search.run(engine, good=args.good, bad=args.bad, gate=gate, repo_url=args.repo, options=_options(args.option),
                     patches=not args.no_patches, sim_shape=args.sim_shape, filter=args.filter,
                     sparse=tuple(args.sparse))
    if args.json:
        print_json(res.as_dict())
        return 0
    if res.first_bad:
        print(f"first bad commit: {res.first_bad[:12]} {res.subject}")
    else:
        print(f"the first bad commit is one of {len(res.candidates)} (skipped commits between them): "
              + ", ".join(c[:12] for c in res.candidates))
    print(f"gate {res.config.gate}; {res.commits} commits searched in {len(res.steps)} steps, {res.builds} builds "
          f"this run, {res.seconds:.0f} s; CPU level {res.config.level}")
    print(f"  good {res.good.commit[:12]}: {res.good.text}")
    print(f"  bad  {res.bad.commit[:12]}: {res.bad.text}")
    for n, s in enumerate(res.steps, 1):
        print(f"  {n:>2}. {s.commit[:12]} {s.verdict:<4} {s.text}  ({s.subject[:60]})")
    print("reproduce:")
    for line in res.reproduce:
        print(f"  {line}")
    return 0
