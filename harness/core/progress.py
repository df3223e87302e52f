"""Progress display for long steps: rich bars on a terminal, heartbeat lines in a log, nothing under -q/--json.

On a terminal a step shows a bar or a spinner. When stderr is not a terminal (CI, ``| tee log``) a
step prints its name when it starts, then a heartbeat line at least every :data:`HEARTBEAT_S`
seconds (the step, where it is: its count or its last sub-step, and the elapsed time), and a last
line when it ends if it printed any heartbeat: a 12-minute build is never 12 silent minutes.
``$HARNESS_NO_PROGRESS`` turns bars and heartbeats off (a step's first line and info messages stay).

rich loads on first use (``progress.console`` is made when first read): a command that prints
nothing through it, ``harness --version`` or ``--help``, does not pay for it.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    #: Messages and progress go to stderr so stdout stays clean for --json.
    console: Console

_quiet = False
#: Longest silence of a step in a log (stderr not a terminal), in seconds.
HEARTBEAT_S = 30.0


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


def _wanted() -> bool:
    return not _quiet and not os.environ.get("HARNESS_NO_PROGRESS")


def enabled() -> bool:
    """Whether progress is drawn as rich bars (stderr is a terminal); see :func:`heartbeat` for logs."""
    return _wanted() and sys.stderr.isatty()


def elapsed_text(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@contextmanager
def heartbeat(description: str) -> Iterator[Callable[[str], None]]:
    """The log form of a long step: its name now, ``description: STATE (elapsed T)`` at least every
    :data:`HEARTBEAT_S` seconds, ``description: done (T)`` at the end when a heartbeat was printed.

    Yields ``update(state)``: what the next heartbeat says the step is at (``[412/1290] Building
    CXX ...``, ``block 3/8``). Nothing under -q/--json; the first line only under ``$HARNESS_NO_PROGRESS``.
    """
    info(f"{description} ...")
    if not _wanted():
        yield lambda state: None
        return
    state = [""]
    beats = [0]
    stop = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            beats[0] += 1
            where = f": {state[0]}" if state[0] else ""
            info(f"{description}{where} (elapsed {elapsed_text(time.monotonic() - start)})")

    thread = threading.Thread(target=beat, name=f"heartbeat: {description[:40]}", daemon=True)
    thread.start()
    try:
        yield lambda text: state.__setitem__(0, text[-120:])
    finally:
        stop.set()
        thread.join()
        if beats[0]:
            info(f"{description}: done (elapsed {elapsed_text(time.monotonic() - start)})")


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
    """A download bar; yields ``callback(done, total)``. In a log: heartbeats with the bytes done."""
    if not enabled():
        with heartbeat(description) as update:
            yield lambda done, total: update(_bytes_text(done) + (f" of {_bytes_text(total)}" if total else ""))
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    cols = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*cols, console=_console(), transient=True) as p:
        task = p.add_task(description, total=None)
        yield lambda done, total: p.update(task, completed=done, total=total)


@contextmanager
def spinner(description: str) -> Iterator[Callable[[str], None]]:
    """A spinner with elapsed time; yields ``update(text)`` for the current sub-step. In a log: heartbeats."""
    if not enabled():
        with heartbeat(description) as update:
            yield update
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    cols = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*cols, console=_console(), transient=True) as p:
        task = p.add_task(description, total=None)
        yield lambda text: p.update(task, description=f"{description}: {text[-80:]}")


@contextmanager
def steps(title: str, total: int) -> Iterator[Callable[[str, bool], None]]:
    """A bar over ``total`` counted steps; yields ``step(text, advance)``: ``advance`` when the next step
    starts (the bar counts finished ones). In a log: heartbeats saying ``k/total: text``."""
    done = [0]
    started = [False]
    if not enabled():
        with heartbeat(f"{title}: {total} steps") as update:
            def beat(text: str, advance: bool) -> None:
                if advance and started[0]:
                    done[0] += 1
                started[0] = started[0] or advance
                update(f"{done[0]}/{total} done, now {text}")

            yield beat
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=_console(), transient=True) as p:
        task = p.add_task(title, total=total)

        def step(text: str, advance: bool) -> None:
            if advance and started[0]:
                p.advance(task)
            started[0] = started[0] or advance
            p.update(task, description=f"{title}: {text}")

        yield step


def _bytes_text(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} B"
