"""``harness audit isa``: the static ISA audit of every CPU level of an artifact."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli import add_engine_arg, add_json_flag, print_json
from harness.core.errors import AuditError

DESCRIPTION = """\
Decode every CPU level library of a built artifact (lib/libggml-cpu-<level>.so) with
iced-x86, collect the CPUID features its instructions need, and compare them with the
features the loader checks before it picks that level (read from the pinned source:
ggml's variant definitions and its score function). Also checks that every AMX
ldtilecfg loads a config with non-zero rows and column bytes.

Nothing is executed: every level is audited on any x86-64 host, also the levels this
CPU cannot run. Exit 0 when every level is clean, 17 (AuditError) otherwise.

examples (`harness engines` lists the engine names):
  harness audit isa ENGINE --variant cpu
  harness audit isa ENGINE --variant cpu --json
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("audit", help="static audits of built artifacts (ISA of each CPU level)")
    asub = p.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    q = asub.add_parser("isa", help="instructions of each CPU level vs the features its loader checks",
                        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_arg(q)
    q.add_argument("--variant", default="cpu", help="matrix row whose artifact to audit (default: cpu)")
    q.add_argument("--artifact", type=Path, metavar="DIR", help="audit this artifact dir instead of the built one")
    add_json_flag(q)
    q.set_defaults(func=cmd_isa, extras=('build',))


def cmd_isa(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.audit.artifact import audit_engine, findings_lines
    from harness.cli.inspect import _stdout_table
    from harness.engine.descriptor import load_engine

    r = audit_engine(load_engine(args.engine), args.variant, args.artifact)
    if args.json:
        print_json(r)
    else:
        t = Table("level", "status", "checked by the loader", "instructions", "findings / notes",
                  title=f"{r['engine']} {r['pin']} {r['variant']}: ISA audit of {len(r['levels'])} CPU levels "
                  f"({r['arch']}, {r['seconds']:.1f} s)")
        for a in r["levels"]:
            status = "[green]clean[/]" if a["clean"] else "[red]FINDINGS[/]"
            lines = findings_lines([a])
            lines += [f"AMX tile config ({t['storage']}): {t['detail']}" for t in a["tile_configs"] if t["ok"]]
            lines += a["notes"]
            t.add_row(a["level"], status, " ".join(a["checked"]) or "(baseline x86-64)", f"{a['instructions']:,}",
                      "\n".join(lines))
        _stdout_table(t)
    if not r["clean"]:
        msg = "; ".join(findings_lines(r["levels"])) + \
            ". A level whose code needs more than its loader checks crashes (SIGILL) on CPUs that pass the check"
        raise AuditError(msg)
    return 0
