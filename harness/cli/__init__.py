"""The ``harness`` command line: one entry point, subcommands registered by area.

Every command lives in this package, one module per area (``harness/cli/<area>.py``), and does
no work of its own: it parses, calls the package that does the work, and prints. Each area module exposes ``register(subparsers)``; its parsers set
``func=handler`` where ``handler(args) -> int``, and ``extras=(...)`` when the command needs
optional dependency groups (checked before the handler runs: a typed error naming the extra,
never a traceback). Errors derived from :class:`harness.core.errors.HarnessError` map to their
class's exit code.

Start-up imports only what builds the parser: an area module's top level is argparse and the
standard library; everything else is imported inside its handlers (``tests/unit/test_cli_startup.py``
checks that ``--help`` of every command loads no numpy, scipy, rich, yaml, jsonschema, ...).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from harness import __version__
from harness.core.errors import HarnessError, did_you_mean

#: Modules that contribute subcommands, in the order they appear in --help.
COMMAND_MODULES: tuple[str, ...] = (
    "harness.cli.inspect",
    "harness.cli.build",
    "harness.cli.runtime",
    "harness.cli.qualify",
    "harness.cli.e2e",
    "harness.cli.emulate",
    "harness.cli.models",
    "harness.cli.abi",
    "harness.cli.pin",
    "harness.cli.audit",
    "harness.cli.config",
    "harness.cli.video",
    "harness.cli.bench",
    "harness.cli.agree",
    "harness.cli.bisect",
    "harness.cli.serve",
    "harness.cli.completion",
)

EPILOG = """\
typical release-engineer flow:
  harness host                      what this machine has
  harness matrix                    which variants build here, and why not
  harness engines                   the engines and their pins
  harness fetch ENGINE              download + verify the pinned source
  harness patch ENGINE              apply the patch series to a fresh copy
  harness patch --check ENGINE      which patches apply / are upstream / conflict
  harness pin ENGINE SOURCE         move a pin (pypi:PKG==V, git:URL@REV, archive:PATH#sha256=H): derive
                                    its provenance, rewrite engine.yaml, fetch + patch --check + abi check
"""


class HarnessParser(argparse.ArgumentParser):
    """argparse with a "did you mean" for a misspelled subcommand or choice (as git and pip answer).

    Subparsers are made of the parser's own class, so every level of ``harness`` gets it.
    """

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            known = [str(c) for c in action.choices]
            hint = did_you_mean(str(value), known)
            msg = f"invalid choice: {value!r}{hint} (choose from {', '.join(known)})"
            raise argparse.ArgumentError(action, msg)


class WrappedRawFormatter(argparse.RawDescriptionHelpFormatter):
    """A description's and epilog's own lines kept (examples, tables), but none wider than the terminal.

    argparse's raw formatter prints a 390-character paragraph as one line; this one wraps any line
    that does not fit, its continuation indented as the line was.
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        out: list[str] = []
        for line in text.splitlines():
            body = line.lstrip()
            lead = indent + line[:len(line) - len(body)]
            if not body or len(lead) + len(body) <= width:
                out.append(lead + body if body else "")
                continue
            out += textwrap.wrap(body, max(width, len(lead) + 20), initial_indent=lead, subsequent_indent=lead,
                                 break_on_hyphens=False, break_long_words=False)
        return "\n".join(out)


#: Options every command takes, before or after its name (``harness -q matrix``, ``harness matrix -q``).
GLOBAL_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("-q", "--quiet"), {"action": "store_true", "help": "no progress or info messages"}),
    (("--trust",), {"action": "append", "default": [], "metavar": "NAME",
                    "help": "trust engine NAME's recipe (an $HARNESS_ENGINES_PATH folder, or --pin/--rev from git "
                            "history): import its plugin, build it without the sandbox's refusals (README: Trust "
                            "model; repeatable; also HARNESS_TRUST)"}),
    (("--no-sandbox",), {"action": "store_true",
                         "help": "run builds on the host, not in the bubblewrap sandbox (an untrusted recipe is "
                                 "otherwise refused where there is no sandbox; also HARNESS_NO_SANDBOX=1)"}),
)


