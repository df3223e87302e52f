"""A/A on the real binding arm: an arm against itself shows no difference.

It runs on SmolLM2 (HARNESS_MODEL), not the 0.5 MB tiny model: there a measurement is ~1 ms
(TTFT 0.7 ms, 32 tokens in 2-4 ms), and two worker processes of the same arm differed by a
steady 15-20% in decode tok/s (scheduling on 2 cores), so the gate failed on timing noise,
not on the runner. With SmolLM2 at p128/g256 decode is ~1 s per measurement.
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
    # the A/A check proper: every interval holds 1.0 (no "nothing beyond 5%" slack any more) ...
    assert all(v.contains(1.0) for v in intervals.values()), intervals
    # ... and narrow enough that holding 1.0 means something. Between fresh processes SmolLM2's decode
    # varies by +-5-8% on a 2-core VM (8 blocks on a quiet host: 95% half-widths 4.2% and 5.2%; a CI run
    # of these 6 blocks: 99% half-width 13.9%): one worker per arm had hidden that spread as a steady
    # "difference". A tight A/A bound needs more blocks than CI affords on this model (issue 32).
    decode = intervals["decode_tps@c1"].half_width_pct
    assert decode is not None and decode <= 20.0, intervals
    files = write_report(result, out=tmp_path, analysis=analysis, plots=False)
    assert files.results.is_file() and files.markdown.is_file()
