"""The bench plots: a title each, and one direction per axis ("B better" on the right of every ratio axis)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg

from harness.bench.plots import plot_ratios, ratios_figure, samples_figure
from harness.bench.stats import Analysis, analyze
from tests.unit.test_bench_report import _run


def _analysis() -> Analysis:
    return analyze(_run("fake", "fake:slowdown=1.1", "plots", blocks=3, concurrency=(1, 4)).samples)


def test_ratio_axes_each_have_one_direction_with_b_better_on_the_right(tmp_path: Path) -> None:
    analysis = _analysis()
    names = {"A": "fake", "B": "fake:slowdown=1.1"}
    fig = ratios_figure(analysis, names=names)
    FigureCanvasAgg(fig).draw()
    assert fig._suptitle is not None
    assert fig._suptitle.get_text() == "B / A per metric: fake:slowdown=1.1 vs fake (3 blocks, 95% intervals)"
    axes = fig.axes
    directions = {m.higher_is_better for m in analysis.metrics.values() if m.ratio is not None}
    assert len(axes) == len(directions) == 2  # tok/s (higher is better) and TTFT (lower is better) apart
    by_label = {f"{m.label} @ c={m.concurrency}": m.higher_is_better for m in analysis.metrics.values()}
    for ax in axes:
        rows = {by_label[t.get_text()] for t in ax.get_yticklabels()}
        assert len(rows) == 1, [t.get_text() for t in ax.get_yticklabels()]
        higher = rows.pop()
        assert bool(ax.xaxis_inverted()) is (not higher)  # lower is better: the axis runs high to low
        assert "right of 1 = B better" in ax.get_xlabel()
        assert ("higher is better" if higher else "lower is better") in ax.get_xlabel()
    # B is 10% slower: its tok/s ratios are below 1 and its TTFT ratios above; both lie left of 1 on screen
    for m in analysis.metrics.values():
        assert m.ratio is not None and m.ratio.verdict == "B slower", m.label
        ax = next(a for a in axes if f"{m.label} @ c={m.concurrency}" in [t.get_text() for t in a.get_yticklabels()])
        assert ax.transData.transform((m.ratio.ratio.point, 0))[0] < ax.transData.transform((1.0, 0))[0]
    path = plot_ratios(analysis, tmp_path / "ratios.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_title_without_names_says_what_is_plotted() -> None:
    fig = ratios_figure(_analysis())
    assert fig._suptitle is not None and fig._suptitle.get_text() == "B / A per metric (3 blocks, 95% intervals)"


def test_samples_panels_name_their_direction() -> None:
    fig = samples_figure(_analysis(), {"A": "fake", "B": "fake:slowdown=1.1"})
    assert fig._suptitle is not None and fig._suptitle.get_text().startswith("per-block samples")
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles and all(("higher is better" in t) != ("lower is better" in t) for t in titles), titles