def build_parser() -> argparse.ArgumentParser:
    parser = HarnessParser(
        prog="harness",
        description="Build, check and benchmark native inference engines.",
        epilog=EPILOG,
        formatter_class=WrappedRawFormatter,
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    for flags, kwargs in GLOBAL_OPTIONS:
        parser.add_argument(*flags, **kwargs)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMAND_MODULES:
        importlib.import_module(mod).register(sub)
    for path, p in iter_parsers(parser):
        if p.formatter_class is argparse.RawDescriptionHelpFormatter:
            p.formatter_class = WrappedRawFormatter
        if path:
            # SUPPRESS: a subcommand sets the option only when it is given there, never resets it
            for flags, kwargs in GLOBAL_OPTIONS:
                p.add_argument(*flags, **{**kwargs, "default": argparse.SUPPRESS})
    return parser


def iter_parsers(parser: argparse.ArgumentParser,
                 path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``(("report", "compare"), parser)`` for ``parser`` (path ``()``) and every subcommand below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias names the same parser again: its first name only
                    seen.add(id(sub))
                    yield from iter_parsers(sub, (*path, name))


def add_engine_arg(p: argparse.ArgumentParser) -> None:
    """The ENGINE positional every per-engine command takes."""
    p.add_argument("engine", metavar="ENGINE", help="engine name (`harness engines` lists them)")


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


def json_safe(data: Any) -> Any:
    """``data`` with NaN and infinities as strings: what ``--json`` prints is always valid JSON."""
    if isinstance(data, float) and not math.isfinite(data):
        return str(data)
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [json_safe(v) for v in data]
    return data


def print_json(data: Any) -> None:
    json.dump(json_safe(data), sys.stdout, indent=2, sort_keys=False, default=str, allow_nan=False)
    sys.stdout.write("\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a reader that closes stdout early (``| head -1``) ends it quietly, exit 0.

    As ``ls`` and ``git`` do: the reader has what it wanted. The flush happens here, not at
    interpreter exit, so the error is caught once for every command (the recipe of the Python
    docs' note on SIGPIPE); stdout then points at /dev/null so the exit-time flush finds nothing.
    """
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        return 0


def _stdout_to_devnull() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a test's capture: nothing to flush at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    raw = list(argv) if argv is not None else sys.argv[1:]
    # What follows "--" belongs to a tool the command runs (harness e2e -- -k greedy).
    cut = raw.index("--") if "--" in raw else len(raw)
    args = parser.parse_args(raw[:cut])
    args.argv = raw
    args.passthrough = raw[cut + 1:]
    if args.passthrough and not getattr(args, "takes_passthrough", False):
        parser.error(f"arguments after -- ({' '.join(args.passthrough)}) are only taken by harness e2e")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from harness.core import extras, progress

    progress.set_quiet(bool(args.quiet or getattr(args, "json", False)))
    _grant_trust(args)
    command = _command_name(args)
    try:
        extras.require(command, *getattr(args, "extras", ()))
        return int(args.func(args) or 0)
    except ModuleNotFoundError as e:
        # an optional dependency a code path needs that its command did not declare: still a typed
        # error naming the extra, never a traceback; a missing module no extra provides is a bug
        extra = extras.extra_for_module(e.name or "")
        if extra is None:
            raise
        return _report(extras.missing_error(command, extra, [e.name or "?"]))
    except HarnessError as e:
        return _report(e)
    except KeyboardInterrupt:
        progress.console.print("interrupted", style="red")
        return 130


def _grant_trust(args: argparse.Namespace) -> None:
    """``--trust``/``--no-sandbox`` hold for this process and every harness process it starts."""
    if getattr(args, "trust", None):
        from harness.engine import trust

        trust.grant(args.trust)
    if getattr(args, "no_sandbox", False):
        os.environ["HARNESS_NO_SANDBOX"] = "1"


def _command_name(args: argparse.Namespace) -> str:
    """``harness report compare``: the subcommand path argparse chose (its dest names)."""
    words = [getattr(args, "command", None) or ""]
    for key in sorted(vars(args)):
        if key.endswith("_command") and isinstance(getattr(args, key), str):
            words.append(getattr(args, key))
    return "harness " + " ".join(w for w in words if w)


def _report(e: HarnessError) -> int:
    from harness.core import progress

    progress.console.print(f"[bold red]error:[/] {type(e).__name__}: ", end="", highlight=False)
    # soft_wrap keeps one difference / diagnostic per line, whatever the width
    progress.console.print(str(e), markup=False, highlight=False, soft_wrap=True)
    return e.exit_code
