"""A/A on the real binding arm: the runner end to end, and the simulated instrument's resolution.

The wall-clock spec checks what the runner does with a real arm (a fresh worker per arm per block,
ABBA order, family-wise A/A intervals computed for every metric, the report written), not whether this
run's intervals hold 1.0. That is a statistical property with a false-alarm rate of its own: 1% at the
99% family-wise level on independent noise (tests/unit/test_bench_stats.py measures it on seeded
draws), more on a shared VM whose bursts hit one arm of a block. A single draw of it in the test
command failed CI twice (a 20% half-width bound that read 60.5%, issue 54; then aggregate
1.0775 [1.0037, 1.1567] at 99.67% per metric, 2026-12-07). The rate on a real host is what
``nox -s bench-error-rates`` measures (20 A/A and 20 calibrated 3% comparisons, a quiet host).

Wall-clock runs on SmolLM2 (HARNESS_MODEL), not the 0.5 MB tiny model: there a measurement is
~1 ms, and two worker processes of the same arm differed by a steady 15-20% in decode tok/s.
Simulation counts what runs, not how long, so it takes the tiny model (HARNESS_TINY_MODEL) and run
lengths whose differences dwarf the run-to-run jitter: its A/A does assert the interval holds 1.0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench.abba import BenchConfig, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.report import write_report
from harness.bench.stats import analyze
from harness.qualify.specs import model_path, require_variant

# the bench runner's own A/A: qualification deselects it (its bench stages are the instrument, on the pin)
pytestmark = pytest.mark.harness_selftest


def test_aa_run_on_the_binding_arm(variant: str, tmp_path: Path) -> None:
    require_variant(variant)
    model = model_path("HARNESS_MODEL")
    arm = ArmSpec.parse(f"in-process:model={model},variant={variant},threads=2,n_ctx=512,max_num_seqs=1")
    # 4 blocks (two AB/BA pairs), a fresh worker per arm per block (the default)
    config = BenchConfig(blocks=4, pn=128, gn=128, concurrency=(1,))
    result = run_abba(arm, arm, config, aa=True, name="aa-smollm2")
    assert [(s.block, s.arm) for s in result.samples] == [(0, "A"), (0, "B"), (1, "B"), (1, "A"),
                                                         (2, "A"), (2, "B"), (3, "B"), (3, "A")]
    # one worker per arm per block: the process index is the block's
    assert all(s.process == s.block for s in result.samples)
    assert all(s.decode_tps > 0 and s.ttft_s > 0 and s.aggregate_tps > 0 for s in result.samples)
    analysis = analyze(result.samples, aa=True, confidence=0.99)
    # a family-wise interval for every metric, each with a width, and the verdict is what they say
    assert set(analysis.aa_intervals) == {"ttft_ms@c1", "decode_tps@c1", "aggregate_tps@c1"}, analysis
    assert all(v.half_width_pct is not None and v.lo is not None and v.hi is not None and v.lo <= v.point <= v.hi
               for v in analysis.aa_intervals.values()), analysis.aa_intervals
    assert analysis.aa_confidence is not None and analysis.aa_confidence > 0.99
    assert analysis.aa_ok == all(v.contains(1.0) for v in analysis.aa_intervals.values())
    missed = {f.metric for f in analysis.findings if f.kind == "aa"}
    assert missed == {k for k, v in analysis.aa_intervals.items() if not v.contains(1.0)}
    files = write_report(result, out=tmp_path, analysis=analysis, plots=False)
    assert files.results.is_file() and files.markdown.is_file()
    assert "A/A" in files.markdown.read_text()


def test_simulated_aa_is_within_the_resolution(variant: str, tmp_path: Path) -> None:
    """The same arm twice under cachegrind: each figure's ratio lies within the resolution the
    instrument reports for it (the interval holds 1.0), and no gate fails."""
    from harness.bench import simulation
    from harness.core.errors import HostError

    require_variant(variant)
    try:
        simulation.valgrind()
    except HostError as e:
        pytest.skip(str(e))
    model = model_path("HARNESS_TINY_MODEL")
    level = simulation.level_for_host()
    opts = {"engine": "llamacpp", "model": str(model), "variant": variant}
    a = simulation.target_for("in-process", {**opts, "name": "A"}, level=level)
    b = simulation.target_for("in-process", {**opts, "name": "B"}, level=level)
    # spans of 192 prompt and 64 generated tokens (~25-40 M instructions each on the tiny model) against a
    # run-to-run jitter of ~0.3 M and, one run in ten or so, 3-6 M more: each shape runs three times and
    # keeps its least. The 8-token spans this test once used (1.7 M) were within one outlier: an A/A read
    # 2.87x inside a claimed +-44% (CI, 2026-12-06). On synthetic jitter of that shape, a 99% interval
    # from three runs per shape holds 1.0 in 99.3% of draws; at 99.9% per figure the four figures
    # rarely miss together.
    plan = simulation.SimPlan(p1=4, p2=196, g1=2, g2=66, repeats=2)
    result = simulation.simulate(a, b, plan, tmp_path, gate={"all": 1.0}, level=level, confidence=0.999,
                                 aa=True)
    assert {c.metric for c in result.checks} == {"prefill", "decode"}
    for check in result.checks:
        for figure in check.figures:
            # the A/A interval holds 1.0
            assert figure.resolution_pct >= 0, check.text()
            assert figure.lo <= 1.0 <= figure.hi, check.text()
        # and measures something: instructions resolve (an interval of 100% or more holds anything)
        instructions = next(f for f in check.figures if f.name == "instructions")
        assert instructions.resolution_pct < simulation.UNRESOLVED_PCT, check.text()
        assert check.verdict != "FAILED", check.text()
