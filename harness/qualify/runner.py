"""The qualification runner: stages in order, each skipped when what it needs did not pass, timed
and recorded (passed / failed / skipped, seconds, summary, figures).

A :class:`Stage` is data: a name, the stages it needs and a plain function of the
:class:`~harness.qualify.context.QualifyContext`. :meth:`Qualification.run_stages` owns the
order (the list's, checked against ``needs``), the skipping, the timing and the hand-off of each
stage's product to the stages after it. A bug in one stage is recorded with its traceback; the
others still run.
"""

from __future__ import annotations

import functools
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core import progress
from harness.core.errors import HarnessError
from harness.qualify.result import SkippedStage, StageFailed, StageResult, StageUndecided

if TYPE_CHECKING:
    from harness.qualify.context import QualifyContext


#: Stage statuses that let the stages needing them run (a warning passed on what decided it).
PASSING = ("passed", "warning")


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One stage of a qualification: what it is called, what must have passed before it, what runs."""

    name: str
    run: Callable[[QualifyContext], StageResult]
    needs: tuple[str, ...] = ()
    """Stages that must have passed; otherwise this one is skipped, saying which."""


@dataclass
class StageRecord:
    """How a stage went: what the report shows of it."""

    name: str
    status: str = "pending"
    seconds: float = 0.0
    summary: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Qualification:
    """The record of one qualification: its header (engine, pin, host, plan) and every stage's record."""

    engine: str
    stages: list[StageRecord] = field(default_factory=list)
    header: dict[str, Any] = field(default_factory=dict)

    def run_stages(self, stages: Sequence[Stage], ctx: QualifyContext) -> QualifyContext:
        """Run ``stages`` in their order; returns the context with every product handed on."""
        seen: set[str] = set()
        for stage in stages:
            ahead = [n for n in stage.needs if n not in seen]
            if ahead:  # a stage list's error, not a run's: the stage could never run
                msg = f"stage {stage.name} needs {', '.join(ahead)}, which no earlier stage is"
                raise ValueError(msg)
            seen.add(stage.name)
        for stage in stages:
            _, result = self._attempt(stage.name, functools.partial(stage.run, ctx), stage.needs)
            if result is not None and result.product is not None:
                ctx = ctx.with_product(stage.name, result.product)
        return ctx

    def run(self, name: str, fn: Callable[[], StageResult], *, needs: tuple[str, ...] = ()) -> StageRecord:
        """Run one stage function now (skipped when a stage in ``needs`` did not pass)."""
        return self._attempt(name, fn, needs)[0]

    def _attempt(self, name: str, fn: Callable[[], StageResult],
                 needs: tuple[str, ...]) -> tuple[StageRecord, StageResult | None]:
        st = StageRecord(name=name)
        self.stages.append(st)
        missing = [n for n in needs if self.status(n) not in PASSING]
        if missing:
            st.status, st.summary = "skipped", f"needs {', '.join(missing)}"
            progress.info(f"[yellow]skip[/] {progress.escape(f'{name}: {st.summary}')}", markup=True)
            return st, None
        progress.info(f"[bold]{progress.escape(name)}[/] ...", markup=True)
        t0 = time.perf_counter()
        result: StageResult | None = None
        try:
            result = fn()
            st.summary, st.data = result.summary, dict(result.data)
            st.status = "warning" if result.status == "warning" else "passed"
        except SkippedStage as e:
            st.status, st.summary = "skipped", str(e)
        except StageUndecided as e:  # the run could not resolve a gate: not a pass, not a failure
            st.status, st.summary, st.data = "undecided", e.result.summary, dict(e.result.data)
        except StageFailed as e:  # a verdict (a gate), with the figures that led to it
            st.status, st.summary, st.data = "failed", e.result.summary, dict(e.result.data)
        except HarnessError as e:
            st.status, st.summary = "failed", f"{type(e).__name__}: {e}"
        except Exception as e:  # a bug in a stage must not hide the others' results
            st.status, st.summary = "failed", f"{type(e).__name__}: {e}"
            st.data["traceback"] = traceback.format_exc(limit=-6)
        st.seconds = round(time.perf_counter() - t0, 2)
        colour = {"passed": "green", "failed": "red", "skipped": "yellow", "undecided": "yellow",
                  "warning": "yellow"}[st.status]
        first = st.summary.splitlines()[0] if st.summary else ""
        progress.info(f"  [{colour}]{st.status}[/] in {st.seconds:.1f} s: {progress.escape(first)}", markup=True)
        return st, result if st.status in PASSING else None

    def status(self, name: str) -> str:
        return next((s.status for s in self.stages if s.name == name), "missing")

    @property
    def passed(self) -> bool:
        return all(s.status not in ("failed", "undecided") for s in self.stages)

    @property
    def undecided(self) -> bool:
        """No stage failed, but some gate could not be resolved (exit 18, not a pass)."""
        return not any(s.status == "failed" for s in self.stages) and any(
            s.status == "undecided" for s in self.stages)
