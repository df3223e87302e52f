"""Agreement statistics between two arms' next-token distributions.

Per position only scalars are kept: the KL divergence KL(A || B) of the two next-token
distributions (A is the reference, as ``llama-perplexity --kl-divergence`` takes its base
logits), whether both arms put the same token first, and each arm's negative log-likelihood of
the token that really comes next. Windows are the unit of resampling: the bootstrap intervals
resample whole windows, because positions inside one window share their context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

#: Rows compared at once: temporaries stay a few MB (cache-friendly) whatever the window length.
ROW_BLOCK = 32
#: Bootstrap resamples over windows, and the interval's confidence.
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PositionStats:
    """One window's per-position scalars."""

    kld: F64
    """KL(A || B) in nats at each position."""
    top1: npt.NDArray[np.bool_]
    """Both arms' most likely next token is the same."""
    nll_a: F64
    """-log p_A(true next token)."""
    nll_b: F64


def compare_window(logits_a: F32, logits_b: F32, targets: npt.NDArray[np.integer[Any]]) -> PositionStats:
    """Per-position statistics of two ``(positions, vocab)`` arrays of next-token logits.

    Rows may be raw logits or log-probabilities (a row's log-softmax is computed here either way:
    log p = z - logsumexp(z)). With ``e = exp(z_A - max z_A)`` and ``s = sum e``:
    ``KL(A || B) = sum(e * (z_A - z_B)) / s - (lse_A - lse_B)``. The differences ``z_A - z_B``
    are taken in float32 (two close rows subtract nearly exactly), the exponentials in float32
    (vectorised), every sum in float64; identical rows give exactly 0.
    """
    if logits_a.shape != logits_b.shape or logits_a.ndim != 2:
        msg = f"expected two (positions, vocab) arrays of one shape, got {logits_a.shape} and {logits_b.shape}"
        raise ValueError(msg)
    n = logits_a.shape[0]
    if targets.shape != (n,):
        msg = f"expected {n} target tokens, got shape {targets.shape}"
        raise ValueError(msg)
    kld = np.empty(n, dtype=np.float64)
    top1 = np.empty(n, dtype=np.bool_)
    nll_a = np.empty(n, dtype=np.float64)
    nll_b = np.empty(n, dtype=np.float64)
    for lo in range(0, n, ROW_BLOCK):
        hi = min(n, lo + ROW_BLOCK)
        a = np.asarray(logits_a[lo:hi], dtype=np.float32)
        b = np.asarray(logits_b[lo:hi], dtype=np.float32)
        ia, ib = a.argmax(axis=1), b.argmax(axis=1)
        rows = np.arange(hi - lo)
        ma, mb = a[rows, ia], b[rows, ib]
        ea = np.exp(a - ma[:, None])
        sa = ea.sum(axis=1, dtype=np.float64)
        sb = np.exp(b - mb[:, None]).sum(axis=1, dtype=np.float64)
        lse_a = ma.astype(np.float64) + np.log(sa)
        lse_b = mb.astype(np.float64) + np.log(sb)
        cross = np.einsum("ij,ij->i", ea, a - b, dtype=np.float64)
        kld[lo:hi] = cross / sa - (lse_a - lse_b)
        top1[lo:hi] = ia == ib
        t = np.asarray(targets[lo:hi])
        nll_a[lo:hi] = lse_a - a[rows, t].astype(np.float64)
        nll_b[lo:hi] = lse_b - b[rows, t].astype(np.float64)
    return PositionStats(kld=kld, top1=top1, nll_a=nll_a, nll_b=nll_b)


def kl_divergence(p: npt.ArrayLike, q: npt.ArrayLike) -> float:
    """KL(p || q) in nats of two probability vectors (the reference formula the tests check against)."""
    pa, qa = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    keep = pa > 0
    return float(np.sum(pa[keep] * (np.log(pa[keep]) - np.log(qa[keep]))))


