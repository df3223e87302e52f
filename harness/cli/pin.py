"""``harness pin ENGINE SOURCE``: wire into ``harness.cli.COMMAND_MODULES`` as ``harness.cli.pin``."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.cli import add_engine_arg

if TYPE_CHECKING:
    from harness.core.types import EngineSpec

DESCRIPTION = """\
Move an engine's pin: resolve SOURCE, derive the upstream build and commit from what the source carries,
rewrite the engine's engine.yaml (comments, order and quoting kept; pinned_on bumped), then check the move
before any build, stopping at the first failure with what to do. The first line says which way the move
goes by upstream build: BACKWARDS (a rollback to an older build), sideways (the same build: another source,
fork or patch series), forward, or direction unknown (and why):

  fetch          download and verify the new source (its sha256 from the index, the file or the commit)
  patch --check  every patch of the series: applies / already upstream (retire it) / conflicts (the hunk)
  abi check      the C surface against the engine's committed ABI surface (differences: review with
                 `harness abi diff --used`, accept with `harness abi snapshot`), and the binding's
                 translation units compiled syntax-only against the new headers (errors: the binding
                 must change)

SOURCE is one of:
  pypi:PACKAGE==VERSION[#SUBDIR]            an sdist on the configured index (any package that vendors the
                                            engine: the engine tree is found by its ABI headers)
  git:URL@REV[#SUBDIR]                      a tag, branch or commit (the full commit is written; the build
                                            only when the commit is upstream's build tag, per the
                                            descriptor's provenance.build_tags: a fork's, a branch's or an
                                            untagged commit needs --upstream-build); a mirror without its
                                            large blobs (a partial clone) takes --filter blob:none and
                                            --sparse PATH
  archive:PATH#sha256=HEX[&subdir=SUBDIR][&url=URL]
                                            a local archive (local-archive kind): the commit from the
                                            archive (git archive records it) or --upstream-commit; the
                                            upstream repository from url= or the old source

The engine tree (the top or SUBDIR) must hold the engine's ABI headers and a CMakeLists.txt, and the new
descriptor must load as the engine's, before anything is written (--dry-run checks the same). A local
mirror or archive is written relative to the project, or as $HARNESS_MIRRORS/PATH when it lies under
the folder HARNESS_MIRRORS names; any other absolute path is refused.

examples:
  harness pin ENGINE pypi:PACKAGE==VERSION --dry-run        the descriptor diff and the derived provenance
  harness pin ENGINE pypi:PACKAGE==VERSION --upstream-build N --upstream-commit SHA
  harness pin ENGINE git:https://github.com/OWNER/REPO@TAG
  harness pin ENGINE pypi:PACKAGE==VERSION --qualify        then qualify against the previous descriptor
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("pin", help="move an engine's pin to SOURCE, derive its provenance, check it before any build",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_arg(p)
    p.add_argument("source", metavar="SOURCE", help="pypi:PACKAGE==VERSION[#SUBDIR], git:URL@REV[#SUBDIR] or "
                   "archive:PATH#sha256=HEX")
    p.add_argument("--upstream-build", type=int, metavar="N",
                   help="the upstream build the source holds, when it does not say (refused if it says otherwise)")
    p.add_argument("--upstream-commit", metavar="SHA",
                   help="the upstream commit the source holds, when it does not say (else written 'unknown')")
    p.add_argument("--filter", dest="git_filter", metavar="FILTER",
                   help="git: a partial clone (blob:none): only the blobs the checkout needs are fetched, "
                   "for a mirror without its large blobs; written as source.filter")
    p.add_argument("--sparse", action="append", default=[], metavar="PATH",
                   help="git: check out only PATH (a file or directory from the repository root; repeat it); "
                   "written as source.sparse; must keep the engine's files")
    p.add_argument("--dry-run", action="store_true", help="print the descriptor diff and the provenance; write nothing")
    p.add_argument("--no-check", action="store_true", help="write the descriptor only; skip fetch, patch and ABI checks")
    p.add_argument("--qualify", action="store_true",
                   help="after the checks, run `harness qualify ENGINE --old-rev HEAD` (the previous descriptor, "
                   "committed): the report whose first screen is the pull request's body")
    p.add_argument("--json", action="store_true", help="print what was done as JSON on stdout")
    p.set_defaults(func=cmd_pin, extras=("build",))


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"step": self.name, "ok": self.ok, "seconds": round(self.seconds, 3), "detail": self.detail}


