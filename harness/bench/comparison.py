"""The result of ``harness report compare``: per metric, an old run against a new one.

Data only, apart from :mod:`harness.bench.report` (which computes it) and
:mod:`harness.bench.markdown` (which renders it), so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.bench.stats import Interval


@dataclass(frozen=True, kw_only=True)
class CompareRow:
    metric: str
    what: str
    """``B/A`` (the ratio), ``A`` or ``B`` (an arm's absolute figure)."""
    old: Interval
    new: Interval
    change_pct: float
    """New vs old, percent, signed as measured (not by better/worse)."""
    z: float | None
    """Change in units of the combined noise of both runs; positive is better."""
    verdict: str
    """``regression``, ``improvement``, ``within noise`` or ``no interval``."""


@dataclass(frozen=True, kw_only=True)
class Comparison:
    old: str
    new: str
    rows: tuple[CompareRow, ...]
    notes: tuple[str, ...] = ()

    @property
    def regressions(self) -> list[CompareRow]:
        """Regressions of the candidate: its ratio to the baseline, or its own figure."""
        return [r for r in self.rows if r.verdict == "regression" and r.what in ("B/A", "B")]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "regressions": [asdict(r) for r in self.regressions]}
