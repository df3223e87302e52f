"""Build subcommands: build, artifacts, package."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from harness.cli import add_engine_arg, add_json_flag, print_json
from harness.core.errors import UsageError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("build", help="build an engine variant into a relocatable artifact",
                       description="Fetch, patch and build ENGINE for matrix rows. Idempotent: with nothing "
                       "changed it does no work and says so.")
    add_engine_arg(p)
    p.add_argument("--variant", default="cpu",
                   help="matrix row(s), fnmatch, comma-separated (default: cpu); a row the engine does not build "
                   "(its descriptor's variants: list or intent map) is refused when named, skipped when matched "
                   "by a wildcard")
    p.add_argument("--define", action="append", default=[], metavar="K=V", help="extra CMake cache entry (repeatable)")
    p.add_argument("--force", action="store_true", help="rebuild even when the stamp matches")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--pin", metavar="VERSION",
                   help="build another pin: its recipe (descriptor, patches, ABI surface) comes from the newest "
                   "commit of any branch or tag that pinned it; the artifact lands in <dist>/ENGINE-PIN-VARIANT@COMMIT")
    g.add_argument("--rev", metavar="GITREV", help="build the recipe of this commit/branch/tag (e.g. main)")
    add_json_flag(p)
    p.set_defaults(func=cmd_build, extras=('build',))

    p = sub.add_parser("artifacts", help="list built artifacts and verify their file hashes")
    add_json_flag(p)
    p.set_defaults(func=cmd_artifacts)

    p = sub.add_parser("package", help="combine variant artifacts into one directory with several ggml backends")
    add_engine_arg(p)
    p.add_argument("--variants", required=True, help="comma-separated variants, e.g. cpu,vulkan")
    p.add_argument("-o", "--output", type=Path, help="output dir (default: <dist>/<engine>-<pin>-package)")
    add_json_flag(p)
    p.set_defaults(func=cmd_package, extras=('build',))


def parse_defines(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            msg = f"--define takes KEY=VALUE, got {item!r}"
            raise UsageError(msg)
        k, v = item.split("=", 1)
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k.strip()):
            msg = f"--define {k.strip()[:80]!r}: a CMake variable name is letters, digits and '_' (not starting with a digit)"
            raise UsageError(msg)
        out[k.strip()] = v
    return out


def cmd_build(args: argparse.Namespace) -> int:
    from harness.build import pipeline, recipes
    from harness.build.cmake import ccache_summary, smoke_cpu_level
    from harness.core import progress

    engine = recipes.resolve(args.engine, pin=args.pin, rev=args.rev)
    if engine.recipe_commit and not args.json:
        print(f"recipe: {engine.name} {engine.pin} from commit {engine.recipe_commit[:12]}")
    variants, skipped = pipeline.rows_for(engine, args.variant, strict=True)
    for v, reason in skipped:
        progress.info(f"skipping {v.name}: {reason}")
    inputs = pipeline.prepare_build(engine)
    if not args.json:
        print(f"ABI check passed ({inputs.abi.fingerprint[:16]}, {inputs.abi.seconds:.2f} s)")
    results = []
    for v in variants:
        r = pipeline.build_row(inputs, v, overrides=parse_defines(args.define), force=args.force)
        cpu = smoke_cpu_level(engine, v, r.artifact)
        results.append({"variant": v.name, "artifact": str(r.artifact), "built": r.built,
                        "seconds": round(r.seconds, 2), "selected_cpu_variant": cpu,
                        "ccache": r.manifest.get("ccache")})
        if not args.json:
            verb = "built" if r.built else "up to date, nothing to do"
            cache = ccache_summary(r.manifest) if r.built else ""
            print(f"{engine.name} {engine.pin} {v.name}: {verb} ({r.seconds:.1f} s{', ' + cache if cache else ''})"
                  + (f"; host selects CPU level {cpu}" if cpu else "") + f"\n{r.artifact}")
    if args.json:
        print_json(results)
    return 0


def cmd_artifacts(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.build.artifacts import find_artifacts, status
    from harness.cli.inspect import _stdout_table
    from harness.core import host as hostmod
    from harness.core import paths
    host = hostmod.probe()
    rows = [status(p, host) for p in find_artifacts()]
    if args.json:
        print_json([{"path": str(s.path), "engine": s.manifest.get("engine"), "pin": s.manifest.get("pin"),
                     "variant": s.manifest.get("variant"), "ok": s.ok, "usable": s.usable,
                     "problems": list(s.problems), "notes": list(s.notes),
                     "abi_fingerprint": s.manifest.get("abi_fingerprint")} for s in rows])
    else:
        t = Table("artifact", "pin", "variant", "hashes", "usable here", "notes")
        for s in rows:
            t.add_row(s.path.name, str(s.manifest.get("pin")), str(s.manifest.get("variant")),
                      "[green]ok[/]" if s.ok else f"[red]{len(s.problems)} problems[/]: " + "; ".join(s.problems[:3]),
                      "yes" if s.usable else "no", "; ".join(s.notes))
        _stdout_table(t)
        if not rows:
            print(f"no artifacts under {paths.artifacts_dir()} (harness build ENGINE --variant cpu)")
    return 1 if any(not s.ok for s in rows) else 0


def cmd_package(args: argparse.Namespace) -> int:
    from harness.build.artifacts import package
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant, load_matrix
    from harness.core import paths
    from harness.engine.descriptor import load_engine
    engine = load_engine(args.engine)
    rows = load_matrix()
    names = [v for v in args.variants.split(",") if v]
    dirs = []
    for n in names:
        d = artifact_dir(engine, get_variant(n, rows))
        if not d.is_dir():
            msg = f"no artifact for variant {n} at {d}: run harness build {engine.name} --variant {n}"
            raise UsageError(msg)
        dirs.append(d)
    out = args.output or paths.artifacts_dir() / f"{engine.name}-{engine.pin}-package"
    manifest = package(dirs, out)
    if args.json:
        print_json({"path": str(out), "variants": manifest["variants"]})
    else:
        print(f"packaged {', '.join(manifest['variants'])} into {out}")
    return 0
