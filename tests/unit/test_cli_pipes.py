"""A reader that closes stdout early (``harness matrix --json | head -1``) ends a command quietly, exit 0.

Run as users run it: the installed ``harness`` command in a subprocess, its stdout a pipe whose
reader is gone. Closing the read end before the command starts makes every write fail (EPIPE),
whatever the output's size: the case ``head -1`` hits only once the output outgrows the pipe's buffer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "models" / "smollm2-chat.yaml"

#: Every command with --json that answers in about a second here, without network, builds or models.
JSON_COMMANDS = (
    ("engines",), ("matrix",), ("plugins",), ("host",), ("artifacts",), ("engine", "info"),
    ("models", "list"), ("models", "env"), ("validate", str(EXAMPLE.parent)),
    ("config", "show", str(EXAMPLE)), ("select", str(EXAMPLE)),
)


def harness_command() -> list[str]:
    """The console script installed beside this interpreter, as a user runs it."""
    script = Path(sys.executable).with_name("harness")
    return [str(script)] if script.exists() else [sys.executable, "-m", "harness"]


def _run_into_closed_pipe(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([*harness_command(), *args], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, cwd=cwd, timeout=120, check=False)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [[*c, "--json"] for c in JSON_COMMANDS] + [["--help"], ["report", "merge", "--help"]],
                         ids=" ".join)
def test_closed_stdout_is_a_quiet_exit_0(args: list[str], tmp_path: Path) -> None:
    r = _run_into_closed_pipe(args, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_reader_that_stops_after_one_line(tmp_path: Path) -> None:
    """The ``| head -1`` shape itself: a reader takes one line, then closes while the command writes."""
    with subprocess.Popen([*harness_command(), "matrix", "--json"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=tmp_path) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    assert first.strip() in (b"[", b"{")
    assert code == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_failing_command_keeps_its_code_with_stdout_closed(tmp_path: Path) -> None:
    """The quiet exit is for the closed pipe only: an error still exits with its own code."""
    r = _run_into_closed_pipe(["config", "show", str(tmp_path / "missing.yaml"), "--json"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert "does not exist" in r.stderr
