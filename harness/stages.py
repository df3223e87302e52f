"""Qualification stages: how each runs (skipped when what it needs failed) and what it returns.

A stage is a function returning a :class:`StageResult` (a one-line summary and the figures
the report shows); it raises :class:`SkippedStage` when it cannot run here, a
:class:`HarnessError` when it fails, and :class:`StageFailed` when it ran and its verdict
is a failure whose figures the report must still show (a benchmark gate).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness import progress
from harness.errors import HarnessError


@dataclass
class Stage:
    name: str
    status: str = "pending"
    seconds: float = 0.0
    summary: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Qualification:
    engine: str
    stages: list[Stage] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)

    def run(self, name: str, fn: Callable[[], StageResult], *, needs: tuple[str, ...] = ()) -> Stage:
        st = Stage(name=name)
        self.stages.append(st)
        missing = [n for n in needs if self.status(n) != "passed"]
        if missing:
            st.status, st.summary = "skipped", f"needs {', '.join(missing)}"
            progress.info(f"[yellow]skip[/] {name}: {st.summary}")
            return st
        progress.info(f"[bold]{name}[/] ...")
        t0 = time.perf_counter()
        try:
            result = fn()
            st.summary, st.data = result.summary, dict(result.data)
            st.status = "passed"
        except SkippedStage as e:
            st.status, st.summary = "skipped", str(e)
        except StageFailed as e:  # a verdict (a gate), with the figures that led to it
            st.status, st.summary, st.data = "failed", e.result.summary, dict(e.result.data)
        except HarnessError as e:
            st.status, st.summary = "failed", f"{type(e).__name__}: {e}"
        except Exception as e:  # a bug in a stage must not hide the others' results
            st.status, st.summary = "failed", f"{type(e).__name__}: {e}"
            st.data["traceback"] = traceback.format_exc(limit=-6)
        st.seconds = round(time.perf_counter() - t0, 2)
        colour = {"passed": "green", "failed": "red", "skipped": "yellow"}[st.status]
        progress.info(f"  [{colour}]{st.status}[/] in {st.seconds:.1f} s: {st.summary.splitlines()[0] if st.summary else ''}")
        return st

    def status(self, name: str) -> str:
        return next((s.status for s in self.stages if s.name == name), "missing")

    @property
    def passed(self) -> bool:
        return all(s.status != "failed" for s in self.stages)


class SkippedStage(Exception):
    """A stage that cannot run here (no buildable row, no device): recorded as skipped."""


@dataclass(frozen=True)
class StageResult:
    """What a stage returns: a one-line summary and the figures the report shows."""

    summary: str
    data: dict[str, Any] = field(default_factory=dict)


class StageFailed(HarnessError):
    """A stage that ran and failed on a verdict (a benchmark gate): its figures are kept in the report."""

    def __init__(self, result: StageResult) -> None:
        super().__init__(result.summary)
        self.result = result
