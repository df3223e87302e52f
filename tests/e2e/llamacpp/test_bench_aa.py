"""A/A on the real backend arm: an arm against itself shows no difference.

It runs on SmolLM2 (HARNESS_MODEL), not the 0.5 MB tiny model: there a measurement is ~1 ms
(TTFT 0.7 ms, 32 tokens in 2-4 ms), and two worker processes of the same arm differed by a
steady 15-20% in decode tok/s (scheduling on 2 cores), so the gate failed on timing noise,
not on the runner. With SmolLM2 at p128/g64 a measurement is ~1 s; three runs here gave
decode ratios 1.020 [0.946, 1.101], 1.020 [0.801, 1.300], 0.985 [0.773, 1.255].
"""

from __future__ import annotations

from pathlib import Path

from harness.bench.abba import BenchConfig, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.report import write_report
from harness.bench.stats import analyze

from ..conftest import model_path, require_variant


def test_aa_interval_contains_one(variant: str, tmp_path: Path) -> None:
    require_variant(variant)
    model = model_path("HARNESS_MODEL")
    arm = ArmSpec.parse(f"backend:model={model},variant={variant},threads=2,n_ctx=512")
    result = run_abba(arm, arm, BenchConfig(blocks=4, pn=128, gn=64, concurrency=(1,)), aa=True, name="aa-smollm2")
    # 99%: a statistical gate in CI must rarely cry wolf (family-wise over the metrics)
    analysis = analyze(result.samples, aa=True, confidence=0.99)
    assert len(result.samples) == 8
    # What the release gate asks (#18): an A/A run never shows a difference beyond 5% with 99%
    # confidence, in either direction. Not "every interval contains 1.0": two identical worker
    # processes can differ by a steady ~1% (memory layout, placement; one CI run gave decode
    # 0.992 [0.989, 0.996]) that interleaving cannot cancel, and 4 blocks on a loaded 2-core host
    # give intervals of +-6%. An arm mix-up or a broken ratio lands far beyond 5%.
    intervals = {k: (v.lo, v.hi) for k, v in analysis.aa_intervals.items()}
    assert intervals, analysis
    assert not [k for k, (lo, hi) in intervals.items() if lo > 1.05 or hi < 0.95], intervals
    files = write_report(result, out=tmp_path, analysis=analysis, plots=False)
    assert files.results.is_file() and files.markdown.is_file()
