"""``harness audit isa``: the static ISA audit of every CPU level of an artifact."""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

from harness.cli import add_json_flag, print_json
from harness.errors import ArtifactError, AuditError

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
    q.add_argument("engine")
    q.add_argument("--variant", default="cpu", help="matrix row whose artifact to audit (default: cpu)")
    q.add_argument("--artifact", type=Path, metavar="DIR", help="audit this artifact dir instead of the built one")
    add_json_flag(q)
    q.set_defaults(func=cmd_isa, extras=('build',))


def audit_engine(engine_name: str, variant: str = "cpu", artifact: Path | None = None) -> dict[str, Any]:
    """Audit one engine's artifact; returns the report (``clean``, ``levels``) without raising on findings."""
    from harness import pipeline
    from harness.audit.isa import audit_artifact
    from harness.build import artifact_dir
    from harness.engines import load_engine
    from harness.host import normalize_arch
    from harness.matrix import get_variant
    from harness.plugin import get_manager
    from harness.runtime.levels import level_libraries

    t0 = time.perf_counter()
    engine = load_engine(engine_name)
    art = artifact or artifact_dir(engine, get_variant(variant))
    lib = art / "lib"
    if not lib.is_dir():
        msg = (f"no artifact at {art}: run harness build {engine.name} --variant {variant} first "
               "(or pass --artifact DIR)")
        raise ArtifactError(msg)
    pm = get_manager()
    tree = pipeline.patched_tree(engine, pm)
    arch = _artifact_arch(lib) or normalize_arch(platform.machine())
    if arch != "x86_64":
        msg = (f"{art} holds {arch} code: the static ISA audit decodes x86-64 only. A cross-built row's levels "
               f"are run instead, each under the emulated CPU model that has its features: harness emulate "
               f"--variant {variant}")
        raise AuditError(msg)
    levels = pm.hook.harness_artifact_cpu_levels(tree=tree.path, arch=arch)
    if levels is None:
        msg = f"no plugin defines the CPU levels of {engine.name} for {arch}; nothing to audit"
        raise AuditError(msg)
    built = {p.name for p in level_libraries(lib)}
    if not built:
        msg = f"{lib} holds no CPU level libraries: the {variant} artifact has one built-in level; nothing to audit"
        raise AuditError(msg)
    audits = audit_artifact(lib, [lvl for lvl in levels if lvl.library in built or lvl.arch == arch])
    return {"engine": engine.name, "pin": engine.pin, "variant": variant, "artifact": str(art), "arch": arch,
            "clean": all(a.clean for a in audits), "seconds": round(time.perf_counter() - t0, 2),
            "levels": [a.as_dict() for a in audits],
            "definitions": {lvl.name: lvl.source for lvl in levels}}


def _artifact_arch(lib: Path) -> str | None:
    from elftools.elf.elffile import ELFFile

    from harness.runtime.levels import level_libraries

    for p in level_libraries(lib)[:1]:
        with p.open("rb") as f:
            return {"x64": "x86_64", "AArch64": "aarch64"}.get(ELFFile(f).get_machine_arch())
    return None


def findings_lines(levels: list[dict[str, Any]], top: int = 3) -> list[str]:
    """One line per finding: "sapphirerapids: AMX ldtilecfg in f(): rows and column bytes are all zero"."""
    out = []
    for a in levels:
        if not a["present"]:
            out.append(f"{a['level']}: library missing")
        for u in a["outside"]:
            fns = ", ".join(f"{fn} ({n})" for fn, n in list(u["functions"].items())[:top])
            more = len(u["functions"]) - top
            out.append(f"{a['level']}: {u['feature']} outside the checked set, {u['count']} instructions in "
                       f"{fns}" + (f" and {more} more functions" if more > 0 else ""))
        for t in a["tile_configs"]:
            if not t["ok"]:
                out.append(f"{a['level']}: AMX ldtilecfg in {t['function']} ({t['operand']}): {t['detail']}")
    return out


def cmd_isa(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.commands.core import _stdout_table

    r = audit_engine(args.engine, args.variant, args.artifact)
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
