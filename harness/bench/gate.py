"""Headline ratios and the regression gate (``--fail-on-slower``).

A run measures six metrics; three of them are its headline: prefill at the lowest
concurrency (reported as prompt tokens/s, from the TTFT), decode tok/s at the lowest
concurrency, and aggregate tok/s at the highest. Each is stated as a *speed* ratio
B/A, so above 1.0 is always "B faster", whatever the metric's unit.

A gate of ``PCT`` percent has three verdicts per metric, from the 95% interval of
its speed ratio against the floor ``1 - PCT/100``:

- **FAILED**: the whole interval lies below the floor (B is slower by more than ``PCT``);
- **passed**: the whole interval lies at or above the floor (B is not slower by more than ``PCT``);
- **undecided**: the interval straddles the floor: the run cannot resolve ``PCT`` and says so,
  with the half-width it would need. An undecided gate is not a pass: ``harness bench``
  exits with :class:`~harness.errors.GateUndecidedError`'s code and qualify's stage is ``undecided``.

An interval around 1.0 passes a ``PCT`` gate only when its half-width is under ``PCT``
(:func:`needed_halfwidth`); an undecided check says what the run resolved and what the gate needs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.bench.stats import METRICS, Analysis, Interval, MetricStats, metric_key
from harness.core.errors import UsageError, did_you_mean

#: Short names -> metric ids; a bare short name means its headline concurrency.
NAMES: dict[str, str] = {"prefill": "ttft_ms", "ttft": "ttft_ms", "decode": "decode_tps", "aggregate": "aggregate_tps"}
#: The short name each metric is shown under.
SHORT: dict[str, str] = {"ttft_ms": "prefill", "decode_tps": "decode", "aggregate_tps": "aggregate"}
ALL = "all"


def headline_keys(concurrency: Iterable[int]) -> list[str]:
    """Prefill and decode at the lowest concurrency, aggregate at the highest (when it differs)."""
    levels = sorted(set(concurrency))
    lo, hi = levels[0], levels[-1]
    keys = [metric_key("ttft_ms", lo), metric_key("decode_tps", lo)]
    if hi != lo:
        keys.append(metric_key("aggregate_tps", hi))
    return keys


def _invert(iv: Interval) -> Interval:
    return Interval(point=1.0 / iv.point, lo=None if iv.hi is None else 1.0 / iv.hi,
                    hi=None if iv.lo is None else 1.0 / iv.lo)


@dataclass(frozen=True, kw_only=True)
class Headline:
    """One metric as a speed: tok/s per arm and the B/A speed ratio (> 1: B faster)."""

    key: str
    name: str
    """``prefill``, ``decode`` or ``aggregate``."""
    label: str
    """``decode @ c=1``."""
    a: float | None
    """Arm A's speed, tok/s (prefill: prompt tokens/s)."""
    b: float | None
    speed: Interval | None
    verdict: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def speed_of(ms: MetricStats, pn: int) -> Headline:
    """``ms`` as speeds: a TTFT becomes prompt tokens per second (``pn`` x concurrency / TTFT)."""
    def arm_speed(role: str) -> float | None:
        arm = ms.arms.get(role)
        if arm is None:
            return None
        v = arm.geomean.point
        return pn * ms.concurrency / (v / 1000.0) if ms.metric == "ttft_ms" else v

    speed = None
    verdict = "no ratio"
    if ms.ratio is not None:
        speed = ms.ratio.ratio if ms.higher_is_better else _invert(ms.ratio.ratio)
        verdict = ms.ratio.verdict
    name = SHORT.get(ms.metric, ms.metric)
    return Headline(key=ms.key, name=name, label=f"{name} @ c={ms.concurrency}", a=arm_speed("A"),
                    b=arm_speed("B"), speed=speed, verdict=verdict)


def headlines(analysis: Analysis, pn: int) -> list[Headline]:
    concurrency = [m.concurrency for m in analysis.metrics.values()]
    if not concurrency:
        return []
    return [speed_of(analysis.metrics[k], pn) for k in headline_keys(concurrency) if k in analysis.metrics]


def fmt_speed(iv: Interval | None) -> str:
    if iv is None:
        return "n/a"
    if iv.lo is None or iv.hi is None:
        return f"{iv.point:.3f}x (no interval)"
    return f"{iv.point:.3f}x [{iv.lo:.3f}, {iv.hi:.3f}]"


# ---------------------------------------------------------------------------
# the gate
# ---------------------------------------------------------------------------


