"""``harness e2e``: the e2e spec files, one process each, crashes reported as crashes."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli import add_json_flag, print_json
from harness.core.errors import EngineCrashError, HarnessError, UsageError

DESCRIPTION = """\
Run e2e spec files, each in its own pytest process. A process that dies by a signal
(SIGILL, SIGSEGV, ...) is reported with the signal, the spec that was running and the
CPU level it had loaded; every other file still runs and its results are kept.

Exit codes: 0 all passed, 1 a spec failed, 16 a spec process crashed.

A spec argument is a file, a folder, or an engine's name (its folder's e2e/ specs);
without one, every engine's e2e/ folder runs.

examples:
  harness e2e --variant cpu                      every engine's specs
  harness e2e ENGINE --variant cpu               one engine's specs (its folder's e2e/)
  harness e2e ENGINE -- -k greedy -x             pytest arguments after --
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("e2e", help="run e2e spec files one process each (a crash cannot take the rest down)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("specs", nargs="*", default=[], metavar="SPEC",
                   help="spec files, directories or engine names (default: every engine's e2e/ folder); "
                        "arguments after -- go to each pytest run")
    p.add_argument("--variant", action="append", default=[], help="binding variant to run on (repeatable)")
    add_json_flag(p)
    p.set_defaults(func=cmd_e2e, extras=("test",), takes_passthrough=True)


def spec_paths(given: list[str]) -> list[Path]:
    """Each argument as a path: an existing file or folder as it is, an engine's name as its folder's
    ``e2e/``; none: every engine's ``e2e/`` folder."""
    from harness.core import progress
    from harness.engine.descriptor import descriptor_path, engine_names
    from harness.engine.trust import untrusted_specs

    if not given:
        found = [p.parent for p in map(descriptor_path, engine_names()) if p is not None]
        runnable = []
        for folder in (f for f in found if (f / "e2e").is_dir()):
            why = untrusted_specs(folder.name, folder)
            if why is None:
                runnable.append(folder / "e2e")
            else:
                progress.info(f"skipping {folder / 'e2e'}: {why}")
        return runnable
    out = []
    for arg in given:
        path = Path(arg)
        descriptor = None if path.exists() or "/" in arg or arg.endswith(".py") else descriptor_path(arg)
        if descriptor is not None and (why := untrusted_specs(arg, descriptor.parent)) is not None:
            raise UsageError(why)
        if descriptor is not None:
            out.append(descriptor.parent / "e2e")
        elif path.exists():
            out.append(path)
        else:
            msg = (f"{arg!r} is neither a spec file or folder nor an engine name "
                   f"(engines: {', '.join(engine_names())}; `harness engines` lists them)")
            raise UsageError(msg)
    return out


def _spec_after_dashes(extra: list[str]) -> str | None:
    """The first argument after ``--`` that names a spec file (``FILE.py`` or ``FILE.py::test``)."""
    for arg in extra:
        head = arg.split("::", 1)[0]
        if not arg.startswith("-") and head.endswith(".py") and Path(head).is_file():
            return arg
    return None


def cmd_e2e(args: argparse.Namespace) -> int:
    from harness.qualify.e2e import run_specs

    specs, extra = spec_paths(args.specs), list(getattr(args, "passthrough", []))
    if (named := _spec_after_dashes(extra)) is not None:
        # pytest would run it beside every spec file of the run, once per file
        msg = (f"{named!r} comes after --, where arguments go to every spec file's pytest run (it would run "
               "once beside each of them): "
               f"give spec files before --: harness e2e {named.split('::', 1)[0]} --variant ... "
               "(one test: -- -k NAME)")
        raise UsageError(msg)
    for v in args.variant:
        extra += ["--variant", v]
    res = run_specs(specs, pytest_args=["-ra", *extra], capture=bool(args.json))
    if args.json:
        print_json(res.as_dict())
    else:
        print(f"\ne2e: {len(res.files)} spec files: {res.summary()}")
        for t in res.failed:
            print(f"  FAILED {t}")
    if res.crashes:
        raise EngineCrashError("spec processes crashed: " + "; ".join(res.crashes))
    if not res.ok:
        msg = f"{len(res.failed)} e2e specs failed: " + "; ".join(res.failed)
        raise HarnessError(msg)
    return 0
