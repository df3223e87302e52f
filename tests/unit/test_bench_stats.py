"""Bench statistics: intervals, outliers (modified z), drift, wide-interval warnings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.bench.abba import BenchConfig, run_abba
from harness.bench.arms import ArmSpec, Sample
from harness.bench.stats import (
    analyze,
    bootstrap_mean_ci,
    geometric_mean,
    modified_z,
    outlier_indices,
    ratio_interval,
    t_mean_ci,
)

FAKE = ("harness_plugins.bench_fake",)


def _samples(a: str, b: str, blocks: int = 4) -> list[Sample]:
    r = run_abba(ArmSpec.parse(a), ArmSpec.parse(b), BenchConfig(blocks=blocks), isolate=False,
                 extra_plugins=FAKE)
    return list(r.samples)


def test_geometric_mean_and_intervals() -> None:
    assert geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    logs = np.log([0.9, 1.1, 1.0, 1.05, 0.95])
    assert bootstrap_mean_ci(logs, seed=3) == bootstrap_mean_ci(logs, seed=3)  # seeded
    lo, hi = t_mean_ci(logs)
    assert lo < float(logs.mean()) < hi
    hull, boot, tint, method = ratio_interval([0.9, 1.1, 1.0, 1.05, 0.95])
    assert None not in (hull.lo, hull.hi, boot.lo, boot.hi, tint.lo, tint.hi)
    assert hull.lo == min(boot.lo, tint.lo) and hull.hi == max(boot.hi, tint.hi)  # type: ignore[type-var]
    assert hull.point == pytest.approx(geometric_mean([0.9, 1.1, 1.0, 1.05, 0.95]))
    assert method


def test_four_same_sign_blocks_do_not_make_a_claim_by_themselves() -> None:
    # a percentile bootstrap of 4 ratios all above 1 excludes 1.0; the t hull must not
    ratios = [1.001, 1.03, 1.002, 1.035]
    hull, boot, _, method = ratio_interval(ratios)
    assert boot.lo is not None and boot.lo > 1.0
    assert hull.contains(1.0) and method.startswith("student-t")


def test_single_block_has_no_interval() -> None:
    hull, *_ = ratio_interval([1.2])
    assert hull.lo is None and hull.hi is None and not hull.contains(1.2)


def test_modified_z_flags_a_three_times_slower_value() -> None:
    values = [25.0, 25.2, 25.0 / 3, 24.9]
    z = modified_z(values)
    assert abs(z[2]) > 3.5 and max(abs(z[i]) for i in (0, 1, 3)) < 3.5
    assert outlier_indices(values) == [2]
    assert outlier_indices([25.0, 25.0, 25.0, 25.0]) == []
    # MAD of 0 falls back to the mean absolute deviation instead of dividing by zero
    assert np.isfinite(modified_z([1.0, 1.0, 1.0, 5.0])).all()
    # a quiet host's 0.3% wobble is not an outlier, whatever its z
    assert outlier_indices([25.0, 25.01, 25.0, 25.08]) == []


def test_outlier_block_injected_three_times_slower_is_flagged() -> None:
    an = analyze(_samples("fake", "fake:outlier_block=2,outlier_factor=3"))
    for key in ("decode_tps@c1", "ttft_ms@c1", "aggregate_tps@c4"):
        ms = an.metrics[key]
        assert ms.arms["B"].outliers == (2,), key
        assert ms.arms["A"].outliers == (), key
        ratio = ms.ratio
        assert ratio is not None and ratio.without_outliers is not None
        assert ratio.without_outliers.contains(1.0)
    messages = [f.message for f in an.findings if f.metric == "decode_tps@c1"]
    assert any("arm B block 2" in m and "outlier" in m for m in messages)
    assert any("too wide" in m for m in messages)


def test_drift_of_the_host_is_flagged_and_cancels_in_the_ratio() -> None:
    an = analyze(_samples("fake:drift=0.05", "fake:drift=0.05"))
    ms = an.metrics["decode_tps@c1"]
    assert set(ms.drift) == {"A", "B"}
    assert all(d.flagged and d.change_pct < -10 for d in ms.drift.values())
    assert ms.ratio is not None and ms.ratio.ratio.contains(1.0)
    assert any("drift" in f.message and "both arms" in f.message for f in an.findings)


def test_drift_of_one_arm_is_flagged_for_that_arm() -> None:
    an = analyze(_samples("fake", "fake:drift=0.06"))
    drift = an.metrics["decode_tps@c1"].drift
    assert drift["B"].flagged and not drift["A"].flagged
    assert any("one arm moves" in f.message for f in an.findings if f.metric == "decode_tps@c1")


def test_steady_runs_have_no_drift_or_outlier_findings() -> None:
    an = analyze(_samples("fake", "fake:slowdown=1.1"))
    assert not any(d.flagged for ms in an.metrics.values() for d in ms.drift.values())
    assert not any(ms.arms[r].outliers for ms in an.metrics.values() for r in ms.arms)


def test_wide_interval_and_straddling_claim_are_warned() -> None:
    an = analyze(_samples("fake:noise=0.08", "fake:noise=0.08,slowdown=1.03"))
    msgs = [f.message for f in an.findings if f.metric == "decode_tps@c1"]
    assert any("too wide to support a claim" in m and "--blocks" in m for m in msgs)
    few = analyze(_samples("fake", "fake", blocks=2))
    assert few.findings[0].metric == "" and "only 2 block(s)" in few.findings[0].message


def test_analysis_serialises() -> None:
    an = analyze(_samples("fake", "fake", blocks=3), aa=True)
    d = an.as_dict()
    assert d["aa"] is True and d["blocks"] == 3
    assert math.isclose(d["metrics"]["decode_tps@c1"]["ratio"]["ratio"]["point"],
                        an.metrics["decode_tps@c1"].ratio.ratio.point)  # type: ignore[union-attr]


def _timed(arm: str, block: int, client_tps: float, engine_tps: float, ttft_s: float, engine_ttft_s: float,
           c: int = 1) -> Sample:
    return Sample(arm=arm, block=block, position=0, sequence=0, concurrency=c, pn=8, gn=8, ttft_s=ttft_s,
                  decode_tps=client_tps, aggregate_tps=client_tps, peak_rss_bytes=1, started_at=0.0, finished_at=1.0,
                  extra={"engine_decode_tps": engine_tps, "engine_ttft_s": engine_ttft_s})


def test_engine_side_note_places_a_gap_in_the_engines_or_in_delivery() -> None:
    from harness.bench.stats import engine_side_findings

    # B's engine is 10% faster and its client reads at the engine's rate: the gap is the engines'
    same = [s for b in range(4) for s in (_timed("A", b, 100.0, 100.0, 0.100, 0.100),
                                          _timed("B", b, 110.0, 110.0, 0.102, 0.100))]
    (f,) = engine_side_findings(same)
    assert f.kind == "engine-side" and f.metric == "decode_tps@c1"
    assert "1.100 as read, 1.100 by the engines" in f.message and "B 2.0 ms" in f.message
    assert "in the engines" in f.message
    # equal engines, B's client reads 8% slower: delivery
    slow = [s for b in range(4) for s in (_timed("A", b, 100.0, 100.0, 0.1, 0.1), _timed("B", b, 92.0, 100.0, 0.1, 0.1))]
    (g,) = engine_side_findings(slow)
    assert "0.920 as read, 1.000 by the engines" in g.message and "client/engine rate A 1.000, B 0.920" in g.message
    assert "delivery for -8.0%, the engines for +0.0%" in g.message
    # arms without the engine's figures give no note; at c > 1 no TTFT is compared
    plain = [Sample(**{**vars(s), "extra": {}}) for s in same]
    assert engine_side_findings(plain) == []
    (h,) = engine_side_findings([_timed("A", 0, 100.0, 100.0, 1.0, 0.5, c=16), _timed("B", 0, 100.0, 100.0, 1.0, 0.9, c=16)])
    assert "TTFT" not in h.message and h.metric == "decode_tps@c16"


def _aa_draw(rng: np.random.Generator, blocks: int, *, order: float = 0.0) -> list[Sample]:
    """An A/A run of independent lognormal noise (sd 4% per figure), ABBA order; ``order`` makes the
    second turn of every block that much faster (an order effect ABBA must cancel)."""
    out = []
    for b in range(blocks):
        for pos, role in enumerate(("A", "B") if b % 2 == 0 else ("B", "A")):
            f = np.exp(rng.normal(0.0, 0.04, 3) + (order if pos else 0.0))
            out.append(Sample(arm=role, block=b, position=pos, sequence=2 * b + pos, concurrency=1, pn=128,
                              gn=128, ttft_s=0.1 / f[0], decode_tps=100.0 * f[1], aggregate_tps=80.0 * f[2],
                              peak_rss_bytes=0, started_at=0.0, finished_at=0.0))
    return out


@pytest.mark.parametrize(("order", "lo"), [(0.0, 22), (0.03, 0)])
def test_aa_false_alarm_rate_is_the_family_wise_level(order: float, lo: int) -> None:
    """The A/A check's false alarms, counted over 400 seeded A/A runs of 8 blocks at 90% family-wise
    (3 metrics, 96.7% each): about 40 runs fail on independent noise; an interval too narrow (a
    bootstrap alone at 8 blocks) or too wide (a check that cannot fail) leaves the binomial bounds.
    A 3% order effect cancels in ABBA and widens the intervals (19 alarms): never more than nominal.
    A single A/A run in the test command is one draw of this rate, which is why the e2e spec does not
    assert that its intervals hold 1.0."""
    rng = np.random.default_rng(2026)
    runs = 400
    alarms = sum(not analyze(_aa_draw(rng, 8, order=order), aa=True, confidence=0.90, resamples=1000).aa_ok
                 for _ in range(runs))
    # Binomial(400, 0.10): mean 40, sd 6; [22, 60] is beyond 3 sd either side
    assert lo <= alarms <= 60, alarms
