"""Progress display for long steps (rich), quiet when not on a terminal or under --json.

rich loads on first use (``progress.console`` is made when first read): a command that prints
nothing through it, ``harness --version`` or ``--help``, does not pay for it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    #: Messages and progress go to stderr so stdout stays clean for --json.
    console: Console

_quiet = False


@functools.cache
def _console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def __getattr__(name: str) -> Any:
    if name == "console":
        return _console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def enabled() -> bool:
    return not _quiet and not os.environ.get("HARNESS_NO_PROGRESS") and sys.stderr.isatty()


def info(message: str, *, markup: bool = False) -> None:
    """Print a line on stderr. Text is printed as it is (a hint such as ``pip install 'harness[convert]'``
    keeps its brackets); with ``markup=True`` rich's [style] tags apply: put what is not yours
    through :func:`escape` first."""
    if not _quiet:
        _console().print(message, highlight=False, markup=markup)


def escape(text: str) -> str:
    """``text`` with rich markup escaped, for a line printed with ``markup=True``."""
    from rich.markup import escape as _escape

    return _escape(text)


@contextmanager
def bytes_task(description: str) -> Iterator[Callable[[int, int | None], None]]:
    """A download bar; yields ``callback(done, total)``."""
    if not enabled():
        info(f"{description} ...")
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    cols = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*cols, console=_console(), transient=True) as p:
        task = p.add_task(description, total=None)
        yield lambda done, total: p.update(task, completed=done, total=total)


@contextmanager
def spinner(description: str) -> Iterator[Callable[[str], None]]:
    """A spinner with elapsed time; yields ``update(text)`` for the current sub-step."""
    if not enabled():
        info(f"{description} ...")
        yield lambda text: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    cols = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*cols, console=_console(), transient=True) as p:
        task = p.add_task(description, total=None)
        yield lambda text: p.update(task, description=f"{description}: {text[-80:]}")
