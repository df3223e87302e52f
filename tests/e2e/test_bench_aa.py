"""A/A on the real backend arm with the tiny model: an arm against itself shows no difference."""

from __future__ import annotations

from pathlib import Path

from harness.bench.abba import BenchConfig, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.report import write_report
from harness.bench.stats import analyze

from .conftest import model_path, require_variant


def test_aa_interval_contains_one(variant: str, tmp_path: Path) -> None:
    require_variant(variant)
    tiny = model_path("HARNESS_TINY_MODEL")
    arm = ArmSpec.parse(f"backend:model={tiny},variant={variant},threads=2,n_ctx=512")
    result = run_abba(arm, arm, BenchConfig(blocks=4, pn=64, gn=32, concurrency=(1,)), aa=True, name="aa-tiny")
    # 99%: a statistical gate in CI must rarely cry wolf (family-wise over the metrics)
    analysis = analyze(result.samples, aa=True, confidence=0.99)
    assert len(result.samples) == 8
    assert analysis.aa_ok, {k: (v.lo, v.hi) for k, v in analysis.aa_intervals.items()}
    files = write_report(result, out=tmp_path, analysis=analysis, plots=False)
    assert files.results.is_file() and files.markdown.is_file()
