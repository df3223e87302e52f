"""Core subcommands: plugins, host, matrix, engines, fetch, patch."""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from harness.cli import add_engine_arg, add_json_flag, print_json
from harness.core.errors import UsageError

if TYPE_CHECKING:
    from rich.table import Table


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from harness.qualify.ci_matrix import (
        CI_SYSTEMS,  # light: its engine and matrix imports are lazy
    )

    p = sub.add_parser("plugins", help="list plugins and the hooks each implements")
    add_json_flag(p)
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("host", help="probe this host: CPU, SIMD, memory, toolchains, GPUs, ffmpeg")
    p.add_argument("--measure", action="store_true",
                   help="also measure memory bandwidth and GEMM FLOP/s (the roofline; cached per host)")
    p.add_argument("--force", action="store_true", help="with --measure: measure again, ignoring the cache")
    add_json_flag(p)
    p.set_defaults(func=cmd_host)

    p = sub.add_parser("matrix", help="list variant rows and whether each builds on this host",
                       description="Every variant row (matrix/*.yaml): buildable here, or exactly why not. "
                       "With --ci github: the GitHub Actions strategy.matrix that qualifies the rows on CI "
                       "runners instead, one line of JSON ({\"include\": [...]}: name, engine, variant, os, arch, "
                       "runner, session, args) for a job output and fromJSON; see .github/workflows/qualify.yml. "
                       "Rows and os/arch pairs without an entry are named on stderr.")
    p.add_argument("--variant", default=None,
                   help="fnmatch pattern(s), comma-separated (default: all rows; with --ci: the rows marked ci: true)")
    p.add_argument("--ci", choices=CI_SYSTEMS, help="print the matrix for this CI system's runners")
    p.add_argument("--engine", help="with --ci: only this engine (default: every engine that builds the row)")
    add_json_flag(p)
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("engines", help="list engine descriptors, their pins and whether a plugin registers them")
    add_json_flag(p)
    p.set_defaults(func=cmd_engines)

    p = sub.add_parser("fetch", help="download, verify and extract an engine's pinned source (cached)",
                       description="Download, sha256-verify and extract the pinned source once. Every later "
                       "use checks the cached tree against the manifest recorded at extraction (stat, then "
                       "a rehash of files whose stat moved); an edited tree is refused.")
    add_engine_arg(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--verify", action="store_true",
                      help="rehash everything: the cached archive, every file of the pristine tree and of "
                      "the current patched working copy (an edited copy is re-created)")
    mode.add_argument("--repair", action="store_true",
                      help="as --verify, and restore a damaged pristine tree: extract it again from the "
                      "verified archive (downloaded again only when missing or corrupt)")
    add_json_flag(p)
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("patch", help="apply the patch series to a fresh copy of the pinned source",
                       description="Apply engines/<engine>/patches/*.patch in order with git apply. "
                       "With --check, report per patch: applies / already-upstream (retire it) / conflicts.")
    add_engine_arg(p)
    p.add_argument("--check", action="store_true", help="only report what each patch would do")
    add_json_flag(p)
    p.set_defaults(func=cmd_patch)


