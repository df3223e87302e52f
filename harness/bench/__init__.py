"""Benchmarks: arms in worker processes, ABBA blocks, paired statistics, roofline, reports.

``arms`` runs one arm per worker process, ``abba`` interleaves two arms in ABBA
blocks (a fixed count, or adaptively until the headline intervals are narrow),
``stats`` turns the raw samples into paired ratios with intervals and warnings,
``gate`` states the headline as speed ratios and applies ``--fail-on-slower``,
``system`` records the machine's state, ``roofline`` measures this host's
bandwidth and GEMM figures, ``report`` writes ``reports/<timestamp>-<name>/``
(``markdown`` renders it) and ``session`` runs all of it for the CLI and qualify.
"""

from __future__ import annotations

from harness.bench.abba import BenchConfig, BenchResult, block_order, run_abba
from harness.bench.arms import Arm, ArmSpec, Sample

__all__ = ["Arm", "ArmSpec", "BenchConfig", "BenchResult", "Sample", "block_order", "run_abba"]
