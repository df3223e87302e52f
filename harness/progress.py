"""Progress display for long steps (rich), quiet when not on a terminal or under --json."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

#: Messages and progress go to stderr so stdout stays clean for --json.
console = Console(stderr=True)
_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def enabled() -> bool:
    return not _quiet and not os.environ.get("HARNESS_NO_PROGRESS") and sys.stderr.isatty()


def info(message: str) -> None:
    if not _quiet:
        console.print(message, highlight=False)


@contextmanager
def bytes_task(description: str) -> Iterator[Callable[[int, int | None], None]]:
    """A download bar; yields ``callback(done, total)``."""
    if not enabled():
        info(f"{description} ...")
        yield lambda done, total: None
        return
    cols = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*cols, console=console, transient=True) as p:
        task = p.add_task(description, total=None)
        yield lambda done, total: p.update(task, completed=done, total=total)


@contextmanager
def spinner(description: str) -> Iterator[Callable[[str], None]]:
    """A spinner with elapsed time; yields ``update(text)`` for the current sub-step."""
    if not enabled():
        info(f"{description} ...")
        yield lambda text: None
        return
    cols = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*cols, console=console, transient=True) as p:
        task = p.add_task(description, total=None)
        yield lambda text: p.update(task, description=f"{description}: {text[-80:]}")