def cmd_plugins(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.engine.plugin import describe, get_manager
    rows = describe(get_manager())
    if args.json:
        print_json(rows)
        return 0
    t = Table("plugin", "origin", "hooks")
    for r in rows:
        t.add_row(r["name"], r["origin"], ", ".join(h.removeprefix("harness_") for h in r["hooks"]))
    _stdout_table(t)
    return 0


def _stdout_table(t: Table) -> None:
    from rich.console import Console

    Console(soft_wrap=False, width=140).print(t)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def cmd_host(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.build.ccache import remote_status as ccache_remote_status
    from harness.core import host as hostmod
    h = hostmod.probe()
    measured = None
    if args.measure:
        from harness.bench.roofline import measure_host

        measured = measure_host(force=args.force)
    remote = ccache_remote_status()
    if args.json:
        print_json({**hostmod.as_dict(h), "ccache_remote": remote, **({"measure": measured} if measured else {})})
        return 0
    t = Table("what", "found", show_header=False)
    t.add_row("os / arch", f"{h.os} {h.arch}" + (f" (macOS {h.macos_version})" if h.macos_version else ""))
    t.add_row("cpu", f"{h.cpu_model} [{h.microarch}], {h.cores} cores")
    t.add_row("simd", " ".join(f for f in h.simd if f.startswith(("sse", "avx", "fma", "f16c", "neon", "sve", "amx", "bmi"))))
    t.add_row("memory", _gib(h.memory_bytes))
    for name, tool in h.tools.items():
        t.add_row(name, f"{tool.version or '?'} ({tool.path}{', ' + tool.detail if tool.detail else ''})"
                  if tool.found else "[dim]not found[/]")
    t.add_row("ccache remote", _remote_text(remote))
    t.add_row("cuda toolkit", h.cuda_version or "[dim]none[/]")
    t.add_row("gpus", ", ".join(f"{g.api}:{g.name}" + (f" sm_{g.compute_capability}" if g.compute_capability else "")
                                + (f" ({g.device_type})" if g.device_type else "") for g in h.gpus) or "[dim]none[/]")
    t.add_row("vulkan headers", h.vulkan_headers or "[dim]not found[/]")
    t.add_row("ffmpeg aac", {None: "[dim]no ffmpeg[/]", True: "yes", False: "[red]no AAC encoder[/]"}[h.ffmpeg_aac])
    if measured:
        from harness.bench.roofline import measure_rows

        for what, value in measure_rows(measured):
            t.add_row(what, value)
    _stdout_table(t)
    return 0


def _remote_text(remote: dict[str, Any]) -> str:
    from rich.markup import escape
    if not remote["configured"]:
        return "[dim]not configured (CCACHE_REMOTE_STORAGE or remote_storage in ccache.conf)[/]"
    return "; ".join(f"{r['url']}: " + ("[green]reachable[/]" if r["reachable"] else "[red]unreachable[/]")
                     + f" ({escape(r['detail'])})" for r in remote["remotes"]) or escape(remote["setting"])


def cmd_matrix(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.build.matrix import buildability, load_matrix, select
    from harness.core import host as hostmod
    from harness.engine.plugin import get_manager
    if args.ci:
        return _ci_matrix(args)
    if args.engine:
        raise UsageError("--engine selects CI entries: use it with --ci github")
    pm = get_manager()
    h = hostmod.probe()
    rows = select(load_matrix(), args.variant or "*")
    results = [(v, buildability(pm, v, h)) for v in rows]
    if args.json:
        print_json([{**dataclasses.asdict(v), **dataclasses.asdict(b)} for v, b in results])
        return 0
    t = Table("variant", "platform", "status", "why / notes", "ci", "default")
    for v, b in results:
        status = "[green]buildable[/]" if b.buildable else "[yellow]not buildable[/]"
        if b.buildable and not b.runnable:
            status += " (compile-only)"
        t.add_row(v.name, v.platform, status, "; ".join((*b.reasons, *b.notes)), "yes" if v.ci else "",
                  "yes" if v.default else "")
    _stdout_table(t)
    return 0


def _ci_matrix(args: argparse.Namespace) -> int:
    import json
    import sys

    from harness.core import progress
    from harness.qualify.ci_matrix import github_matrix

    m = github_matrix(engine=args.engine, variant=args.variant)
    for note in m.notes:
        progress.console.print(f"[dim]note:[/] {note}", highlight=False, markup=True, soft_wrap=True)
    # one line: what a step appends to $GITHUB_OUTPUT as matrix=<json>
    sys.stdout.write(json.dumps(m.as_strategy(), separators=(",", ":")) + "\n")
    return 0


def cmd_engines(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.engine import registry
    from harness.engine.descriptor import engine_names, load_engine
    from harness.engine.trust import is_trusted
    registered = registry.engines()
    data: list[dict[str, Any]] = []
    for name in engine_names():
        e = load_engine(name)
        impl = registered.get(e.name)
        data.append({"engine": e.name, "pin": e.pin, "source": e.source.kind, "package": e.source.package,
                     "upstream": e.upstream, "pinned_on": e.pinned_on, "registered": impl is not None,
                     "trusted": is_trusted(e), "folder": str(e.root),
                     "default_tests": bool(e.raw.get("tests", {}).get("default", True)),
                     "bench_arms": sorted(impl.bench_arms) if impl is not None else []})
    if args.json:
        print_json(data)
        return 0
    t = Table("engine", "pin", "source", "upstream", "pinned on", "plugin")
    for d in data:
        t.add_row(d["engine"], d["pin"], f"{d['source']} {d['package']}",
                  f"{d['upstream'].get('build', '')} {d['upstream'].get('commit', '')}", d["pinned_on"],
                  "registered" if d["registered"] else "descriptor only" if d["trusted"]
                  else f"descriptor only (untrusted folder: --trust {d['engine']} imports its plugin)")
    _stdout_table(t)
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from harness.build import pipeline
    t0 = time.perf_counter()
    copy = None
    if args.verify or args.repair:
        tree, copy = pipeline.check_cache(args.engine, repair=args.repair)
    else:
        tree = pipeline.fetch(args.engine)
    dt = time.perf_counter() - t0
    checked = "full" if args.verify or args.repair else "stat"
    if args.json:
        print_json({"engine": tree.engine, "pin": tree.pin, "path": str(tree.path), "digest": tree.digest,
                    "fetched": tree.fetched, "checked": checked, "seconds": round(dt, 3),
                    "working_copy": None if copy is None else {"path": str(copy.path), "recreated": copy.applied}})
        return 0
    if tree.fetched:
        verb = "repaired: extracted again" if args.repair else "fetched"
    elif checked == "full":
        verb = "verified: archive and every file rehashed, all intact"
    else:
        verb = "already cached and intact, nothing to do"
    print(f"{tree.engine} {tree.pin}: {verb} ({dt:.2f} s)\n{tree.path}")
    if copy is not None:
        state = "re-created (it had been edited)" if copy.applied else "every file rehashed, intact"
        print(f"patched working copy: {state}\n{copy.path}")
    return 0


def cmd_patch(args: argparse.Namespace) -> int:
    from harness.build import pipeline
    t0 = time.perf_counter()
    if args.check:
        outcomes = pipeline.check_patches(args.engine)
        dt = time.perf_counter() - t0
        if args.json:
            print_json([{"patch": o.patch.name, "status": o.status, "detail": o.detail} for o in outcomes])
        else:
            for o in outcomes:
                print(f"{o.patch.name}: {o.status}" + (f"\n  {o.detail}" if o.detail else ""))
            print(f"{len(outcomes)} patches checked ({dt:.2f} s)")
            _print_copy_state(args.engine)
        return 1 if any(o.status == "conflicts" for o in outcomes) else 0
    tree = pipeline.patched_tree(args.engine)
    dt = time.perf_counter() - t0
    if args.json:
        print_json({"engine": tree.engine, "pin": tree.pin, "path": str(tree.path), "series_hash": tree.series_hash,
                    "patches": [o.patch.name for o in tree.patches], "applied": tree.applied,
                    "seconds": round(dt, 3)})
    else:
        verb = (f"applied {len(tree.patches)} patches" if tree.applied
                else "patched tree up to date, nothing to do")
        print(f"{tree.engine} {tree.pin}: {verb} (series {tree.series_hash[:12]}, {dt:.2f} s)\n{tree.path}")
    return 0


def _print_copy_state(engine: str) -> None:
    """`patch --check` checks the series against the pristine tree; say too whether the working
    copy still is what the series made (an edit there is discarded by the next `harness patch`)."""
    from harness.build import pipeline
    path, problem = pipeline.working_copy_state(engine)
    if problem is None:
        print(f"working copy {path}: intact")
    elif problem:
        print(f"{problem}\n`harness patch {engine}` re-creates it (the edits are discarded; put them in a patch)")