def _fmt_upstream(up: dict[str, Any]) -> str:
    return f"build {up.get('build', '?')}, commit {up.get('commit', '?')}"


def cmd_pin(args: argparse.Namespace) -> int:
    from harness.core import progress
    from harness.core.errors import HarnessError, UsageError
    from harness.engine.descriptor import load_engine
    from harness.pin import describe, plan, write
    from harness.pin.sources import resolve
    from harness.source.gitbuild import tag_rule

    t0 = time.perf_counter()
    old = load_engine(args.engine)
    if old.recipe_commit:
        msg = f"{args.engine}: a recipe from git history cannot be re-pinned; check out the branch and pin there"
        raise UsageError(msg)
    if args.qualify and _descriptor_dirty(old):
        msg = (f"--qualify compares with the committed descriptor (--old-rev HEAD), but engines/{old.name}/engine.yaml "
               "has uncommitted edits: commit or revert them first, or qualify by hand with --old-rev REV")
        raise UsageError(msg)
    with progress.spinner(f"pin {old.name}: resolve {_shown(args.source)}"):
        # the engine tree inside another package's sdist: the directory with the ABI headers, the constant
        # headers and a CMakeLists.txt (a package may also carry a loose copy of a few headers)
        markers = [*(str(h) for h in old.abi.get("headers", [])), *(str(h) for h in old.abi.get("constant_headers", [])),
                   "CMakeLists.txt"]
        # what any pin of the engine holds (constant headers come and go between pins)
        required = [*(str(h) for h in old.abi.get("headers", [])), "CMakeLists.txt"]
        resolved = resolve(args.source, old=old.raw["source"], headers=markers, commit=args.upstream_commit,
                           project=old.root.parent.parent, required=required, git_filter=args.git_filter,
                           sparse=args.sparse, rule=tag_rule(old.raw.get("provenance") or {}))
    p = plan(old.root, resolved, build=args.upstream_build, commit=args.upstream_commit)
    # which way the move goes, first: a rollback is named as one (BACKWARDS, build 11549 -> 11063 ...)
    headline = f"pin {old.name}: {p.direction.text}"
    summary = (f"{old.name}: {describe(p.old)} ({_fmt_upstream(old.upstream)}) -> {describe(p.new)} "
               f"({_fmt_upstream(p.upstream)})")
    doc: dict[str, Any] = {"engine": old.name, "old": {"source": p.old, "upstream": old.upstream},
                           "new": {"source": p.new, "upstream": p.upstream}, "provenance": list(p.provenance),
                           "changed": p.changed, "diff": p.diff(), "written": False, "steps": [],
                           "direction": p.direction.direction, "move": p.direction.as_json(),
                           "git": p.git.as_json() if p.git else None}
    if not args.json:
        sys.stdout.write(headline + "\n")
        sys.stdout.flush()
        progress.info(summary)
        for line in p.provenance:
            progress.info(f"  provenance: {line}")
        if args.dry_run:
            sys.stdout.write(p.diff() or f"engines/{old.name}/engine.yaml: unchanged\n")
    if args.dry_run:
        if args.json:
            from harness.cli import print_json

            print_json(doc)
        return 0
    if p.changed:
        write(p)
        doc["written"] = True
        if not args.json:
            progress.info(f"wrote engines/{old.name}/engine.yaml (review: git diff engines/{old.name}/engine.yaml)")
    elif not args.json:
        progress.info(f"engines/{old.name}/engine.yaml already pins {describe(p.new)}; nothing to write")
    failure: HarnessError | None = None
    if not args.no_check:
        new = load_engine(old.name)
        try:
            for step in _checks(new):
                doc["steps"].append(step.as_json())
                if not args.json:
                    progress.info(f"  {step.name}: {'ok' if step.ok else 'FAILED'} ({step.seconds:.1f} s) {step.detail}")
        except HarnessError as e:
            failure = e
            doc["steps"].append({"step": getattr(e, "pin_step", "check"), "ok": False, "detail": str(e)})
    doc["seconds"] = round(time.perf_counter() - t0, 2)
    if args.json:
        from harness.cli import print_json

        print_json(doc)
    if failure is not None:
        raise failure
    if args.qualify:
        argv = [sys.executable, "-P", "-m", "harness", "qualify", old.name, "--old-rev", "HEAD"]
        progress.info(f"qualify against the previous descriptor: harness qualify {old.name} --old-rev HEAD")
        return subprocess.run(argv, check=False).returncode
    if not args.json:
        progress.info(f"next: harness build {old.name} --variant cpu, then harness qualify {old.name} --old-rev HEAD "
                      "(or run harness pin again with --qualify)")
    return 0


