"""``harness abi snapshot|check|diff``: wire into ``harness.cli.COMMAND_MODULES`` as ``harness.cli.abi``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli import add_engine_arg

if TYPE_CHECKING:
    from harness.core.types import EngineSpec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    abi = sub.add_parser("abi", help="ABI surface of an engine: snapshot, check before build, diff pins",
                         description="Compute an engine's ABI surface from its pinned headers with libclang.")
    asub = abi.add_subparsers(dest="abi_command", metavar="ACTION", required=True)

    p = asub.add_parser("snapshot", help="write engines/<engine>/abi/surface.json from the pinned, patched headers",
                        description="Parse the pinned, patched headers per target and write the surface the "
                        "binding is written against. Review the file's diff before committing it.")
    add_engine_arg(p)
    p.add_argument("--target", action="append", default=[], metavar="TRIPLE",
                   help="target triple (repeatable; default: abi.targets of the engine, else the committed ones)")
    p.add_argument("--used-from", type=Path, metavar="PATH",
                   help="built binding (.so) or its sources; default: abi.used_from, else the committed used set")
    p.add_argument("--all", action="store_true", help="keep the whole surface, not only the used part")
    p.add_argument("--c-only", action="store_true", help="leave the C++ declarations the binding uses (cpp:) as "
                   "committed: no libclang pass over the binding's translation units")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write (default: engines/<engine>/abi/surface.json; - for stdout)")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=cmd_snapshot, extras=('build',))

    p = asub.add_parser("check", help="fail when the pinned headers disagree with the committed surface, or the "
                        "binding does not compile against them",
                        description="Runs before any build; seconds, not minutes. Two halves: the C surface "
                        "(libclang: functions, struct layouts, enums and version constants against the engine's "
                        "committed ABI surface; a difference is accepted with `harness abi snapshot`), "
                        "and the binding's whole compile surface (every translation unit of the engine's binding/ "
                        "compiled with -fsyntax-only, its own include dirs and defines, against the pin's patched "
                        "headers, C and the C++ APIs it calls: an error there means the binding must "
                        "change). With --pin or --rev, the "
                        "recipe of another pin from git history (its descriptor, patches, ABI surface and "
                        "binding source: what `harness build --pin` builds) instead of the working tree's.")
    add_engine_arg(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--pin", metavar="VERSION",
                       help="check this pin's recipe (the newest commit of any branch or tag that pinned it)")
    which.add_argument("--rev", metavar="GITREV", help="check the recipe of this commit/branch/tag (e.g. main)")
    p.add_argument("--c-only", action="store_true",
                   help="only the C surface; skip compiling the binding's translation units syntax-only")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=cmd_check, extras=('build',))

    p = asub.add_parser("diff", help="API/ABI change report between two pins (versions, git revisions or "
                        "directories)",
                        description="A PIN is, tried in this order: a directory holding the engine tree; "
                        "pypi:PACKAGE==VERSION (any package's sdist that vendors the engine, verified against the "
                        "index's sha256); a revision of this repository (HEAD, main, a commit) or a version some "
                        "commit pinned: that recipe's own source, whatever its package; a revision of a git engine's "
                        "repository; a version of the current package. Reports name pins by package, version and "
                        "recipe, never by cache path. A change of the engine's declared ABI version macro comes first. "
                        "Example after a pin move: harness abi diff HEAD~1 HEAD --used --markdown")
    p.add_argument("pin_a", metavar="PIN_A", help="the old pin: a revision of this repository (HEAD, main, a commit: "
                   "its descriptor, whatever its package), a version some commit pinned, pypi:PACKAGE==VERSION, a "
                   "directory, or a git engine's revision")
    p.add_argument("pin_b", metavar="PIN_B", help="the new pin, the same kinds as PIN_A")
    p.add_argument("--engine", default=None,
                   help="engine descriptor to take headers from (default: the only engine both pins fit, "
                   "else the default engine if they fit it; required otherwise)")
    p.add_argument("--target", action="append", default=[], metavar="TRIPLE", help="target triple (repeatable)")
    p.add_argument("--used", action="store_true", help="only what the binding uses: the committed used set of the C "
                   "surface, and the C++ declarations the binding uses (surface.json's cpp: functions with their "
                   "signatures, classes with the members it touches), first")
    p.add_argument("--markdown", action="store_true", help="a Markdown report for a pull request")
    p.add_argument("--json", action="store_true", help="print the differences as JSON")
    p.set_defaults(func=cmd_diff, extras=('build',))


def _load(engine: str) -> EngineSpec:
    from harness.engine.descriptor import load_engine

    return load_engine(engine)


def _used_set(args: argparse.Namespace, spec: EngineSpec, committed: Mapping[str, Any] | None) -> set[str] | None:
    """--used-from, else the descriptor's abi.used_from, else the committed used set; None = everything."""
    from harness.abi.used import recipe_identifiers, used_from
    from harness.core import progress
    if args.all:
        return None
    pattern = spec.abi.get("used_pattern")
    if args.used_from is not None:
        return used_from(args.used_from, pattern)
    configured = spec.abi.get("used_from")
    if configured:
        # Relative to the project root the descriptor lives in (engines/<name>/ is two levels down).
        path = spec.root.parent.parent / str(configured)
        if os.path.lexists(path):
            return recipe_identifiers(spec.root.parent.parent, str(configured), pattern)
        progress.info(f"abi.used_from {configured} does not exist yet; keeping the committed used set")
    if committed is not None and committed.get("used") is not None:
        return set(committed["used"])
    return None


