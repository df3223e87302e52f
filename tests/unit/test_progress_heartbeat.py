"""A long step in a log (stderr not a terminal) prints a heartbeat at least every HEARTBEAT_S seconds.

Each case runs in a child process whose stderr is a pipe, as under CI or ``| tee log``; the interval
is shortened so the test takes a second, not minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from harness.core import progress

CHILD = """
import sys, time
from harness.core import progress
progress.HEARTBEAT_S = {interval}
kind = sys.argv[1]
if kind == "spinner":
    with progress.spinner("build llamacpp cpu") as update:
        for i in range(1, 9):
            update(f"[{{i}}/8] Building CXX object ggml-cpu.o")
            time.sleep(0.1)
elif kind == "steps":
    with progress.steps("bench", 4) as step:
        for i in range(4):
            step(f"block {{i + 1}} A", True)
            time.sleep(0.2)
elif kind == "short":
    with progress.spinner("extract x.tar.gz"):
        pass
elif kind == "bytes":
    with progress.bytes_task("download m.gguf") as cb:
        for i in range(1, 9):
            cb(i << 20, 8 << 20)
            time.sleep(0.1)
"""


def _run(kind: str, *, interval: float = 0.25, no_progress: bool = False) -> list[str]:
    """The child's stderr lines."""
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_NO_PROGRESS"}
    if no_progress:
        env["HARNESS_NO_PROGRESS"] = "1"
    r = subprocess.run([sys.executable, "-c", CHILD.format(interval=interval), kind], capture_output=True,
                       text=True, timeout=60, env=env, check=False)
    assert r.returncode == 0, r.stderr
    return r.stderr.splitlines()


def test_a_long_step_beats_with_its_sub_step_and_elapsed_time() -> None:
    lines = _run("spinner")
    assert lines[0] == "build llamacpp cpu ..."
    beats = [line for line in lines[1:-1] if line.startswith("build llamacpp cpu: [")]
    assert len(beats) >= 2, lines  # 0.8 s of work at a 0.25 s interval
    assert all("/8] Building CXX object ggml-cpu.o (elapsed 0s)" in b for b in beats), beats
    assert lines[-1] == "build llamacpp cpu: done (elapsed 0s)"


def test_counted_steps_say_how_far_they_are() -> None:
    lines = _run("steps")
    assert lines[0] == "bench: 4 steps ..."
    assert any(" done, now block " in line and "/4 done" in line for line in lines[1:]), lines


def test_a_download_beats_with_its_bytes() -> None:
    lines = _run("bytes")
    assert any(" MiB of 8.0 MiB (elapsed " in line for line in lines), lines


def test_a_short_step_prints_its_name_only() -> None:
    lines = _run("short", interval=30.0)
    assert lines == ["extract x.tar.gz ..."]


def test_no_progress_keeps_the_first_line_only() -> None:
    lines = _run("spinner", no_progress=True)
    assert lines == ["build llamacpp cpu ..."]


def test_quiet_prints_nothing(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "_quiet", True)
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.01)
    with progress.spinner("step") as update:
        update("x")
        time.sleep(0.05)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0s"), (42, "42s"), (185, "3m05s"), (3725, "1h02m")])
def test_elapsed_text(seconds: float, text: str) -> None:
    assert progress.elapsed_text(seconds) == text
