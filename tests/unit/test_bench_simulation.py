"""The simulation instrument's arithmetic (harness.bench.simulation) and the verdict rules
(harness.bench.verdict): cachegrind's output format, per-token differences, resolution, gates.

The cachegrind text below follows the format cachegrind writes (valgrind 3.19, docs/cg-manual:
"Cachegrind Output File Format": a ``desc:`` line, ``cmd:``, ``events:`` naming the columns,
per-function lines, and a ``summary:`` line with the totals)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats

from harness.bench import verdict
from harness.bench.gate import GateCheck, GateResult
from harness.bench.simulation import (
    FORMULA,
    Counts,
    SimPlan,
    SimResult,
    SimRun,
    compare,
    figures_from_runs,
    parse_cachegrind,
)
from harness.bench.stats import Interval
from harness.core.errors import BenchError

CG = """desc: I1 cache:         32768 B, 64 B, 8-way associative
desc: D1 cache:         32768 B, 64 B, 8-way associative
desc: LL cache:         8388608 B, 64 B, 16-way associative
cmd: ./llama-bench -m m.gguf
events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
fl=???
fn=0x0000000000001000
0 10 1 1 4 2 1 3 1 0
summary: 1000000 200 100 400000 3000 1000 200000 500 50
"""


def test_parse_cachegrind_reads_the_summary_and_estimates_cycles() -> None:
    c = parse_cachegrind(CG)
    assert c["Ir"] == 1_000_000 and c["DLmr"] == 1000 and c["D1mw"] == 500
    l1 = 200 + 3000 + 500
    ll = 100 + 1000 + 50
    assert c.cycles == 1_000_000 + 10 * l1 + 100 * ll
    assert "Ir + 10 x (I1mr + D1mr + D1mw) + 100 x (ILmr + DLmr + DLmw)" in FORMULA


def test_parse_cachegrind_refuses_output_without_cache_simulation_or_summary() -> None:
    with pytest.raises(BenchError, match="cache simulation"):
        parse_cachegrind("events: Ir\nsummary: 12\n")
    with pytest.raises(BenchError, match="summary"):
        parse_cachegrind("events: Ir D1mr\n")
    with pytest.raises(BenchError, match="2 numbers for 3 events"):
        parse_cachegrind("events: Ir D1mr DLmr\nsummary: 1 2\n")


def _counts(ir: float, miss: float = 0.0) -> Counts:
    return Counts({"Ir": ir, "D1mr": miss, "DLmr": miss / 10})


def _runs(start: float, per_prompt: float, per_gen: float, plan: SimPlan, jitter: float = 0.0) -> list[SimRun]:
    def total(pn: int, gn: int) -> float:
        return start + per_prompt * pn + per_gen * gn

    return [SimRun(role=role, pn=pn, gn=gn, seconds=1.0, env_pad=0,
                   counts=_counts(total(pn, gn) + (jitter if role.endswith("2") else 0.0)))
            for role, pn, gn in plan.shapes()]


def test_per_token_figures_cancel_start_up_and_report_the_repeat_as_resolution() -> None:
    plan = SimPlan(p1=8, p2=24, g1=2, g2=6)
    f = figures_from_runs("x", plan, _runs(5e9, 1e6, 4e6, plan, jitter=320.0))
    assert f.prefill["Ir"] == pytest.approx(1e6) and f.decode["Ir"] == pytest.approx(4e6)
    # resolution: every shape ran twice, each second run 320 higher: each shape takes its least run (the
    # jitter does not move the figures); sigma is the median difference over 0.6745 sqrt 2; the half-width
    # is t(3 differences) at 99% times sqrt 2 (a figure is a difference of two shapes) over the span
    t3 = scipy.stats.t.ppf(0.995, 3)
    sd = 320 / (0.6744897501960817 * 2**0.5)
    assert f.jitter["Ir"] == pytest.approx(sd) and f.diffs["Ir"] == (320.0, 320.0, 320.0)
    assert f.resolution_pct["prefill"] == pytest.approx(100 * t3 * 2**0.5 * sd / (16 * 1e6))
    assert f.resolution_pct["decode"] == pytest.approx(100 * t3 * 2**0.5 * sd / (4 * 4e6))
    # one outlier among the differences moves the median, not much: sigma stays of the order of the others
    runs = _runs(5e9, 1e6, 4e6, plan, jitter=320.0)
    runs[3] = dataclasses.replace(runs[3], counts=_counts(runs[3].counts["Ir"] + 4e6))  # base2, 4 M out
    assert figures_from_runs("z", plan, runs).jitter["Ir"] == pytest.approx(sd)
    # a tool that processes its prompt twice (a warm-up it cannot skip) halves the prefill figure
    twice = figures_from_runs("y", plan, _runs(5e9, 2e6, 4e6, plan), prompt_passes=2)
    assert twice.prefill["Ir"] == pytest.approx(1e6)


def test_a_target_that_cannot_run_fails_at_its_native_warm_up(tmp_path) -> None:
    from harness.bench import simulation

    class Broken:
        name = "broken arm"

        def command(self, pn: int, gn: int) -> simulation.SimCommand:
            return simulation.SimCommand(argv=("sh", "-c", f"echo no such model for {pn}/{gn} >&2; exit 3"),
                                         env={"PATH": "/usr/bin:/bin"})

        def describe(self) -> dict[str, str]:
            return {}

    with pytest.raises(BenchError, match=r"(?s)warm-up \(pn=8 gn=2\) exited 3; nothing was simulated.*no such model for 8/2"):
        simulation.measure([Broken()], SimPlan(p1=8, p2=24, g1=2, g2=6), tmp_path)


def test_a_target_that_ignores_the_lengths_is_refused() -> None:
    plan = SimPlan()
    with pytest.raises(BenchError, match="executed no more than the base run"):
        figures_from_runs("stuck", plan, _runs(5e9, 0.0, 4e6, plan))


def test_plan_shapes_are_checked() -> None:
    with pytest.raises(BenchError, match="P1 < P2"):
        SimPlan(p1=32, p2=32)
    assert SimPlan.parse("8,24,2,6") == SimPlan(p1=8, p2=24, g1=2, g2=6, repeats=1)
    assert [r for r, _, _ in SimPlan.parse("8,24,2,6,2").shapes()] == [
        "base", "prompt", "generation", "base2", "prompt2", "generation2", "base3", "prompt3", "generation3"]
    with pytest.raises(BenchError, match="four or five integers"):
        SimPlan.parse("8,24")
    with pytest.raises(BenchError, match="repeats=-1"):
        SimPlan(repeats=-1)


def _aa_runs(rng: np.random.Generator, plan: SimPlan, sigma: float, outlier: float = 0.0) -> list[SimRun]:
    """One arm's runs: 5e9 + 2e5 per prompt token + 2e5 per generated token, each run off by a Gaussian
    jitter of ``sigma`` instructions (the tiny model's: ~0.3 M) and, one run in ten, by ``outlier`` more
    (its occasional 3-5 M)."""
    return [SimRun(role=role, pn=pn, gn=gn, seconds=1.0, env_pad=0,
                   counts=Counts({"Ir": 5e9 + 2e5 * pn + 2e5 * gn + rng.normal(0.0, sigma)
                                  + (outlier if rng.random() < 0.1 else 0.0)}))
            for role, pn, gn in plan.shapes()]


@pytest.mark.parametrize(("repeats", "outlier", "coverage"), [(1, 0.0, 0.985), (1, 4e6, 0.96), (2, 4e6, 0.985)])
def test_an_aa_interval_misses_one_no_more_often_than_its_confidence_says(repeats: int, outlier: float,
                                                                          coverage: float) -> None:
    """A/A comparisons on synthetic runs with Gaussian jitter and, one run in ten, a 13-sigma outlier,
    over spans of 64 tokens: the 99% interval holds 1.0 in 98.5% of 1000 draws without outliers; with
    them, in 96% when every shape runs twice (both runs of a shape out: the least is out too) and in
    98.5% when it runs three times. The rule it replaces (twice each arm's single base-repeat difference,
    summed over the arms, no minimum) missed in 11% of draws without outliers; CI met one such miss."""
    rng = np.random.default_rng(20261206)
    plan = SimPlan(p1=4, p2=68, g1=2, g2=66, repeats=repeats)
    misses = 0
    draws = 1000
    widths = []
    for _ in range(draws):
        fa = figures_from_runs("A", plan, _aa_runs(rng, plan, 3e5, outlier))
        fb = figures_from_runs("B", plan, _aa_runs(rng, plan, 3e5, outlier))
        for check in compare(fa, fb, {"all": 1.0}):
            ir = next(f for f in check.figures if f.name == "instructions")
            misses += not ir.lo <= 1.0 <= ir.hi
            widths.append(ir.resolution_pct)
    assert 1 - misses / (2 * draws) >= coverage, misses
    if not outlier:
        # the width is t(6) = 3.7 on the jitter: 2 sigma over the 64-token span (12.8 M), 4.7%
        expected = scipy.stats.t.ppf(0.995, 6) * 100 * 2 * 3e5 / 12.8e6
        assert 0.7 * expected <= float(np.median(widths)) <= 1.3 * expected


def _result(a_dec: float, b_dec: float, *, a_pre: float = 1e6, b_pre: float = 1e6, jitter: float = 0.0) -> SimResult:
    plan = SimPlan(p1=8, p2=24, g1=2, g2=6)
    fa = figures_from_runs("A", plan, _runs(5e9, a_pre, a_dec, plan, jitter))
    fb = figures_from_runs("B", plan, _runs(5e9, b_pre, b_dec, plan, jitter))
    return SimResult(a=fa, b=fb, checks=tuple(compare(fa, fb, {"prefill": 3, "decode": 3})), plan=plan,
                     level="haswell", valgrind="valgrind-3.19.0", seconds=1.0)


def test_compare_fails_a_code_path_regression_beyond_the_gate_and_passes_one_within() -> None:
    slow = _result(4e6, 4e6 * 1.04)  # B executes 4% more per decoded token
    dec = slow.check("decode")
    assert dec is not None and dec.verdict == "FAILED" and dec.speed == pytest.approx(1 / 1.04)
    assert dec.ir_ratio == pytest.approx(1.04)
    ok = _result(4e6, 4e6 * 1.02)
    assert ok.check("decode").verdict == "passed"  # type: ignore[union-attr]
    assert ok.check("prefill").verdict == "passed"  # type: ignore[union-attr]
    assert "| decode |" in ok.markdown() and "haswell" in ok.markdown()


def test_an_instruction_regression_hidden_by_simulated_misses_fails_on_instructions() -> None:
    # decode dominated by last-level misses (as SmolLM2's is: 63% of its estimate): B executes 2% more
    # instructions per token and no more misses, which moves the cycle estimate by well under 1%
    plan = SimPlan(p1=8, p2=24, g1=2, g2=6)

    def runs(per_gen_ir: float) -> list[SimRun]:
        return [SimRun(role=role, pn=pn, gn=gn, seconds=1.0, env_pad=0,
                       counts=Counts({"Ir": 4e9 + 1e6 * pn + per_gen_ir * gn, "DLmr": 1.7e6 * gn}))
                for role, pn, gn in plan.shapes()]

    fa, fb = figures_from_runs("A", plan, runs(1e8)), figures_from_runs("B", plan, runs(1.02e8))
    dec = next(c for c in compare(fa, fb, {"decode": 1}) if c.metric == "decode")
    cycles = next(f for f in dec.figures if f.name == "estimated cycles")
    assert cycles.speed > 0.99 and cycles.verdict(0.99) == "passed"
    assert dec.verdict == "FAILED" and dec.decided_by == "instructions"
    assert dec.speed == pytest.approx(1 / 1.02)


def test_every_run_of_a_measurement_shares_one_environment_size(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from harness.bench import simulation

    pads: list[int] = []

    def fake_run(target, role, pn, gn, workdir, *, env_pad, timeout=0.0):  # type: ignore[no-untyped-def]
        pads.append(env_pad)
        return SimRun(role=role, pn=pn, gn=gn, seconds=0.0, env_pad=env_pad,
                      counts=_counts(5e9 + 1e6 * pn + 4e6 * gn))

    class T:
        def __init__(self, name: str) -> None:
            self.name = name

        def describe(self) -> dict[str, str]:
            return {}

    warmed: list[tuple[str, int]] = []
    monkeypatch.setattr(simulation, "run_one", fake_run)
    monkeypatch.setattr(simulation, "warm_up", lambda t, plan, workdir, *, env_pad: warmed.append((t.name, env_pad)))
    simulation.measure([T("a"), T("b")], SimPlan(p1=8, p2=24, g1=2, g2=6), tmp_path, jobs=1)
    assert [name for name, _ in warmed] == ["a", "b"]  # each target once, natively, before any counted run
    assert len(pads) == 12 and len(set(pads)) == 1 and 0 <= pads[0] <= 4096  # 2 arms x 3 shapes x 2 runs


def test_resolution_widens_the_interval_until_the_gate_cannot_be_told() -> None:
    # B 3% slower exactly at the floor, with a large run-to-run jitter: undecided, never passed
    r = _result(4e6, 4e6 / 0.97, jitter=2e5)
    assert r.check("decode").verdict == "undecided"  # type: ignore[union-attr]


def _wall(label: str, point: float, lo: float, hi: float, status: str, pct: float = 3.0) -> GateResult:
    iv = Interval(point=point, lo=lo, hi=hi)
    return GateResult(checks=(GateCheck(key=label, label=label, threshold_pct=pct, speed=iv, status=status,
                                        message="", halfwidth_pct=100 * (hi - lo) / 2 / point),))


def test_verdict_a_resolved_wall_clock_slowdown_fails_whatever_simulation_says() -> None:
    d = verdict.decide(_wall("decode @ c=1", 0.90, 0.88, 0.92, "FAILED"), _result(4e6, 4e6))
    assert [x.status for x in d] == ["FAILED"] and d[0].instrument == "walltime"


def test_verdict_simulation_fails_a_regression_wall_clock_cannot_resolve() -> None:
    d = verdict.decide(_wall("decode @ c=1", 0.97, 0.90, 1.04, "undecided"), _result(4e6, 4e6 * 1.05))
    assert d[0].status == "FAILED" and d[0].instrument == "simulation"


def test_verdict_undecided_wall_clock_beside_a_passing_simulation_is_a_warning_naming_the_noise() -> None:
    d = verdict.decide(_wall("decode @ c=1", 0.99, 0.94, 1.04, "undecided"), _result(4e6, 4e6))
    assert d[0].status == "warning" and d[0].instrument == "simulation"
    assert "resolves ±5.1% on this host" in d[0].reason and "inside the wall-clock interval" in d[0].reason
    assert verdict.overall(d) == "warning"


def test_verdict_nothing_decided_is_undecided_never_passed() -> None:
    d = verdict.decide(_wall("aggregate @ c=4", 0.99, 0.90, 1.08, "undecided"), None)
    assert d[0].status == "undecided" and d[0].instrument is None
    assert verdict.overall(d) == "undecided"
    # the aggregate's only simulated proxy is the one-stream decode ratio: a warning only when it lies inside
    inside = verdict.decide(_wall("aggregate @ c=4", 0.99, 0.90, 1.08, "undecided"), _result(4e6, 4e6))
    assert inside[0].status == "warning"
    outside = verdict.decide(_wall("aggregate @ c=4", 0.85, 0.80, 0.98, "undecided"), _result(4e6, 4e6))
    assert outside[0].status == "undecided"


def test_verdict_simulation_alone_decides_with_gate_percents() -> None:
    d = verdict.decide(None, _result(4e6, 4e6), gate_pcts={"prefill": 3, "decode": 3})
    assert [(x.gate, x.status, x.instrument) for x in d] == [("prefill @ c=1", "passed", "simulation"),
                                                           ("decode @ c=1", "passed", "simulation")]


def test_a_figure_below_its_own_noise_decides_nothing() -> None:
    """An A/A on a tiny model's 8-token spans measured prefill 0.0955x +-745% (interval [-0.62, 0.81]): a
    resolution of 100% or more is no measurement of the ratio, so it can neither fail nor pass a gate."""
    from harness.bench.simulation import UNRESOLVED_PCT, _figure

    noisy = _figure("estimated cycles", 45958.75, 481416.625, 745.1)
    assert noisy.hi < 0.99 and noisy.verdict(0.99) == "undecided"
    assert _figure("instructions", 100.0, 120.0, 1.0).verdict(0.99) == "FAILED"
    assert _figure("instructions", 100.0, 100.1, 0.5).verdict(0.99) == "passed"
    assert _figure("instructions", 100.0, 120.0, UNRESOLVED_PCT).verdict(0.99) == "undecided"


class _Named:
    """A simulation target called ``name`` whose work per token is ``cost`` (what its command carries)."""

    def __init__(self, name: str, cost: float, artifact: str) -> None:
        self.name, self.cost, self.artifact = name, cost, artifact

    def command(self, pn: int, gn: int) -> Any:
        from harness.bench.simulation import SimCommand

        return SimCommand(argv=(f"{self.artifact}/bin/llama-bench", str(pn), str(gn), str(self.cost)), env={})

    def describe(self) -> dict[str, str]:
        return {"artifact": self.artifact}


def test_two_builds_of_one_pin_with_one_name_keep_their_own_figures(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """Issue 61, point 7: both arms named after the artifact folder (llamacpp-<pin>-cpu) pooled their runs
    by name and read 1.0000x whatever B did. Runs are keyed by target: a 3% regression reads as one."""
    from harness.bench import simulation

    def fake_run(target, role, pn, gn, workdir, *, env_pad, timeout=0.0):  # type: ignore[no-untyped-def]
        assert workdir.parent == tmp_path  # each target's logs in a folder of its own
        return SimRun(role=role, pn=pn, gn=gn, seconds=0.0, env_pad=env_pad,
                      counts=_counts(5e9 + target.cost * (1e6 * pn + 4e6 * gn)))

    monkeypatch.setattr(simulation, "run_one", fake_run)
    monkeypatch.setattr(simulation, "warm_up", lambda t, plan, workdir, *, env_pad: None)
    plan = SimPlan(p1=8, p2=24, g1=2, g2=6)
    base = _Named("llamacpp-2026.10.11549-cpu", 1.0, "/dist/a/llamacpp-2026.10.11549-cpu")
    regressed = _Named("llamacpp-2026.10.11549-cpu", 1.03, "/dist/b/llamacpp-2026.10.11549-cpu")
    result = simulation.simulate(base, regressed, plan, tmp_path, gate={"prefill": 1.0, "decode": 1.0})
    for check in result.checks:
        ins = next(f for f in check.figures if f.name == "instructions")
        assert ins.speed == pytest.approx(1 / 1.03, rel=1e-6), check.metric
    # one target twice is an A/A: refused unless asked for
    with pytest.raises(BenchError, match="one target"):
        simulation.simulate(base, _Named("other name", 1.0, base.artifact), plan, tmp_path)
    aa = simulation.simulate(base, _Named("other name", 1.0, base.artifact), plan, tmp_path, aa=True)
    assert all(f.speed == pytest.approx(1.0) for c in aa.checks for f in c.figures)
