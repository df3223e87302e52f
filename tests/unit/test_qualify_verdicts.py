"""Qualification's bench verdicts per gate (harness.qualify.stages.bench.bench_stage_result): which
instrument decided each gate, warnings for what simulation passed while wall-clock could not
resolve it, never a pass that nothing decided; and qualify.md's verdict block on its first screen."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.bench.gate import GateCheck, GateResult
from harness.bench.simulation import SimPlan, SimResult, SimRun, compare, figures_from_runs
from harness.bench.stats import Interval
from harness.qualify.report import render_markdown
from harness.qualify.result import StageFailed, StageUndecided
from harness.qualify.stages.bench import bench_stage_result


def _sim(b_decode: float) -> SimResult:
    plan = SimPlan(p1=8, p2=24, g1=2, g2=6)

    def runs(dec: float) -> list[SimRun]:
        from harness.bench.simulation import Counts

        return [SimRun(role=r, pn=p, gn=g, seconds=1.0, env_pad=0, counts=Counts({"Ir": 4e9 + 1e6 * p + dec * g}))
                for r, p, g in plan.shapes()]

    fa, fb = figures_from_runs("A", plan, runs(4e6)), figures_from_runs("B", plan, runs(b_decode))
    return SimResult(a=fa, b=fb, checks=tuple(compare(fa, fb, {"prefill": 3, "decode": 3})), plan=plan,
                     level="haswell", valgrind="valgrind-3.19.0", seconds=1.0)


def _outcome(tmp_path: Path, status: str, point: float, lo: float, hi: float) -> Any:
    md = tmp_path / "report.md"
    md.write_text("# bench\n\n## Headline\n\nx\n")
    iv = Interval(point=point, lo=lo, hi=hi)
    checks = tuple(GateCheck(key=k, label=label, threshold_pct=3.0, speed=iv, status=status, message="",
                             halfwidth_pct=100 * (hi - lo) / 2 / point)
                   for k, label in (("ttft_ms@c1", "prefill @ c=1"), ("decode_tps@c1", "decode @ c=1")))
    gate = GateResult(checks=checks)
    return SimpleNamespace(files=SimpleNamespace(directory=tmp_path, markdown=md), gate=gate, headline=(),
                           result=SimpleNamespace(system=None, stop=None, blocks_run=4, aa=False),
                           analysis=SimpleNamespace(aa_ok=True), passed=gate.passed,
                           summary=lambda: "headline")


def test_simulation_decides_what_wall_clock_leaves_undecided_as_a_warning(tmp_path: Path) -> None:
    r = bench_stage_result(_outcome(tmp_path, "undecided", 0.99, 0.94, 1.04), tmp_path, "m.gguf", sim=_sim(4e6))
    assert r.status == "warning"
    assert {d["instrument"] for d in r.data["decisions"]} == {"simulation"}
    assert "decided: prefill @ c=1 warning (simulation)" in r.summary


def test_a_simulated_regression_fails_the_stage_even_when_wall_clock_is_undecided(tmp_path: Path) -> None:
    with pytest.raises(StageFailed) as e:
        bench_stage_result(_outcome(tmp_path, "undecided", 0.99, 0.94, 1.04), tmp_path, "m.gguf", sim=_sim(4.4e6))
    assert not isinstance(e.value, StageUndecided)
    decode = next(d for d in e.value.result.data["decisions"] if d["gate"] == "decode @ c=1")
    assert decode["status"] == "FAILED" and decode["instrument"] == "simulation"


def test_nothing_decided_is_undecided_unless_advisory_and_then_says_so(tmp_path: Path) -> None:
    with pytest.raises(StageUndecided):
        bench_stage_result(_outcome(tmp_path, "undecided", 0.99, 0.94, 1.04), tmp_path, "m.gguf")
    r = bench_stage_result(_outcome(tmp_path, "undecided", 0.99, 0.94, 1.04), tmp_path, "m.gguf", advisory=True,
                           sim_note="no simulation target for the xllamacpp arm")
    assert r.status == "warning" and "advisory, not a pass of the gate" in r.summary
    assert "passed" not in r.data["advisory"]


def test_a_resolved_wall_clock_slowdown_fails_even_an_advisory_stage(tmp_path: Path) -> None:
    with pytest.raises(StageFailed):
        bench_stage_result(_outcome(tmp_path, "FAILED", 0.90, 0.88, 0.92), tmp_path, "m.gguf", advisory=True)


def test_the_verdict_block_opens_qualify_md_with_each_gate_and_its_instrument(tmp_path: Path) -> None:
    r = bench_stage_result(_outcome(tmp_path, "undecided", 0.99, 0.94, 1.04), tmp_path, "m.gguf", sim=_sim(4e6))
    doc = {"engine": "llamacpp", "pin": "0.3.36", "upstream": {"build": 1, "commit": "abc"}, "passed": True,
           "started_at": "now", "host": {"os": "Linux", "arch": "x86_64", "cpu_model": "EPYC", "microarch": "zen3",
                                         "cores": 2, "memory_bytes": 2**34},
           "stages": [{"name": "build", "status": "passed", "seconds": 10.0, "summary": "built", "data": {}},
                      {"name": "ceiling", "status": r.status, "seconds": 5.0, "summary": r.summary, "data": r.data}]}
    md = render_markdown(doc)
    first = md.splitlines()[:60]
    assert first[0] == "# Qualification: llamacpp 0.3.36 (PASSED with 1 warning)"
    assert "## Verdict" in first
    rows = [ln for ln in first if ln.startswith("| ceiling: ")]
    assert len(rows) == 2 and all("| warning | simulation |" in ln for ln in rows)
    assert "/root" not in "\n".join(first)
