"""A/A on the real binding arm: an arm against itself shows no difference, by either instrument.

These test the instruments' properties, not this host's noise: every wall-clock A/A interval holds
1.0, and the simulated A/A ratio lies within the instrument's resolution (its interval holds 1.0).
How wide a wall-clock interval is on a given host belongs to benchmarks and their reports: a
20% half-width bound measured 60.5% on a 2-core host with other work running and failed the test
command after 18 minutes (issue 54).

Wall-clock runs on SmolLM2 (HARNESS_MODEL), not the 0.5 MB tiny model: there a measurement is
~1 ms (TTFT 0.7 ms, 32 tokens in 2-4 ms), and two worker processes of the same arm differed by a
steady 15-20% in decode tok/s (scheduling on 2 cores), so the check failed on timing noise, not
on the runner. With SmolLM2 at p128/g256 decode is ~1 s per measurement. Simulation counts what
runs, not how long, so it takes the tiny model (HARNESS_TINY_MODEL) and run lengths whose differences
dwarf the run-to-run jitter.
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


def test_aa_interval_contains_one(variant: str, tmp_path: Path) -> None:
    require_variant(variant)
    model = model_path("HARNESS_MODEL")
    arm = ArmSpec.parse(f"in-process:model={model},variant={variant},threads=2,n_ctx=512,max_num_seqs=1")
    # a fresh worker per arm per block (the default): each block's ratio carries its own draw of the
    # per-process offset that one long-lived worker per arm turned into a steady 1-3% "difference"
    # 6 blocks, more (up to 14) on a host whose processes spread wider, as a user would (--until-halfwidth):
    # a CI run on an AMD Zen 4 VM drew a 99% decode half-width of 20.3% from 6 blocks
    config = BenchConfig(blocks=6, pn=128, gn=256, concurrency=(1,), until_halfwidth=8.0, max_blocks=14)
    result = run_abba(arm, arm, config, aa=True, name="aa-smollm2")
    blocks = len({s.block for s in result.samples})
    assert 6 <= blocks <= 14 and len(result.samples) == 2 * blocks
    assert sorted({s.process for s in result.samples}) == list(range(blocks))
    # 99%: a statistical gate in CI must rarely cry wolf (family-wise over the metrics)
    analysis = analyze(result.samples, aa=True, confidence=0.99)
    intervals = {k: v for k, v in analysis.aa_intervals.items()}
    assert intervals, analysis
    # the A/A check proper: every interval holds 1.0 (no "nothing beyond 5%" slack), whatever its width
    # on this host (a 2-core VM: 99% decode half-widths of 13.9% quiet, 60.5% with other work running;
    # the width is the report's business, issue 54)
    assert all(v.contains(1.0) for v in intervals.values()), intervals
    assert all(v.half_width_pct is not None for v in intervals.values()), intervals
    files = write_report(result, out=tmp_path, analysis=analysis, plots=False)
    assert files.results.is_file() and files.markdown.is_file()


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
