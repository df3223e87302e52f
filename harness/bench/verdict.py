"""Verdicts decided by what can decide them: wall-clock ABBA and CPU simulation, per gate.

Each headline gate (prefill, decode, aggregate) gets one :class:`Decision`: its status, the
instrument that decided it, what each instrument said. The rules:

1. A wall-clock interval wholly below the floor fails the gate, whatever simulation says (threads,
   memory bandwidth and the device are invisible to simulation; a resolved slowdown is real).
2. A simulated ratio wholly below the floor fails the gate: a code-path regression (more
   instructions or more simulated misses per token), deterministic, no interval to wait for.
3. A wall-clock interval wholly at or above the floor passes the gate (decided by wall-clock).
4. Otherwise a passing simulation decides (passed, instrument ``simulation``); an undecided
   wall-clock beside it is a *warning* that names the host's noise (the half-width it resolved)
   and says whether the simulated ratio lies inside the wall-clock interval (the instruments agree)
   or outside it (something simulation cannot see may differ).
5. A gate no instrument decided is ``undecided``. Simulation measures one stream: an aggregate gate
   at concurrency above 1 is compared with the simulated decode ratio, the nearest thing simulation
   measures, and is a warning only where that ratio lies inside its wall-clock interval. A gate
   whose arms cannot be simulated (a prebuilt peer) and that wall-clock leaves undecided stays
   undecided; :func:`stage_status` makes it a warning for an advisory gate.

Nothing is reported as passed that no instrument decided.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.bench.gate import GateCheck, GateResult
from harness.bench.simulation import SimCheck, SimResult


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One gate's verdict and who decided it."""

    gate: str
    """``prefill @ c=1``, ``decode @ c=1``, ``aggregate @ c=4``."""
    threshold_pct: float
    status: str
    """``passed``, ``FAILED``, ``warning`` (passed by simulation, wall-clock undecided) or ``undecided``."""
    instrument: str | None
    """``walltime`` or ``simulation``: what decided it; None when nothing did."""
    walltime: str | None
    """What wall-clock said: ``B/A 0.982 [0.951, 1.014] (resolves ±3.2%): undecided``."""
    simulation: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def decided(self) -> bool:
        return self.status in ("passed", "FAILED", "warning")

    def line(self) -> str:
        by = f" by {self.instrument}" if self.instrument else ""
        return f"{self.gate}: {self.status}{by} ({self.reason})"


def _metric(label: str) -> str:
    return label.split(" @ ", 1)[0]


def _wall_text(c: GateCheck) -> str:
    iv = c.speed
    if iv is None or iv.lo is None or iv.hi is None:
        return f"no interval: {c.status}"
    return f"B/A {iv.point:.3f} [{iv.lo:.3f}, {iv.hi:.3f}] (resolves ±{c.halfwidth_pct or 0:.1f}%): {c.status}"


def decide(wall: GateResult | None, sim: SimResult | None, *, gate_pcts: Mapping[str, float] | None = None) -> list[Decision]:
    """A :class:`Decision` per gated headline metric. ``gate_pcts`` (metric name -> percent) names the
    gates when there is no wall-clock run; with one, its checks name them."""
    checks: Sequence[GateCheck] = wall.checks if wall is not None else ()
    out: list[Decision] = []
    seen: set[str] = set()
    for c in checks:
        metric = _metric(c.label)
        seen.add(metric)
        s = sim.check(metric) if sim is not None else None
        proxy = False
        if s is None and sim is not None and metric == "aggregate":
            s, proxy = sim.check("decode"), True
        out.append(_one(c.label, c.threshold_pct, c, s, proxy=proxy))
    for metric, pct in (gate_pcts or {}).items():
        if metric in seen or sim is None or sim.check(metric) is None:
            continue
        out.append(_one(f"{metric} @ c=1", pct, None, sim.check(metric), proxy=False))
    return out


def _one(label: str, pct: float, w: GateCheck | None, s: SimCheck | None, *, proxy: bool) -> Decision:
    floor = 1.0 - pct / 100.0
    wall_text = None if w is None else _wall_text(w)
    sim_verdict = None
    if s is not None:
        sim_verdict = ("FAILED" if s.hi < floor else "passed" if s.lo >= floor else "undecided")
    sim_text = None if s is None else (f"{'decode (one stream) ' if proxy else ''}{s.speed:.4f}x "
                                       f"[{s.lo:.4f}, {s.hi:.4f}] on {s.decided_by}: {sim_verdict}")

    def d(status: str, instrument: str | None, reason: str) -> Decision:
        return Decision(gate=label, threshold_pct=pct, status=status, instrument=instrument, walltime=wall_text,
                        simulation=sim_text, reason=reason)

    if w is not None and w.status == "FAILED":
        return d("FAILED", "walltime", f"wall-clock resolved a slowdown beyond {pct:g}%: {wall_text}")
    if s is not None and not proxy and sim_verdict == "FAILED":
        return d("FAILED", "simulation", f"B executes more per token than the {pct:g}% gate allows: {sim_text}")
    if w is not None and w.status == "passed":
        return d("passed", "walltime", wall_text or "")
    iv = None if w is None else w.speed
    agrees = (s is not None and iv is not None and iv.lo is not None and iv.hi is not None
              and iv.lo <= s.speed <= iv.hi)
    noise = "" if w is None or w.halfwidth_pct is None else f"; wall-clock resolves ±{w.halfwidth_pct:.1f}% on this host"
    if s is not None and not proxy and sim_verdict == "passed":
        if w is None:
            return d("passed", "simulation", sim_text or "")
        side = ("the simulated ratio lies inside the wall-clock interval" if agrees else
                "the simulated ratio lies outside the wall-clock interval: threads, bandwidth or the host may differ")
        return d("warning", "simulation", f"simulation passed ({sim_text}); wall-clock undecided ({wall_text}){noise}; {side}")
    if proxy and s is not None and agrees and sim_verdict == "passed":
        return d("warning", "simulation", f"wall-clock undecided ({wall_text}){noise}; simulation has no "
                                          f"concurrency: its one-stream decode ratio {s.speed:.4f}x passes and lies "
                                          f"inside the wall-clock interval")
    why = "no instrument resolved the gate"
    if w is not None:
        why += f": wall-clock {wall_text}{noise}"
    if s is None:
        why += "; simulation did not measure these arms"
    elif proxy and not agrees:
        why += f"; the one-stream simulated decode ratio {s.speed:.4f}x lies outside the wall-clock interval"
    return d("undecided", None, why)


def overall(decisions: Sequence[Decision]) -> str:
    """``FAILED`` if any gate failed, else ``undecided`` if any is, else ``warning`` if any is, else ``passed``."""
    statuses = {d.status for d in decisions}
    for s in ("FAILED", "undecided", "warning"):
        if s in statuses:
            return s
    return "passed"


def markdown(decisions: Sequence[Decision]) -> str:
    if not decisions:
        return ""
    rows = ["| gate | verdict | decided by | wall-clock (95% CI) | simulation |", "|---|---|---|---|---|"]
    for d in decisions:
        rows.append(f"| {d.gate} (>{d.threshold_pct:g}% slower fails) | {d.status} | {d.instrument or 'nothing'} | "
                    f"{d.walltime or 'not run'} | {d.simulation or 'not run'} |")
    return "\n".join(rows) + "\n"