def _engine_for(pins: list[str]) -> str:
    """``--engine`` not given: the engine both pins fit (see :func:`choose_engine`)."""
    from harness.abi.revisions import choose_engine, default_engine
    from harness.core import progress
    from harness.core.errors import ConfigError
    from harness.engine.descriptor import engine_names, load_engine

    specs = []
    for n in engine_names():
        try:
            specs.append(load_engine(n))
        except ConfigError as e:  # one broken descriptor must not block a report on another engine
            progress.info(f"skipping engine {n}: {str(e).splitlines()[0]}")
    name = choose_engine(pins, specs, default_engine)
    progress.info(f"engine: {name} (--engine not given)")
    return name


def cmd_snapshot(args: argparse.Namespace) -> int:
    from harness.abi import surface as surf
    from harness.abi.check import snapshot_config, version_macro
    from harness.abi.diff import diff_surfaces
    from harness.build.pipeline import patched_tree
    from harness.core import progress

    t0 = time.perf_counter()
    spec = _load(args.engine)
    out = Path(args.output) if args.output and args.output != "-" else spec.surface_path
    committed = surf.load(out) if out.is_file() else None
    targets = args.target or (list(committed["targets"]) if committed and not spec.abi.get("targets") else None)
    tree = patched_tree(spec).path
    surface = snapshot_config(tree, spec.abi, targets=targets, meta={"engine": spec.name}, recipe=spec)
    used = _used_set(args, spec, committed)
    if used is not None:
        surface = surf.filter_surface(surface, used)
    changes = diff_surfaces(committed, surface, version_macro=version_macro(spec.abi)) if committed else []
    if not args.c_only:
        from harness.abi.cpp import diff_records, record

        # the C++ declarations the binding uses (outside the fingerprint: the binding's compile check gates them)
        cpp = record(spec, tree)
        if cpp is not None:
            surface["cpp"] = cpp
            changes += [f"binding C++: {line}" for line in diff_records((committed or {}).get("cpp") or {}, cpp)]
        elif committed is not None and committed.get("cpp"):
            surface["cpp"] = committed["cpp"]
    seconds = time.perf_counter() - t0
    if args.output == "-":
        sys.stdout.write(surf.dumps(surface))
    elif committed is not None and surf.dumps(committed) == surf.dumps(surface):
        progress.info(f"{out}: unchanged (fingerprint {surface['fingerprint'][:16]})")
    else:
        surf.write(surface, out)
        progress.info(f"wrote {out} ({len(changes)} differences from the previous file)" if committed
                      else f"wrote {out}")
        for line in changes:
            progress.info(f"  {line}")
    if args.json:
        from harness.cli import print_json

        print_json({
            "engine": spec.name, "pin": spec.pin, "path": str(out), "fingerprint": surface["fingerprint"],
            "fingerprints": surface["fingerprints"], "changes": changes, "seconds": round(seconds, 3),
            "counts": {c: len(surface[c]) for c in surf.CATEGORIES},
        })
    elif args.output != "-":
        counts = ", ".join(f"{len(surface[c])} {c}" for c in surf.CATEGORIES)
        progress.info(f"{spec.name} {spec.pin}: {counts} on {', '.join(surface['targets'])} in {seconds:.2f} s")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from harness.abi.binding import check_binding, raise_for
    from harness.abi.check import check_engine
    from harness.build.pipeline import patched_tree
    from harness.core import progress
    from harness.core.errors import AbiError, BindingSurfaceError

    pin, rev = args.pin, args.rev
    if pin or rev:
        from harness.build import recipes

        spec = recipes.resolve(args.engine, pin=pin, rev=rev)
    else:
        spec = _load(args.engine)
    tree = patched_tree(spec).path
    # Both halves always run: a pin move that changes the C surface and breaks the binding's C++ is told
    # both at once (accept the one with `abi snapshot`, change the binding for the other).
    c_error: AbiError | None = None
    try:
        result = check_engine(spec, tree)
    except AbiError as e:
        c_error, result = e, None
    binding = None if args.c_only else check_binding(spec, tree)
    if args.json:
        from dataclasses import asdict

        from harness.cli import print_json

        # the C surface's fields at the top level (as before the binding half existed), the binding's below
        doc: dict[str, Any] = {**(asdict(result) if result else {"engine": spec.name}),
                               "ok": c_error is None and (binding is None or binding.ok),
                               "c_surface_ok": c_error is None, "c_surface_error": str(c_error) if c_error else None,
                               "seconds": round(result.seconds, 3) if result else None, "pin": spec.pin,
                               "recipe_commit": spec.recipe_commit or None,
                               "binding": binding.as_json() if binding else None}
        print_json(doc)
        return 0 if doc["ok"] else AbiError.exit_code
    if result is not None:
        recipe = f" (recipe from commit {spec.recipe_commit[:12]})" if spec.recipe_commit else ""
        progress.info(
            f"ABI check passed: {spec.name} {spec.pin}{recipe} matches {_shown(spec.surface_path)} "
            f"({result.functions} functions, {result.structs} structs on {', '.join(result.targets)}; "
            f"fingerprint {result.fingerprint[:16]}) in {result.seconds:.2f} s"
        )
    if binding is not None and binding.ok:
        stamped = " (stamped: nothing changed since the last check)" if binding.cached else ""
        progress.info(f"binding compile surface passed: {len(binding.units)} translation units of "
                      f"engines/{spec.name}/binding compile syntax-only against {spec.pin}'s patched headers "
                      f"in {binding.seconds:.2f} s{stamped}")
    if c_error is not None and binding is not None and not binding.ok:
        try:
            raise_for(binding)
        except BindingSurfaceError as b:
            raise AbiError(f"{c_error}\n\n{b}") from None
    if c_error is not None:
        raise c_error
    if binding is not None:
        raise_for(binding)
    return 0


