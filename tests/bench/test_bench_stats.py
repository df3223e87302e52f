"""How long the bench statistics take on 1000 samples (pytest-benchmark; not collected by default).

Run: python -m pytest tests/bench/test_bench_stats.py -p no:cacheprovider
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from harness.bench.abba import BenchConfig, block_order
from harness.bench.arms import Sample
from harness.bench.stats import Analysis, analyze, ratio_interval

BLOCKS = 250  # x 2 arms x 2 concurrency levels = 1000 samples


@pytest.fixture(scope="module")
def samples() -> list[Sample]:
    rng = np.random.default_rng(0)
    config = BenchConfig(blocks=BLOCKS)
    out: list[Sample] = []
    for seq, (block, role) in enumerate(block_order(BLOCKS)):
        slow = 1.05 if role == "B" else 1.0
        for c in config.concurrency:
            j = np.exp(rng.normal(0.0, 0.01, size=3))
            out.append(Sample(arm=role, block=block, position=seq % 2, sequence=seq, concurrency=c,
                              pn=512, gn=128, ttft_s=0.5 * c * slow * j[0], decode_tps=25 / slow * j[1],
                              aggregate_tps=25 * c / slow * j[2], peak_rss_bytes=1 << 28,
                              started_at=float(seq), finished_at=seq + 0.5))
    assert len(out) == 1000
    return out


def test_analyze_1000_samples(benchmark: Any, samples: list[Sample]) -> None:
    an: Analysis = benchmark(analyze, samples)
    ratio = an.metrics["decode_tps@c1"].ratio
    assert ratio is not None and ratio.ratio.hi is not None and ratio.ratio.hi < 1.0
    assert benchmark.stats.stats.mean < 5.0, "statistics of 1000 samples must take seconds at most"


def test_bootstrap_interval_1000_ratios(benchmark: Any) -> None:
    ratios = np.exp(np.random.default_rng(1).normal(0.0, 0.02, size=1000))
    hull, *_ = benchmark(ratio_interval, ratios.tolist())
    assert hull.contains(1.0)
