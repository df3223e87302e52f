"""PNG plots of an ABBA run.

Uses matplotlib's object API (``Figure`` renders PNG through Agg), not pyplot:
no global ``matplotlib.use`` switch, no figure registry to leak between reports.
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from harness.bench.stats import METRICS, Analysis, MetricStats

COLORS = {"A": "#1f77b4", "B": "#ff7f0e"}
MARKERS = {"A": "o", "B": "s"}


def plot_samples(analysis: Analysis, names: dict[str, str], path: Path) -> Path:
    """One panel per metric and concurrency: each arm's per-block samples, outliers ringed red."""
    samples_figure(analysis, names).savefig(path, dpi=110)
    return path


def samples_figure(analysis: Analysis, names: dict[str, str]) -> Figure:
    """The figure :func:`plot_samples` saves."""
    concurrencies = sorted({m.concurrency for m in analysis.metrics.values()})
    rows, cols = len(METRICS), max(1, len(concurrencies))
    fig = Figure(figsize=(4.6 * cols + 0.6, 2.9 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for r, metric in enumerate(METRICS):
        for c, conc in enumerate(concurrencies):
            ax = axes[r][c]
            ms = analysis.metrics.get(f"{metric}@c{conc}")
            if ms is None:
                ax.set_visible(False)
                continue
            _samples_panel(ax, ms, names)
    handles, labels = axes[0][0].get_legend_handles_labels()
    height = fig.get_figheight()
    # side by side when both labels fit the width (about 0.075 in per character at 9 pt), else stacked
    ncol = 2 if sum(len(lb) for lb in labels) * 0.075 + 1.5 < fig.get_figwidth() else 1
    fig.suptitle("per-block samples (dotted: geometric mean; red ring: outlier)", y=1 - 0.08 / height,
                 fontsize=11)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.3 / height),
               ncol=ncol, frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.6 if ncol == 2 else 0.8) / height))
    return fig


#: Longest arm name a legend shows; longer ones keep their start and end.
LEGEND_CHARS = 40


def fit_label(text: str, limit: int = LEGEND_CHARS) -> str:
    """``text`` cut in the middle to ``limit`` characters, so a legend fits its figure."""
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[: (keep + 1) // 2] + "…" + text[len(text) - keep // 2:]


def _samples_panel(ax: Axes, ms: MetricStats, names: dict[str, str]) -> None:
    for role, arm in ms.arms.items():
        label = f"{role}: {fit_label(names.get(role, role))}"
        ax.plot(arm.blocks, arm.values, marker=MARKERS[role], color=COLORS[role], label=label,
                linewidth=1.2, markersize=6)
        ax.axhline(arm.geomean.point, color=COLORS[role], linestyle=":", linewidth=0.9)
        for block in arm.outliers:
            v = arm.values[arm.blocks.index(block)]
            ax.plot([block], [v], marker="o", markersize=13, markerfacecolor="none",
                    markeredgecolor="red", markeredgewidth=1.8, linestyle="none")
    ax.set_title(f"{ms.label} @ c={ms.concurrency} ({ms.unit}, {'higher' if ms.higher_is_better else 'lower'} is better)",
                 fontsize=9)
    ax.set_xlabel("block", fontsize=8)
    blocks = sorted({b for arm in ms.arms.values() for b in arm.blocks})
    ax.set_xticks(blocks)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)


def plot_ratios(analysis: Analysis, path: Path, *, wide_pct: float = 5.0,
                names: dict[str, str] | None = None) -> Path:
    """Save :func:`ratios_figure` as a PNG at ``path``."""
    ratios_figure(analysis, wide_pct=wide_pct, names=names).savefig(path, dpi=110)
    return path


