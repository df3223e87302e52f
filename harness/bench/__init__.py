"""Benchmarks: arms in worker processes, ABBA blocks, paired statistics, roofline, reports.

``arms`` runs one arm per worker process, ``abba`` interleaves two arms in ABBA
blocks, ``stats`` turns the raw samples into paired ratios with intervals and
warnings, ``roofline`` measures this host's bandwidth and GEMM figures, and
``report`` writes ``reports/<timestamp>-<name>/``.
"""

from __future__ import annotations

from harness.bench.abba import BenchConfig, BenchResult, block_order, run_abba
from harness.bench.arms import Arm, ArmSpec, Sample

__all__ = ["Arm", "ArmSpec", "BenchConfig", "BenchResult", "Sample", "block_order", "run_abba"]