@dataclass
class Accumulator:
    """Per-position scalars of every window compared so far (what the summary needs, no logits)."""

    kld: list[F64] = field(default_factory=list)
    top1: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    nll_a: list[F64] = field(default_factory=list)
    nll_b: list[F64] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    """Corpus token index of each window's first position."""

    def add(self, start: int, stats: PositionStats) -> None:
        self.starts.append(start)
        self.kld.append(stats.kld)
        self.top1.append(stats.top1)
        self.nll_a.append(stats.nll_a)
        self.nll_b.append(stats.nll_b)

    @property
    def n_windows(self) -> int:
        return len(self.kld)

    def summary(self, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> Summary:
        return summarize(self, resamples=resamples, seed=seed)


@dataclass(frozen=True, kw_only=True)
class Interval:
    low: float
    high: float

    def as_list(self) -> list[float]:
        return [self.low, self.high]


@dataclass(frozen=True, kw_only=True)
class Summary:
    n_windows: int
    n_positions: int
    kld_mean: float
    kld_median: float
    kld_p99: float
    kld_p999: float
    kld_max: float
    kld_max_window: int
    kld_max_position: int
    """Position inside that window (0 = its first predicted token)."""
    kld_max_token: int
    """Corpus token index of the position with the largest KLD."""
    top1: float
    """Fraction of positions where both arms put the same token first."""
    ppl_a: float
    ppl_b: float
    ppl_ratio: float
    """ppl_b / ppl_a."""
    ci: dict[str, Interval]
    """95% bootstrap intervals over windows: kld_mean, top1, ppl_a, ppl_b, ppl_ratio, kld_p99."""
    resamples: int

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in vars(self).items() if k != "ci"}
        out["ci"] = {k: v.as_list() for k, v in self.ci.items()}
        out["confidence"] = CONFIDENCE
        return out


def summarize(acc: Accumulator, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> Summary:
    """Means, tail percentiles, the worst position and bootstrap intervals over windows."""
    if not acc.kld:
        msg = "no window was compared; expected at least one"
        raise ValueError(msg)
    kld = np.concatenate(acc.kld)
    top1 = np.concatenate(acc.top1)
    nll_a, nll_b = np.concatenate(acc.nll_a), np.concatenate(acc.nll_b)
    worst = int(np.argmax(kld))
    offsets = np.cumsum([0] + [len(k) for k in acc.kld])
    w = int(np.searchsorted(offsets, worst, side="right") - 1)
    pos = worst - int(offsets[w])
    ci = bootstrap(acc, resamples=resamples, seed=seed)
    return Summary(
        n_windows=acc.n_windows, n_positions=int(kld.size), kld_mean=float(kld.mean()),
        kld_median=float(np.median(kld)), kld_p99=float(np.percentile(kld, 99)),
        kld_p999=float(np.percentile(kld, 99.9)), kld_max=float(kld[worst]), kld_max_window=w,
        kld_max_position=pos, kld_max_token=acc.starts[w] + pos, top1=float(top1.mean()),
        ppl_a=math.exp(float(nll_a.mean())), ppl_b=math.exp(float(nll_b.mean())),
        ppl_ratio=math.exp(float(nll_b.mean() - nll_a.mean())), ci=ci, resamples=resamples)


def bootstrap(acc: Accumulator, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
              confidence: float = CONFIDENCE, tail: bool = True) -> dict[str, Interval]:
    """Percentile intervals of the pooled statistics, resampling whole windows with replacement.

    Means are pooled over positions (sum over the drawn windows / their positions), so a window
    counts by its length, as in the point estimate. ``tail``: also the p99 KLD's interval (the
    only one that needs the positions themselves, so the slow one).
    """
    n = acc.n_windows
    counts = np.array([len(k) for k in acc.kld], dtype=np.float64)
    sums = {
        "kld": np.array([k.sum() for k in acc.kld]),
        "top1": np.array([t.sum() for t in acc.top1], dtype=np.float64),
        "nll_a": np.array([x.sum() for x in acc.nll_a]),
        "nll_b": np.array([x.sum() for x in acc.nll_b]),
    }
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    # weights[r, w] = how often window w was drawn in resample r
    weights = np.zeros((resamples, n))
    np.add.at(weights, (np.repeat(np.arange(resamples), n), draws.ravel()), 1.0)
    total = weights @ counts
    mean = {k: (weights @ v) / total for k, v in sums.items()}
    alpha = (1.0 - confidence) / 2.0

    def interval(values: F64) -> Interval:
        lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
        return Interval(low=float(lo), high=float(hi))

    out = {
        "kld_mean": interval(mean["kld"]),
        "top1": interval(mean["top1"]),
        "ppl_a": interval(np.exp(mean["nll_a"])),
        "ppl_b": interval(np.exp(mean["nll_b"])),
        "ppl_ratio": interval(np.exp(mean["nll_b"] - mean["nll_a"])),
    }
    if not tail:
        return out
    # the 99th percentile: a few hundred resamples of the pooled positions are enough for its interval
    p99 = np.empty(min(resamples, 400))
    for r in range(p99.size):
        p99[r] = np.percentile(np.concatenate([acc.kld[i] for i in draws[r]]), 99)
    out["kld_p99"] = interval(p99)
    return out