def ratios_figure(analysis: Analysis, *, wide_pct: float = 5.0, names: dict[str, str] | None = None) -> Figure:
    """Forest plot on a log axis: each metric's B/A ratio with its interval, blocks as dots.

    One axis per direction, each with "B better" on the right: higher-is-better metrics (tok/s) on
    one, lower-is-better ones (TTFT) on another whose axis runs from high to low; the values stay
    B/A. Where outlier blocks were flagged, the ratio without them is drawn hollow below.
    """
    rows = [m for m in analysis.metrics.values() if m.ratio is not None]
    groups = [(True, [m for m in rows if m.higher_is_better]), (False, [m for m in rows if not m.higher_is_better])]
    groups = [(higher, ms) for higher, ms in groups if ms] or [(True, [])]
    fig = Figure(figsize=(8.8, 0.62 * len(rows) + 1.45 * len(groups) + 0.6))
    axes = fig.subplots(len(groups), 1, squeeze=False, height_ratios=[max(1, len(ms)) + 1.2 for _, ms in groups])
    labelled: set[str] = set()
    extent = [1.0 + wide_pct / 100, 1.0 / (1.0 + wide_pct / 100)]
    for (_, ms), (ax,) in zip(groups, axes, strict=True):
        extent += _ratio_panel(ax, ms, wide_pct, labelled)
    half = max(abs(math.log(v)) for v in extent if v > 0) * 1.1
    ticks = _log_ticks(half)
    for (higher, ms), (ax,) in zip(groups, axes, strict=True):
        ax.set_xlim(math.exp(-half), math.exp(half))
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_yticks(range(len(ms)), [f"{m.label} @ c={m.concurrency}" for m in reversed(ms)], fontsize=9)
        ax.set_ylim(-0.7, max(1, len(ms)) - 0.4)
        if not higher:
            ax.invert_xaxis()  # lower is better: B's better side is the right, as on the other axis
        direction = "higher is better" if higher else "lower is better, axis reversed"
        ax.set_xlabel(f"B / A ({direction}: right of 1 = B better; log scale)", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(ratios_title(analysis, names), fontsize=11)
    handles, labels = [], []
    for (ax,) in axes:
        for h, lb in zip(*ax.get_legend_handles_labels(), strict=True):
            if lb not in labels:
                handles.append(h)
                labels.append(lb)
    fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.01, 0.0), ncol=3, fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight(), 1, 1))  # the annotations count as the axes
    return fig


def ratios_title(analysis: Analysis, names: dict[str, str] | None = None) -> str:
    """``B / A per metric: NAME_B vs NAME_A (8 blocks, 95% intervals)``."""
    arms = f": {fit_label(names['B'])} vs {fit_label(names['A'])}" if names and "A" in names and "B" in names else ""
    blocks = f"{analysis.blocks} blocks, " if analysis.blocks else ""
    return f"B / A per metric{arms} ({blocks}{analysis.confidence:.0%} intervals)"


def _ratio_panel(ax: Axes, rows: list[MetricStats], wide_pct: float, labelled: set[str]) -> list[float]:
    """One axis of :func:`plot_ratios`; returns the ratios it draws (for a shared x range)."""
    ax.set_xscale("log")
    ax.axvspan(1 - wide_pct / 100, 1 + wide_pct / 100, color="0.9", zorder=0,
               label=None if "band" in labelled else f"±{wide_pct:.0f}%")
    labelled.add("band")
    ax.axvline(1.0, color="0.3", linewidth=1.0, zorder=1)
    extent: list[float] = []
    for y, ms in enumerate(reversed(rows)):
        r = ms.ratio
        assert r is not None
        iv = r.ratio
        color = {"B faster": "#2ca02c", "B slower": "#d62728"}.get(r.verdict, "0.25")
        dots = "per-block ratio"
        ax.scatter(r.ratios, [y] * len(r.ratios), s=14, color="0.55", zorder=2,
                   label=None if dots in labelled else dots)
        labelled.add(dots)
        extent += list(r.ratios)
        text = f"{iv.point:.3f}"
        if iv.lo is not None and iv.hi is not None:
            ax.errorbar([iv.point], [y], xerr=[[iv.point - iv.lo], [iv.hi - iv.point]], fmt="D",
                        color=color, capsize=4, markersize=6, zorder=3)
            extent += [iv.lo, iv.hi]
            text += f" [{iv.lo:.3f}, {iv.hi:.3f}] {r.verdict}"
        else:
            ax.plot([iv.point], [y], "D", color=color, zorder=3)
            text += " (no interval)"
        wo = r.without_outliers
        if wo is not None and wo.lo is not None and wo.hi is not None:
            label = "without outlier blocks"
            ax.errorbar([wo.point], [y - 0.28], xerr=[[wo.point - wo.lo], [wo.hi - wo.point]], fmt="D",
                        color="0.35", markerfacecolor="white", capsize=3, markersize=5, zorder=3,
                        label=None if label in labelled else label)
            labelled.add(label)
            extent += [wo.lo, wo.hi]
            text += f"\nwithout outliers {wo.point:.3f} [{wo.lo:.3f}, {wo.hi:.3f}]"
        ax.annotate(text, (1.0, y), xycoords=("axes fraction", "data"), xytext=(8, 0),
                    textcoords="offset points", va="center", fontsize=8)
    return extent


def _log_ticks(half: float) -> list[float]:
    """Round ratios around 1.0, at least ``half / 3.5`` apart on the log axis."""
    candidates = (0.1, 0.25, 0.5, 0.67, 0.8, 0.9, 0.95, 0.98, 1.02, 1.05, 1.1, 1.25, 1.5, 2.0, 4.0, 10.0)
    ticks = [1.0]
    above = sorted(t for t in candidates if t > 1.0)
    below = sorted((t for t in candidates if t < 1.0), reverse=True)
    for side in (above, below):
        last = 1.0
        for t in side:
            if abs(math.log(t)) <= half and abs(math.log(t) - math.log(last)) >= half / 3.5:
                ticks.append(t)
                last = t
    return sorted(ticks)
