"""Crashes of child processes that run engine code, reported as crashes.

A process that dies by a signal cannot say what it was doing, so it says it *before*:
the parent gives it a note file (``$HARNESS_CRASH_NOTE``) and the child records what
it has loaded and what it is running (:func:`note`). When the child dies by a signal,
the parent reads the note back (:func:`describe`): "SIGILL (illegal instruction), CPU
level sapphirerapids, while running tests/e2e/test_text.py::test_greedy".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.pyexec import python_argv

if TYPE_CHECKING:
    import subprocess

NOTE_ENV = "HARNESS_CRASH_NOTE"

_MEANING = {
    "SIGILL": "illegal instruction",
    "SIGSEGV": "segmentation fault",
    "SIGBUS": "bus error",
    "SIGFPE": "arithmetic exception",
    "SIGABRT": "aborted",
    "SIGKILL": "killed",
    "SIGTERM": "terminated",
    "SIGTRAP": "trace trap",
    "SIGSYS": "bad system call",
}


def signal_of(returncode: int | None) -> int | None:
    """The signal that ended a process: ``-N`` (subprocess) or ``128+N`` (a shell's report)."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if 128 < returncode < 128 + 65:
        return returncode - 128
    return None


def signal_text(signum: int) -> str:
    """``SIGILL (illegal instruction)``."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    meaning = _MEANING.get(name)
    return f"{name} ({meaning})" if meaning else name


def note(**facts: Any) -> None:
    """Record facts for the parent (merged into the note file); a no-op without a note file.

    Written whole and renamed into place, so a crash mid-write leaves the previous note.
    """
    path = os.environ.get(NOTE_ENV)
    if not path:
        return
    target = Path(path)
    data = read_note(target)
    data.update(facts)
    with contextlib.suppress(OSError):
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".note-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, default=str)
        os.replace(tmp, target)


def read_note(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return dict(data) if isinstance(data, dict) else {}


@dataclass(frozen=True, kw_only=True)
class Crash:
    """How a child ended when it did not exit on its own."""

    signal: int
    cpu_level: str | None
    running: str | None
    note: dict[str, Any]

    @property
    def signal_name(self) -> str:
        return signal_text(self.signal).split(" ")[0]

    def describe(self) -> str:
        parts = [signal_text(self.signal)]
        if self.cpu_level:
            parts.append(f"CPU level {self.cpu_level}")
        text = ", ".join(parts)
        if self.running:
            text += f", while running {self.running}"
        return text


def crash_of(returncode: int | None, note_path: Path | None) -> Crash | None:
    """A :class:`Crash` when ``returncode`` says the process died by a signal, else None."""
    sig = signal_of(returncode)
    if sig is None:
        return None
    facts = read_note(note_path) if note_path is not None else {}
    return Crash(signal=sig, cpu_level=facts.get("cpu_level"), running=facts.get("running"), note=facts)


@dataclass(frozen=True, kw_only=True)
class ChildRun:
    """How a child that runs engine code ended: its exit code (None: killed at the timeout),
    its output when captured, the crash when a signal ended it, and the note it left."""

    returncode: int | None
    stdout: str
    stderr: str
    crash: Crash | None
    note: dict[str, Any]

    def last_line(self, default: str = "") -> str:
        lines = (self.stderr or self.stdout).strip().splitlines()
        return lines[-1] if lines else default


def run_child(argv: list[str], *, env: dict[str, str], timeout: float | None = None, capture: bool = True,
              cwd: Path | None = None) -> ChildRun:
    """Run ``argv`` with a fresh note file in ``env``; a death by signal comes back as a :class:`Crash`."""
    import subprocess

    with note_file() as (path, note_env):
        try:
            r = subprocess.run(argv, env={**env, **note_env}, cwd=cwd, capture_output=capture, text=True,
                               timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
            return ChildRun(returncode=None, stdout=out, stderr="", crash=None, note=read_note(path))
        return ChildRun(returncode=r.returncode, stdout=r.stdout or "", stderr=r.stderr or "",
                        crash=crash_of(r.returncode, path), note=read_note(path))


@contextlib.contextmanager
def note_file() -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh note file and the environment entry that hands it to a child."""
    with tempfile.TemporaryDirectory(prefix="harness-crash-") as tmp:
        path = Path(tmp) / "note.json"
        yield path, {NOTE_ENV: str(path)}


SUPERVISED_ENV = "HARNESS_SUPERVISED"

#: Signals that ask a supervised command to stop: passed on to the child, never reported as its crash.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def supervise(argv: list[str] | None, what: str) -> int | None:
    """Run ``harness <argv>`` in a child process and report its death by signal as a crash.

    Returns the child's exit code, or None when this process *is* the supervised child, or
    ``argv`` is None (a command called from Python, not from the command line): the caller
    then does the work itself. Output passes straight through; only a signal is translated.
    A SIGINT or SIGTERM sent to this process is passed on to the child (see
    :class:`_StopForwarder`), and a child that dies by one of those was stopped, not crashed:
    the exit code is then ``128 + signal``, as a shell reports it.
    """
    import subprocess

    from harness.core.errors import EngineCrashError

    if argv is None or os.environ.get(SUPERVISED_ENV):
        return None
    with note_file() as (path, env):
        env = {**os.environ, **env, SUPERVISED_ENV: "1"}
        path.write_text(json.dumps({"running": what}))
        proc = subprocess.Popen([*python_argv("-m", "harness"), *argv], env=env)
        with _StopForwarder(proc) as stops:
            returncode = proc.wait()
        died = crash_of(returncode, path)
    if died is not None and died.signal in stops.received:
        return 128 + died.signal
    if died is not None:
        msg = (f"{what} crashed: {died.describe()}. `harness engine info` shows which CPU levels passed "
               "this host's smoke probe; force another with HARNESS_CPU_LEVEL=<level>")
        raise EngineCrashError(msg)
    return returncode


class _StopForwarder:
    """While active, SIGINT and SIGTERM sent to this process are passed on to ``proc``.

    A Ctrl-C at the terminal reaches the whole foreground process group, the child (which
    shares ours) included: that SIGINT is not sent a second time, since a second one means
    "stop now" to a server that is still finishing its requests. ``received`` holds every stop
    signal that arrived, so that the child's death by one of them is not taken for a crash.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.received: set[int] = set()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopForwarder:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._forward)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _forward(self, signum: int, _frame: object) -> None:
        self.received.add(signum)
        if signum == signal.SIGINT and _in_terminal_foreground():
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signum)


def _in_terminal_foreground() -> bool:
    """Whether this process group is the foreground one of a controlling terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)
