"""PNG plots of an ABBA run.

Uses matplotlib's object API (``Figure`` renders PNG through Agg), not pyplot:
no global backend switch, no figure registry to leak between reports.
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


def plot_ratios(analysis: Analysis, path: Path, *, wide_pct: float = 5.0) -> Path:
    """Forest plot on a log axis: each metric's B/A ratio with its interval, blocks as dots.

    Where outlier blocks were flagged, the ratio without them is drawn hollow below.
    """
    rows = [m for m in analysis.metrics.values() if m.ratio is not None]
    fig = Figure(figsize=(8.8, 0.62 * len(rows) + 1.6))
    labelled: set[str] = set()
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.axvspan(1 - wide_pct / 100, 1 + wide_pct / 100, color="0.9", zorder=0, label=f"±{wide_pct:.0f}%")
    ax.axvline(1.0, color="0.3", linewidth=1.0, zorder=1)
    extent = [1.0 + wide_pct / 100, 1.0 / (1.0 + wide_pct / 100)]
    for y, ms in enumerate(reversed(rows)):
        r = ms.ratio
        assert r is not None
        iv = r.ratio
        color = {"B faster": "#2ca02c", "B slower": "#d62728"}.get(r.verdict, "0.25")
        ax.scatter(r.ratios, [y] * len(r.ratios), s=14, color="0.55", zorder=2,
                   label="per-block ratio" if y == 0 else None)
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
    half = max(abs(math.log(v)) for v in extent if v > 0) * 1.1
    ax.set_xlim(math.exp(-half), math.exp(half))
    ticks = _log_ticks(half)
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_yticks(range(len(rows)), [f"{m.label} @ c={m.concurrency}" for m in reversed(rows)], fontsize=9)
    ax.set_xlabel(f"B / A (log scale; geometric mean with {analysis.confidence:.0%} interval)", fontsize=9)
    ax.set_ylim(-0.7, len(rows) - 0.4)
    ax.tick_params(labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.01, 0.0), ncol=3, fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight(), 1, 1))  # the annotations count as the axes
    fig.savefig(path, dpi=110)
    return path


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