def _pct(text: Any, where: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not 0.0 <= value < 100.0:
        msg = f"expected a percentage in [0, 100) for {where}, found {text!r}; e.g. 5"
        raise UsageError(msg)
    return value


def parse_gate(values: Sequence[Any] | Mapping[str, Any] | float | str | None) -> dict[str, float]:
    """``["5"]``, ``["decode=3,prefill=5"]``, ``{"all": 5, "decode": 3}`` or ``5`` -> ``{selector: pct}``.

    A bare number applies to every headline metric (selector ``all``); ``NAME=PCT`` to one
    metric, NAME being ``prefill``, ``decode``, ``aggregate`` (their headline concurrency),
    a metric id, or either with ``@cN``.
    """
    if values is None:
        return {}
    if isinstance(values, Mapping):
        return {str(k): _pct(v, f"--fail-on-slower {k}") for k, v in values.items()}
    if isinstance(values, str | int | float):
        values = [values]
    out: dict[str, float] = {}
    for value in values:
        for item in filter(None, (s.strip() for s in str(value).split(","))):
            name, eq, pct = item.rpartition("=")
            selector = name.strip() if eq else ALL
            out[selector or ALL] = _pct(pct.strip(), f"--fail-on-slower {item}")
    return out


def resolve_gate(gate: Mapping[str, float], concurrency: Sequence[int]) -> dict[str, float]:
    """Selector -> metric key for the run's concurrency levels; checked before the run starts."""
    levels = sorted(set(concurrency))
    heads = headline_keys(levels)
    out: dict[str, float] = {}
    if ALL in gate:
        out.update(dict.fromkeys(heads, gate[ALL]))
    choices = [*NAMES, *METRICS]
    for selector, pct in gate.items():
        if selector == ALL:
            continue
        m = re.fullmatch(r"([a-z_]+)(?:@c(\d+))?", selector)
        name = m.group(1) if m else selector
        metric = NAMES.get(name, name if name in METRICS else None)
        if m is None or metric is None:
            msg = (f"unknown metric {selector!r} in --fail-on-slower{did_you_mean(name, choices)}; expected "
                   f"PCT (all headline metrics) or NAME=PCT with NAME one of {', '.join(choices)}, "
                   "optionally NAME@cN")
            raise UsageError(msg)
        if m.group(2) is not None:
            c = int(m.group(2))
            if c not in levels:
                msg = (f"--fail-on-slower {selector}: concurrency {c} is not measured; expected one of "
                       f"{', '.join(map(str, levels))} (--concurrency)")
                raise UsageError(msg)
        else:
            c = levels[-1] if metric == "aggregate_tps" else levels[0]
        out[metric_key(metric, c)] = pct
    return out


def needed_halfwidth(pct: float) -> float:
    """The 95% half-width (percent) under which a ``pct`` gate can pass a run with no difference."""
    return pct


@dataclass(frozen=True, kw_only=True)
class GateCheck:
    key: str
    label: str
    threshold_pct: float
    speed: Interval | None
    status: str
    """``passed``, ``FAILED`` or ``undecided`` (the interval straddles the floor, or there is none)."""
    message: str
    halfwidth_pct: float | None = None
    """The interval's half-width: the smallest difference this run resolves."""


@dataclass(frozen=True, kw_only=True)
class GateResult:
    checks: tuple[GateCheck, ...]

    @property
    def failures(self) -> list[GateCheck]:
        return [c for c in self.checks if c.status == "FAILED"]

    @property
    def undecided(self) -> list[GateCheck]:
        return [c for c in self.checks if c.status == "undecided"]

    @property
    def passed(self) -> bool:
        """Every check decided and none failed."""
        return not self.failures and not self.undecided

    @property
    def status(self) -> str:
        """``FAILED`` (any check failed), ``undecided`` (none failed, some undecided) or ``passed``."""
        return "FAILED" if self.failures else "undecided" if self.undecided else "passed"

    def verdict(self) -> str:
        """``gate >5% slower: passed`` / ``...: FAILED on decode @ c=1`` / ``...: undecided on ...``."""
        if not self.checks:
            return ""
        pcts = sorted({c.threshold_pct for c in self.checks})
        what = "/".join(f"{p:g}" for p in pcts)
        if self.failures:
            text = f"gate (B >{what}% slower): FAILED on " + ", ".join(c.label for c in self.failures)
            if self.undecided:
                text += "; undecided on " + ", ".join(c.label for c in self.undecided)
            return text
        if self.undecided:
            return (f"gate (B >{what}% slower): undecided on " + ", ".join(c.label for c in self.undecided)
                    + " (the run cannot resolve the gate: not a pass)")
        return f"gate (B >{what}% slower): passed"

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "status": self.status, "verdict": self.verdict(),
                "checks": [asdict(c) for c in self.checks]}


def evaluate(thresholds: Mapping[str, float], analysis: Analysis, pn: int) -> GateResult:
    """Check each metric key against its threshold (percent slower allowed)."""
    checks: list[GateCheck] = []
    for key, pct in thresholds.items():
        ms = analysis.metrics.get(key)
        if ms is None:
            continue
        h = speed_of(ms, pn)
        floor = 1.0 - pct / 100.0
        iv = h.speed
        if iv is None or iv.lo is None or iv.hi is None:
            checks.append(GateCheck(key=key, label=h.label, threshold_pct=pct, speed=iv, status="undecided",
                                    message=f"{h.label}: no interval (one block): the {pct:g}% gate cannot decide"))
            continue
        width = iv.half_width_pct
        slower = 100.0 * (1.0 - iv.point)
        ci = f"B/A {iv.point:.3f} [{iv.lo:.3f}, {iv.hi:.3f}] (95% CI, resolves ±{width:.1f}%)"
        if iv.hi < floor:
            status, text = "FAILED", (f"B is {slower:.1f}% slower, beyond the {pct:g}% gate "
                                      f"(the whole interval is below {floor:.3f})")
        elif iv.lo >= floor:
            status, text = "passed", f"within the {pct:g}% gate (the whole interval is at or above {floor:.3f})"
        else:
            need = (f"a {pct:g}% gate needs a half-width under {needed_halfwidth(pct):g}%, this run has ±{width:.1f}%: "
                    if width is not None and width >= needed_halfwidth(pct) else "")
            status, text = "undecided", f"the interval straddles the floor {floor:.3f}: {need}run more blocks"
        checks.append(GateCheck(key=key, label=h.label, threshold_pct=pct, speed=iv, status=status,
                                message=f"{h.label}: {ci}: {text}", halfwidth_pct=width))
    return GateResult(checks=tuple(checks))
