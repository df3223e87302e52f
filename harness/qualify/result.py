"""What a qualification stage returns or raises.

A stage returns a :class:`StageResult` (a one-line summary, the figures the report shows, and
what later stages get from it); it raises :class:`SkippedStage` when it cannot run here, a
:class:`~harness.core.errors.HarnessError` when it fails, and :class:`StageFailed` when it ran and its
verdict is a failure whose figures the report must still show (a benchmark gate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import HarnessError


@dataclass(frozen=True)
class StageResult:
    """What a stage returns: a one-line summary and the figures the report shows."""

    summary: str
    data: dict[str, Any] = field(default_factory=dict)
    product: object | None = None
    """What later stages get from this one (:meth:`QualifyContext.product`); not in the report."""
    status: str = "passed"
    """``passed``, or ``warning``: passed on what decided it, with something the report must flag
    (a gate simulation decided while wall-clock could not resolve it on this host)."""


class SkippedStage(Exception):
    """A stage that cannot run here (no buildable row, no device): recorded as skipped."""


class StageFailed(HarnessError):
    """A stage that ran and failed on a verdict (a benchmark gate): its figures are kept in the report."""

    def __init__(self, result: StageResult) -> None:
        super().__init__(result.summary)
        self.result = result


class StageUndecided(StageFailed):
    """A stage whose verdict the run could not resolve (a gate's interval straddles its floor).

    Recorded as ``undecided``: not a pass (the qualification does not pass), not a failure."""