def _shown(source: str) -> str:
    """SOURCE as progress shows it: a local mirror or archive by its last part, never this machine's path."""
    kind, _, rest = source.partition(":")
    local = kind == "archive" or rest.startswith(("/", "~", ".", "$", "file:"))
    return f"{kind}:.../{rest.rstrip('/').rsplit('/', 1)[-1]}" if local and "/" in rest else source


def _descriptor_dirty(spec: EngineSpec) -> bool:
    r = subprocess.run(["git", "status", "--porcelain", "--", str(spec.root / "engine.yaml")], cwd=spec.root,
                       capture_output=True, text=True, check=False)
    return r.returncode != 0 or bool(r.stdout.strip())


def _checks(spec: EngineSpec) -> Any:
    """Yield each check's :class:`Step`; raise the first failure's typed error (its ``pin_step`` set)."""
    from harness.abi.binding import check_binding, raise_for
    from harness.abi.check import check_engine
    from harness.build import pipeline
    from harness.core.errors import AbiError, HarnessError, PatchError
    from harness.pin import digest_label

    def failed(e: HarnessError, step: str) -> HarnessError:
        e.pin_step = step  # type: ignore[attr-defined]
        return e

    t = time.perf_counter()
    try:
        tree = pipeline.fetch(spec)
    except HarnessError as e:
        raise failed(e, "fetch") from None
    yield Step("fetch", True, time.perf_counter() - t, f"{spec.pin} ({digest_label(spec.raw['source'], tree.digest)})")
    t = time.perf_counter()
    outcomes = pipeline.check_patches(spec)
    bad = [o for o in outcomes if o.status != "applies"]
    if bad:
        lines = [f"{o.patch.name}: {o.status}: {o.detail}" for o in bad]
        msg = "\n".join([f"the patch series of {spec.name} does not apply to {spec.pin} as it stands:", *lines,
                         f"Retire a patch that is already upstream (delete it from engines/{spec.name}/patches/), "
                         "rebase one that conflicts on the new tree, then run `harness pin` again (or "
                         f"`harness patch --check {spec.name}`)."])
        raise failed(PatchError(msg), "patch --check")
    yield Step("patch --check", True, time.perf_counter() - t, f"{len(outcomes)} patch(es) apply")
    t = time.perf_counter()
    patched = pipeline.patched_tree(spec).path
    c_error: AbiError | None = None
    try:
        r = check_engine(spec, patched)
        detail = f"C surface matches ({r.functions} functions, {r.structs} structs)"
    except AbiError as e:
        c_error, detail = e, ""
    binding = check_binding(spec, patched)
    if c_error is not None:
        extra = ""
        if binding is not None and not binding.ok:
            try:
                raise_for(binding)
            except AbiError as b:
                extra = f"\n\n{b}"
        msg = (f"{c_error}{extra}\n\nSee what the binding uses first: `harness abi diff --used --engine {spec.name} "
               f"HEAD {spec.pin}`.")
        raise failed(AbiError(msg), "abi check")
    if binding is not None:
        try:
            raise_for(binding)
        except AbiError as e:
            raise failed(e, "abi check") from None
        detail += f"; binding: {len(binding.units)} units compile syntax-only ({binding.seconds:.1f} s)"
    yield Step("abi check", True, time.perf_counter() - t, detail)
