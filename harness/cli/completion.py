"""``harness completion SHELL``: a shell completion script generated from the parser itself.

shtab writes it (not argcomplete): the script is static, so pressing TAB never starts Python
(the harness's start-up and plugin loading), and the parser needs no marker or hook; regenerate it
after an upgrade. File and directory arguments complete as paths.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SHELLS = ("bash", "zsh", "tcsh")
#: Where each shell picks a completion script up (for the help text and the README).
INSTALL = {
    "bash": "harness completion bash > ~/.local/share/bash-completion/completions/harness",
    "zsh": "harness completion zsh > ~/.zfunc/_harness  (with fpath+=~/.zfunc before compinit)",
    "tcsh": "harness completion tcsh > ~/.harness.tcsh; source ~/.harness.tcsh in ~/.tcshrc",
}
_DIR_METAVARS = frozenset({"DIR", "OUT", "DIRECTORY"})
_FILE_METAVARS = frozenset({"FILE", "PATH", "MODEL", "CONFIG", "REQUEST", "SPEC"})


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh, tcsh)",
                       description="Print the completion script of SHELL on stdout, generated from harness's own "
                                   "parser (every command, option and choice; paths where a file or directory "
                                   "is read). Install it once, again after an upgrade:\n\n"
                                   + "\n".join(f"  {line}" for line in INSTALL.values()),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help=f"one of {', '.join(SHELLS)}")
    p.set_defaults(func=cmd_completion)


def _mark_paths(parser: argparse.ArgumentParser) -> None:
    """Paths complete as paths: arguments typed Path, or named like a file or a directory."""
    import shtab

    from harness.cli import iter_parsers

    for _, p in iter_parsers(parser):
        for action in p._actions:
            metavar = action.metavar if isinstance(action.metavar, str) else ""
            if metavar in _DIR_METAVARS or action.dest in ("out", "models_dir", "artifact"):
                action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
            elif action.type is Path or metavar in _FILE_METAVARS:
                action.complete = shtab.FILE  # type: ignore[attr-defined]


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    from harness.cli import build_parser

    parser = build_parser()
    _mark_paths(parser)
    print(shtab.complete(parser, shell=args.shell), end="")
    return 0
