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

# Nothing is imported here: `harness --help` imports harness.cli.bench, and the statistics
# (scipy, numpy) must load only when a benchmark runs. Import from the submodules.