def _shown(path: Path) -> str:
    from harness.core import paths
    root = paths.project_root()
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def cmd_diff(args: argparse.Namespace) -> int:
    from harness.abi import surface as surf
    from harness.abi.check import load_committed, version_macro
    from harness.abi.diff import diff, render_markdown, render_versions_down, versions_down
    from harness.abi.revisions import snapshot_pin
    from harness.core import progress
    t0 = time.perf_counter()
    spec = _load(args.engine or _engine_for([args.pin_a, args.pin_b]))
    targets = args.target or None
    a = snapshot_pin(args.pin_a, spec, targets)
    b = snapshot_pin(args.pin_b, spec, targets)
    if args.used:
        used = set(load_committed(spec.name, spec.surface_path).get("used") or [])
        a, b = surf.filter_surface(a, used), surf.filter_surface(b, used)
    changes = diff(a, b, version_macro=version_macro(spec.abi))
    # what reports print of a pin: the package and version or the recipe it is, never a cache path
    label_a = str((a.get("meta") or {}).get("pin") or args.pin_a)
    label_b = str((b.get("meta") or {}).get("pin") or args.pin_b)
    cpp_lines: list[str] = []
    if args.used:
        from harness.abi.cpp import diff_pins

        cpp_lines = diff_pins(spec, args.pin_a, args.pin_b)
    seconds = time.perf_counter() - t0
    if args.json:
        from harness.cli import print_json

        print_json({"old": args.pin_a, "new": args.pin_b, "old_label": label_a, "new_label": label_b,
                    "seconds": round(seconds, 3), "binding_cpp": cpp_lines,
                    "fingerprints": {"old": a["fingerprint"], "new": b["fingerprint"]},
                    "versions_down": [str(c) for c in versions_down(changes)],
                    "changes": [{"group": c.group, "kind": c.kind, "line": str(c)} for c in changes]})
    elif args.markdown:
        from harness.abi.revisions import dir_label

        shown = [dir_label(Path(x)) if Path(x).expanduser().is_dir() else x for x in (args.pin_a, args.pin_b)]
        flag = " --used" if args.used else ""
        footer = (f"_{len(changes)} differences on {', '.join(b['targets'])}; generated by "
                  f"`harness abi diff {shown[0]} {shown[1]} --engine {spec.name}{flag}` in {seconds:.1f} s._")
        md = render_markdown(changes, old=f"{spec.name} {label_a}", new=f"{spec.name} {label_b}", footer=footer)
        if args.used:
            from harness.abi.cpp import render_markdown as cpp_markdown

            # a version going down before everything, the C++ the binding uses next
            md = render_versions_down(changes) + cpp_markdown(cpp_lines) + "\n" + md
        sys.stdout.write(md)
    else:
        down = versions_down(changes)
        for c in down:
            print(c)
        for line in cpp_lines:
            print(f"binding C++: {line}")
        for c in changes[len(down):]:
            print(c)
        progress.info(f"{len(changes)} differences{f' (+{len(cpp_lines)} in the C++ the binding uses)' if args.used else ''}"
                      f" in {seconds:.1f} s")
    return 0
