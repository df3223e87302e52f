"""The agreement statistics: exact KLD on known distributions, the summary, bootstrap coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.agree.stats import (
    Accumulator,
    PositionStats,
    bootstrap,
    compare_window,
    kl_divergence,
    summarize,
)


def _logits(p: list[float], shift: float = 0.0) -> np.ndarray:
    return (np.log(np.asarray(p, dtype=np.float64)) + shift).astype(np.float32)


def test_kld_of_known_distributions_is_exact() -> None:
    # KL([.5,.25,.25] || [.25,.5,.25]) = .5 ln 2 + .25 ln .5 = .25 ln 2
    a = np.stack([_logits([0.5, 0.25, 0.25], shift=3.0), _logits([0.7, 0.2, 0.1])])
    b = np.stack([_logits([0.25, 0.5, 0.25], shift=-11.0), _logits([0.1, 0.2, 0.7], shift=5.0)])
    s = compare_window(a, b, np.array([0, 2]))
    assert s.kld[0] == pytest.approx(0.25 * math.log(2), abs=1e-6)
    want = 0.7 * math.log(7) + 0.2 * 0 + 0.1 * math.log(1 / 7)
    assert s.kld[1] == pytest.approx(want, abs=1e-6)
    assert s.kld[1] == pytest.approx(kl_divergence([0.7, 0.2, 0.1], [0.1, 0.2, 0.7]), abs=1e-6)
    assert s.top1.tolist() == [False, False]
    assert s.nll_a.tolist() == pytest.approx([math.log(2), -math.log(0.1)], abs=1e-6)
    assert s.nll_b.tolist() == pytest.approx([math.log(4), -math.log(0.7)], abs=1e-6)


def test_identical_rows_give_exactly_zero_and_a_shift_changes_nothing() -> None:
    rng = np.random.default_rng(3)
    z = rng.normal(0, 4, size=(70, 1000)).astype(np.float32)  # more rows than one block
    same = compare_window(z, z.copy(), rng.integers(0, 1000, size=70))
    assert np.all(same.kld == 0.0)
    assert same.top1.all()
    shifted = compare_window(z, z + np.float32(2.5), rng.integers(0, 1000, size=70))
    assert np.abs(shifted.kld).max() < 1e-6
    assert shifted.top1.all()


def test_kld_matches_the_definition_on_random_rows() -> None:
    rng = np.random.default_rng(7)
    a = rng.normal(0, 3, size=(5, 200)).astype(np.float32)
    b = (a + rng.normal(0, 0.05, size=a.shape)).astype(np.float32)
    s = compare_window(a, b, np.zeros(5, dtype=np.int64))
    for i in range(5):
        pa = np.exp(a[i].astype(np.float64) - np.logaddexp.reduce(a[i].astype(np.float64)))
        pb = np.exp(b[i].astype(np.float64) - np.logaddexp.reduce(b[i].astype(np.float64)))
        assert s.kld[i] == pytest.approx(kl_divergence(pa, pb), rel=1e-4, abs=1e-9)
        assert s.kld[i] > 0


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="one shape"):
        compare_window(np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32), np.zeros(2, int))
    with pytest.raises(ValueError, match="target"):
        compare_window(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32), np.zeros(3, int))


def _window(kld: list[float], top1: list[bool], nll_a: list[float], nll_b: list[float]) -> PositionStats:
    return PositionStats(kld=np.array(kld), top1=np.array(top1), nll_a=np.array(nll_a), nll_b=np.array(nll_b))


def test_summary_finds_the_worst_position_and_pools_means() -> None:
    acc = Accumulator()
    acc.add(0, _window([0.0, 0.1, 0.0], [True, False, True], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]))
    acc.add(3, _window([0.0, 0.0, 0.9, 0.2], [True] * 4, [2.0] * 4, [2.0, 2.0, 2.0, 3.0]))
    s = summarize(acc, resamples=200)
    assert (s.n_windows, s.n_positions) == (2, 7)
    assert s.kld_max == pytest.approx(0.9)
    assert (s.kld_max_window, s.kld_max_position, s.kld_max_token) == (1, 2, 5)
    assert s.kld_mean == pytest.approx(1.2 / 7)
    assert s.top1 == pytest.approx(6 / 7)
    assert s.ppl_a == pytest.approx(math.exp(11 / 7))
    assert s.ppl_ratio == pytest.approx(math.exp(1 / 7))
    assert s.ci["kld_mean"].low <= s.kld_mean <= s.ci["kld_mean"].high
    with pytest.raises(ValueError, match="no window"):
        summarize(Accumulator())


def test_bootstrap_interval_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    """Windows whose positions share a per-window offset (as positions of one context do): the
    interval over windows must cover the population mean in about 95% of repeated experiments."""
    rng = np.random.default_rng(11)
    true_mean, reps, covered = 1.0, 300, 0
    for r in range(reps):
        acc = Accumulator()
        for w in range(40):
            level = rng.gamma(2.0, 0.5)  # per-window mean, population mean 1.0
            k = rng.exponential(level, size=64)
            acc.add(64 * w, _window(list(k), [True] * 64, [0.0] * 64, [0.0] * 64))
        ci = bootstrap(acc, resamples=400, seed=r, tail=False)["kld_mean"]
        covered += ci.low <= true_mean <= ci.high
    assert 0.89 <= covered / reps <= 0.99, covered / reps
