"""Statistics of an ABBA run: paired ratios with intervals, outliers, drift, warnings.

Every figure is paired by block: the ratio of block ``i`` is B/A measured in
the same block, so slow host drift cancels. The headline ratio is the geometric
mean of the per-block ratios with a 95% interval on the mean log-ratio. The
interval is the hull of a seeded percentile bootstrap (10k resamples) and the
Student-t interval: the percentile bootstrap is known to be too narrow with a
handful of blocks (with 4 blocks all of the same sign it cannot contain 1.0),
and a claim should not rest on that.

Outliers are flagged per arm and metric with the modified z-score on
median/MAD (Iglewicz and Hoaglin, as hyperfine does; |z| > 3.5). Drift is a
log-linear slope of each arm's samples against the block index (noise pooled
over both arms), flagged when it is significant and more than a few percent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy.special import stdtrit  # scipy.stats costs seconds to import; this does not

from harness.bench.arms import Sample

FloatArray = npt.NDArray[np.float64]
Level = Literal["error", "warning", "note"]

#: metric -> (label, unit, higher is better)
METRICS: dict[str, tuple[str, str, bool]] = {
    "ttft_ms": ("prefill TTFT", "ms", False),
    "decode_tps": ("decode", "tok/s", True),
    "aggregate_tps": ("aggregate", "tok/s", True),
}

#: Modified z-score beyond which a sample is an outlier (hyperfine's threshold).
OUTLIER_Z = 3.5
#: ... and only if it is also this far (relative) from its arm's median: with 4
#: blocks of a quiet host the MAD can be a fraction of a percent.
OUTLIER_MIN_REL = 0.03
#: An interval wider than this (half-width, percent) cannot support a claim.
WIDE_PCT = 5.0
#: A point estimate this far from 1.0 (percent) "says" there is a difference.
CLAIM_PCT = 1.0
#: Drift must exceed this (percent, first -> last block) to be reported at all...
DRIFT_MIN_PCT = 3.0
#: ... and its slope must be significant at this level (two-sided t-test): a run
#: checks several metrics, so 95% would cry wolf on a quiet host.
DRIFT_LEVEL = 0.99


def metric_key(metric: str, concurrency: int) -> str:
    return f"{metric}@c{concurrency}"


def sample_value(sample: Sample, metric: str) -> float:
    if metric == "ttft_ms":
        return sample.ttft_s * 1000.0
    return float(getattr(sample, metric))


# ---------------------------------------------------------------------------
# primitives
# ---------------------------------------------------------------------------


def geometric_mean(values: Sequence[float] | FloatArray) -> float:
    arr = np.asarray(values, dtype=np.float64)
    return float(np.exp(np.mean(np.log(arr))))


def bootstrap_mean_ci(values: Sequence[float] | FloatArray, *, confidence: float = 0.95,
                      resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (resampled in chunks to bound memory)."""
    arr = np.asarray(values, dtype=np.float64)
    n = arr.size
    if n < 2:
        return float(arr.mean()), float(arr.mean())
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, 4_000_000 // n)
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        means[start:start + k] = arr[rng.integers(0, n, size=(k, n))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def t_mean_ci(values: Sequence[float] | FloatArray, *, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean."""
    arr = np.asarray(values, dtype=np.float64)
    n = arr.size
    mean = float(arr.mean())
    if n < 2:
        return mean, mean
    sem = float(arr.std(ddof=1)) / math.sqrt(n)
    half = float(stdtrit(n - 1, 0.5 + confidence / 2.0)) * sem
    return mean - half, mean + half


def modified_z(values: Sequence[float] | FloatArray) -> FloatArray:
    """Modified z-scores ``0.6745 (x - median) / MAD``; mean absolute deviation when MAD is 0."""
    arr = np.asarray(values, dtype=np.float64)
    dev = arr - np.median(arr)
    mad = float(np.median(np.abs(dev)))
    if mad > 0:
        return 0.6745 * dev / mad
    mean_ad = float(np.mean(np.abs(dev)))
    if mean_ad > 0:
        return dev / (1.253314 * mean_ad)
    return np.zeros_like(arr)


def outlier_indices(values: Sequence[float] | FloatArray, *, threshold: float = OUTLIER_Z,
                    min_rel: float = OUTLIER_MIN_REL) -> list[int]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 3:
        return []
    z = modified_z(arr)
    med = float(np.median(arr))
    rel = np.abs(arr / med - 1.0) if med else np.zeros_like(arr)
    return [int(i) for i in np.flatnonzero((np.abs(z) > threshold) & (rel > min_rel))]


def rankdata(values: Sequence[float] | FloatArray) -> FloatArray:
    """Ranks from 1, ties sharing their average rank."""
    _, inverse, counts = np.unique(np.asarray(values, dtype=np.float64), return_inverse=True,
                                   return_counts=True)
    ends = np.cumsum(counts).astype(np.float64)
    return np.asarray(((ends - counts + 1.0 + ends) / 2.0)[inverse], dtype=np.float64)


def spearman(x: Sequence[float] | FloatArray, y: Sequence[float] | FloatArray) -> float:
    """Spearman's rho (0.0 when either side is constant, instead of a warning)."""
    rx = rankdata(x)
    ry = rankdata(y)
    if rx.size < 2 or np.std(rx) == 0 or np.std(ry) == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Finding:
    """A warning or note about a run, shown in the report and the CLI."""

    level: Level
    metric: str
    """Metric key (``decode_tps@c1``) or ``""`` for the whole run."""
    message: str
    kind: str = ""
    """What it is about (``outlier``, ``drift``, ``wide``, ``system``, ...): reports group findings by it."""
    detail: str = ""
    """The figures of this one finding, for a grouped report (the message says them in a sentence)."""


@dataclass(frozen=True, kw_only=True)
class Interval:
    point: float
    lo: float | None
    hi: float | None
    """``None`` when there are fewer than two blocks."""

    def contains(self, value: float) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= value <= self.hi

    @property
    def half_width_pct(self) -> float | None:
        """Half the interval's width relative to the point estimate, in percent."""
        if self.lo is None or self.hi is None or self.point <= 0:
            return None
        return 100.0 * (self.hi - self.lo) / (2.0 * self.point)


@dataclass(frozen=True, kw_only=True)
class ArmStats:
    """One arm's samples of one metric, one per block."""

    blocks: tuple[int, ...]
    values: tuple[float, ...]
    geomean: Interval
    median: float
    mad: float
    z: tuple[float, ...]
    outliers: tuple[int, ...]
    """Block indices flagged as outliers."""


@dataclass(frozen=True, kw_only=True)
class Drift:
    """Trend of one arm's own samples across blocks.

    Each arm gets its own level and slope, but the residual noise is pooled over
    both arms, so with 4 blocks the slope's t-test has 4 degrees of freedom, not 2.
    """

    change_pct: float
    """Fitted change from the first to the last block, percent."""
    noise_pct: float
    """Pooled residual scatter around the fits, percent."""
    t: float
    """The slope in units of its standard error."""
    spearman: float
    """Spearman's rho of value against block."""
    flagged: bool


@dataclass(frozen=True, kw_only=True)
class RatioStats:
    """Paired per-block B/A ratios of one metric."""

    blocks: tuple[int, ...]
    ratios: tuple[float, ...]
    ratio: Interval
    """Geometric-mean ratio and its interval (hull of bootstrap and t)."""
    bootstrap: Interval
    student_t: Interval
    method: str
    verdict: str
    """``B faster``, ``B slower`` or ``no difference shown``."""
    without_outliers: Interval | None = None
    """The ratio over the blocks where neither arm is an outlier, when that differs."""


@dataclass(frozen=True, kw_only=True)
class MetricStats:
    key: str
    metric: str
    concurrency: int
    label: str
    unit: str
    higher_is_better: bool
    arms: dict[str, ArmStats]
    ratio: RatioStats | None
    drift: dict[str, Drift]


@dataclass(frozen=True, kw_only=True)
class Analysis:
    metrics: dict[str, MetricStats]
    findings: tuple[Finding, ...]
    confidence: float
    resamples: int
    seed: int
    aa: bool = False
    aa_ok: bool | None = None
    """For an A/A run: every family-wise interval (``aa_intervals``) contains 1.0."""
    aa_confidence: float | None = None
    """Per-metric confidence of the A/A check (Bonferroni: 95% for the run as a whole)."""
    aa_intervals: dict[str, Interval] = field(default_factory=dict)
    blocks: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level in ("error", "warning")]


def _interval(log_point: float, log_lo: float | None, log_hi: float | None) -> Interval:
    return Interval(point=math.exp(log_point),
                    lo=None if log_lo is None else math.exp(log_lo),
                    hi=None if log_hi is None else math.exp(log_hi))


def ratio_interval(ratios: Sequence[float], *, confidence: float = 0.95, resamples: int = 10_000,
                   seed: int = 0) -> tuple[Interval, Interval, Interval, str]:
    """Geometric mean of ``ratios`` with (hull, bootstrap, t) intervals and the method used."""
    logs = np.log(np.asarray(ratios, dtype=np.float64))
    point = float(logs.mean())
    if logs.size < 2:
        none = _interval(point, None, None)
        return none, none, none, "none (one block)"
    b_lo, b_hi = bootstrap_mean_ci(logs, confidence=confidence, resamples=resamples, seed=seed)
    t_lo, t_hi = t_mean_ci(logs, confidence=confidence)
    boot, tint = _interval(point, b_lo, b_hi), _interval(point, t_lo, t_hi)
    hull = _interval(point, min(b_lo, t_lo), max(b_hi, t_hi))
    method = ("bootstrap" if (b_lo <= t_lo and b_hi >= t_hi)
              else f"student-t (the bootstrap is narrower at n={logs.size})")
    return hull, boot, tint, method


def _drift(per_arm: dict[str, tuple[list[int], list[float]]], *,
           level: float = DRIFT_LEVEL) -> dict[str, Drift]:
    """Per-arm log-linear slopes against the block index, with noise pooled over the arms."""
    fits: dict[str, tuple[float, float, float, float]] = {}  # slope, sxx, span, rho
    rss, df = 0.0, 0
    for role, (blocks, values) in per_arm.items():
        if len(blocks) < 3:
            continue
        x = np.asarray(blocks, dtype=np.float64)
        y = np.log(np.asarray(values, dtype=np.float64))
        slope, intercept = np.polyfit(x, y, 1)
        rss += float(np.sum((y - (slope * x + intercept)) ** 2))
        df += x.size - 2
        fits[role] = (float(slope), float(np.sum((x - x.mean()) ** 2)), float(x.max() - x.min()),
                      spearman(x, y))
    if not fits:
        return {}
    noise = math.sqrt(rss / df)
    crit = float(stdtrit(df, 0.5 + level / 2.0))
    out: dict[str, Drift] = {}
    for role, (slope, sxx, span, rho) in fits.items():
        se = noise / math.sqrt(sxx)
        t = slope / se if se > 0 else (math.copysign(1e9, slope) if slope else 0.0)
        change_pct = 100.0 * (math.exp(slope * span) - 1.0)
        flagged = abs(change_pct) > DRIFT_MIN_PCT and abs(t) > crit
        out[role] = Drift(change_pct=change_pct, noise_pct=100.0 * noise, t=t, spearman=rho,
                          flagged=bool(flagged))
    return out


def _arm_stats(blocks: list[int], values: list[float], *, confidence: float, resamples: int,
               seed: int) -> ArmStats:
    logs = np.log(np.asarray(values, dtype=np.float64))
    lo, hi = bootstrap_mean_ci(logs, confidence=confidence, resamples=resamples, seed=seed)
    t_lo, t_hi = t_mean_ci(logs, confidence=confidence)
    has_ci = len(values) >= 2
    arr = np.asarray(values, dtype=np.float64)
    med = float(np.median(arr))
    out = outlier_indices(arr)
    return ArmStats(
        blocks=tuple(blocks), values=tuple(float(v) for v in values),
        geomean=_interval(float(logs.mean()), min(lo, t_lo) if has_ci else None,
                          max(hi, t_hi) if has_ci else None),
        median=med, mad=float(np.median(np.abs(arr - med))),
        z=tuple(float(z) for z in modified_z(arr)), outliers=tuple(blocks[i] for i in out),
    )


def _verdict(ratio: Interval, higher_is_better: bool) -> str:
    if ratio.lo is None or ratio.contains(1.0):
        return "no difference shown"
    b_higher = ratio.point > 1.0
    return "B faster" if b_higher == higher_is_better else "B slower"


def _fmt_pct(r: float) -> str:
    return f"{100.0 * (r - 1.0):+.1f}%"


def analyze(samples: Sequence[Sample], *, confidence: float = 0.95, resamples: int = 10_000,
            seed: int = 0, aa: bool = False, wide_pct: float = WIDE_PCT) -> Analysis:
    """Statistics of every metric at every concurrency level, plus findings."""
    by: dict[tuple[str, str, int], dict[int, float]] = {}
    blocks_seen: set[int] = set()
    for s in samples:
        blocks_seen.add(s.block)
        for metric in METRICS:
            by.setdefault((metric, s.arm, s.concurrency), {})[s.block] = sample_value(s, metric)
    concurrencies = sorted({s.concurrency for s in samples})
    findings: list[Finding] = []
    metrics: dict[str, MetricStats] = {}
    for metric, (label, unit, higher) in METRICS.items():
        for c in concurrencies:
            key = metric_key(metric, c)
            per_arm = {role: by.get((metric, role, c), {}) for role in ("A", "B")}
            arms: dict[str, ArmStats] = {}
            series: dict[str, tuple[list[int], list[float]]] = {}
            for i, (role, vals) in enumerate(per_arm.items()):
                if not vals:
                    continue
                blocks = sorted(vals)
                values = [vals[b] for b in blocks]
                arms[role] = _arm_stats(blocks, values, confidence=confidence, resamples=resamples,
                                        seed=seed + 1 + i)
                # an outlier block is reported as such, not as a trend
                keep = [j for j, b in enumerate(blocks) if b not in arms[role].outliers]
                series[role] = ([blocks[j] for j in keep], [values[j] for j in keep])
            drift = _drift(series)
            ratio = _ratio_stats(per_arm, arms, higher, confidence=confidence, resamples=resamples,
                                 seed=seed)
            ms = MetricStats(key=key, metric=metric, concurrency=c, label=label, unit=unit,
                             higher_is_better=higher, arms=arms, ratio=ratio, drift=drift)
            metrics[key] = ms
            findings.extend(_findings(ms, aa=aa, wide_pct=wide_pct))
    n_blocks = len(blocks_seen)
    if 0 < n_blocks < 4:
        findings.insert(0, Finding(level="warning", metric="", kind="blocks", message=(
            f"only {n_blocks} block(s): too few for an interval to mean much; use --blocks 4 or more")))
    aa_ok: bool | None = None
    aa_conf: float | None = None
    aa_iv: dict[str, Interval] = {}
    if aa:
        aa_conf, aa_iv = _aa_check(metrics, findings, confidence=confidence, resamples=resamples,
                                   seed=seed)
        aa_ok = bool(aa_iv) and all(iv.contains(1.0) for iv in aa_iv.values())
    return Analysis(metrics=metrics, findings=tuple(findings), confidence=confidence,
                    resamples=resamples, seed=seed, aa=aa, aa_ok=aa_ok, aa_confidence=aa_conf,
                    aa_intervals=aa_iv, blocks=n_blocks)


def engine_side_findings(samples: Sequence[Sample]) -> list[Finding]:
    """Where both arms also report the engine's own figures (``engine_decode_tps``, ``engine_ttft_s``
    in a sample's extra: the in-process arm's stamps, a server's ``timings``), one note per
    concurrency level: the decode ratio as the client read it beside the engines' own, and each arm's
    client/engine rate, so a gap is placed in delivery or in the engines. TTFT only at c=1 (a server's
    own prompt time may leave out queueing)."""
    by: dict[int, dict[int, dict[str, Sample]]] = {}
    for s in samples:
        if "engine_decode_tps" in s.extra and "engine_ttft_s" in s.extra:
            by.setdefault(s.concurrency, {}).setdefault(s.block, {})[s.arm] = s
    out: list[Finding] = []
    for c, blocks in sorted(by.items()):
        pairs = [(v["A"], v["B"]) for _, v in sorted(blocks.items()) if "A" in v and "B" in v]
        pairs = [(a, b) for a, b in pairs if min(a.decode_tps, b.decode_tps, a.extra["engine_decode_tps"],
                                                   b.extra["engine_decode_tps"]) > 0]
        if not pairs:
            continue
        client = geometric_mean([b.decode_tps / a.decode_tps for a, b in pairs])
        engine = geometric_mean([b.extra["engine_decode_tps"] / a.extra["engine_decode_tps"] for a, b in pairs])
        sides = {"A": [a for a, _ in pairs], "B": [b for _, b in pairs]}
        delivery = {role: geometric_mean([x.decode_tps / x.extra["engine_decode_tps"] for x in arm])
                    for role, arm in sides.items()}
        ttft = ""
        if c == 1:
            ms = {role: 1e3 * float(np.median([x.ttft_s - x.extra["engine_ttft_s"] for x in arm]))
                  for role, arm in sides.items()}
            ttft = f"; TTFT beyond the engine's own (median): A {ms['A']:.1f} ms, B {ms['B']:.1f} ms"
        where = ("in the engines (the client reads each at its engine's rate)"
                 if abs(client / engine - 1.0) <= 0.01
                 else f"delivery for {100.0 * (client / engine - 1.0):+.1f}%, the engines for {_fmt_pct(engine)}")
        detail = (f"decode B/A {client:.3f} as read, {engine:.3f} by the engines' own stamps; client/engine rate "
                  f"A {delivery['A']:.3f}, B {delivery['B']:.3f}{ttft}; {len(pairs)} blocks")
        out.append(Finding(level="note", metric=metric_key("decode_tps", c), kind="engine-side", detail=detail,
                           message=f"decode @ c={c}: {detail}: the difference between the arms is {where}"))
    return out


def _aa_check(metrics: dict[str, MetricStats], findings: list[Finding], *, confidence: float,
              resamples: int, seed: int) -> tuple[float, dict[str, Interval]]:
    """A/A: every metric's ratio must be 1.0 within a family-wise interval.

    With six metrics, one 95% interval in four would exclude 1.0 by chance alone; the
    Bonferroni-adjusted intervals keep the whole run's false-alarm rate at 5%.
    """
    rated = {k: m.ratio for k, m in metrics.items() if m.ratio is not None and len(m.ratio.ratios) >= 2}
    adjusted = 1.0 - (1.0 - confidence) / max(1, len(rated))
    intervals: dict[str, Interval] = {}
    for key, r in rated.items():
        iv = ratio_interval(r.ratios, confidence=adjusted, resamples=resamples, seed=seed)[0]
        intervals[key] = iv
        if not iv.contains(1.0):
            findings.append(Finding(level="error", metric=key, kind="aa",
                                    detail=f"family-wise [{_opt(iv.lo)}, {_opt(iv.hi)}]", message=(
                f"A/A run: the {adjusted:.1%} family-wise interval [{_opt(iv.lo)}, {_opt(iv.hi)}] "
                "excludes 1.0 for an arm measured against itself: the setup is biased (order "
                "effect, warm-up too short, a noisy host)")))
        elif not r.ratio.contains(1.0):
            findings.append(Finding(level="note", metric=key, kind="aa-chance",
                                    detail=(f"{confidence:.0%} [{_opt(r.ratio.lo)}, {_opt(r.ratio.hi)}], family-wise "
                                            f"[{_opt(iv.lo)}, {_opt(iv.hi)}]"), message=(
                f"A/A run: the {confidence:.0%} interval [{_opt(r.ratio.lo)}, {_opt(r.ratio.hi)}] "
                f"misses 1.0, as about one metric in {round(1 / (1 - confidence))} does by chance; "
                f"the family-wise interval [{_opt(iv.lo)}, {_opt(iv.hi)}] contains it")))
    return adjusted, intervals


def _ratio_stats(per_arm: dict[str, dict[int, float]], arms: dict[str, ArmStats], higher: bool, *,
                 confidence: float, resamples: int, seed: int) -> RatioStats | None:
    a, b = per_arm["A"], per_arm["B"]
    paired = sorted(set(a) & set(b))
    if not paired:
        return None
    ratios = [b[k] / a[k] for k in paired]
    hull, boot, tint, method = ratio_interval(ratios, confidence=confidence, resamples=resamples,
                                              seed=seed)
    flagged = set(arms["A"].outliers) | set(arms["B"].outliers)
    clean = [r for k, r in zip(paired, ratios, strict=True) if k not in flagged]
    without = None
    if flagged & set(paired) and len(clean) >= 2:
        without = ratio_interval(clean, confidence=confidence, resamples=resamples, seed=seed)[0]
    return RatioStats(blocks=tuple(paired), ratios=tuple(ratios), ratio=hull, bootstrap=boot,
                      student_t=tint, method=method, verdict=_verdict(hull, higher),
                      without_outliers=without)


def _findings(ms: MetricStats, *, aa: bool, wide_pct: float) -> list[Finding]:
    out: list[Finding] = []
    key, unit = ms.key, ms.unit
    for role, arm in ms.arms.items():
        for block in arm.outliers:
            i = arm.blocks.index(block)
            out.append(Finding(level="warning", metric=key, kind="outlier", detail=(
                f"arm {role} block {block}: {arm.values[i]:.4g} {unit} (z {arm.z[i]:+.1f}, median "
                f"{arm.median:.4g})"), message=(
                f"arm {role} block {block}: {arm.values[i]:.4g} {unit} is an outlier "
                f"(modified z = {arm.z[i]:+.1f}, median {arm.median:.4g} {unit})")))
    drifting = {role: d for role, d in ms.drift.items() if d.flagged}
    if drifting:
        which = ", ".join(f"{role} {d.change_pct:+.1f}% (t = {d.t:+.1f})" for role, d in drifting.items())
        noise = next(iter(drifting.values())).noise_pct
        if len(drifting) == len(ms.drift) > 1:
            why = ("both arms move: the host is not steady (thermal throttling, other load, page "
                   "cache); ABBA cancels a linear drift in the ratio, but the absolute figures are affected")
        else:
            why = ("one arm moves on its own (warm-up too short, a leak, caches filling): the "
                   "per-block ratio is not stable and the interval understates it")
        out.append(Finding(level="warning", metric=key, kind="drift", detail=f"{which}; noise ±{noise:.1f}%",
                           message=(
            f"samples drift from first to last block: {which}; noise ±{noise:.1f}%: {why}")))
    r = ms.ratio
    if r is None:
        return out
    iv = r.ratio
    if r.without_outliers is not None:
        wo = r.without_outliers
        out.append(Finding(level="warning", metric=key, kind="outlier-ratio", detail=(
            f"{iv.point:.3f} with them, {wo.point:.3f} [{_opt(wo.lo)}, {_opt(wo.hi)}] without"), message=(
            f"ratio {iv.point:.3f} includes outlier block(s); without them it is {wo.point:.3f} "
            f"[{_opt(wo.lo)}, {_opt(wo.hi)}]: check the host before trusting either")))
    hw = iv.half_width_pct
    straddles = iv.contains(1.0) and abs(iv.point - 1.0) * 100.0 > CLAIM_PCT and not aa
    claim = (f"the point estimate says {_fmt_pct(iv.point)} but the interval contains 1.0, so no "
             "difference is shown; ") if straddles else ""
    if hw is not None and hw > wide_pct:
        n = len(r.ratios)
        need = max(n + 1, math.ceil(n * (hw / wide_pct) ** 2))
        out.append(Finding(level="warning", metric=key, kind="wide", detail=(
            f"[{_opt(iv.lo)}, {_opt(iv.hi)}] ±{hw:.1f}%, about {need} blocks"
            + (f"; the point says {_fmt_pct(iv.point)}" if straddles else "")), message=(
            f"interval [{_opt(iv.lo)}, {_opt(iv.hi)}] is ±{hw:.1f}%, too wide to support a claim "
            f"at ±{wide_pct:.0f}%; {claim}run more blocks (about --blocks {need}, or "
            f"--until-halfwidth {wide_pct:g} --max-blocks {need})")))
    elif straddles:
        out.append(Finding(level="warning", metric=key, kind="straddles", detail=(
            f"[{_opt(iv.lo)}, {_opt(iv.hi)}], the point says {_fmt_pct(iv.point)}"), message=(
            f"interval [{_opt(iv.lo)}, {_opt(iv.hi)}]: {claim.removesuffix('; ')}")))
    return out


def _opt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"
