"""What ``harness agree`` writes: a markdown table for a PR, the JSON, and a plot.

The plot uses matplotlib's object API (``Figure`` renders PNG through Agg), as the bench plots do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _g(x: float) -> str:
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    return f"{x:.3g}" if abs(x) >= 1e-3 else f"{x:.2e}"


def _ci(ci: dict[str, list[float]], key: str, fmt: Any = _g) -> str:
    lo_hi = ci.get(key)
    return f"[{fmt(lo_hi[0])}, {fmt(lo_hi[1])}]" if lo_hi else ""


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def markdown(result: dict[str, Any]) -> str:
    """One comparison as a PR table: each statistic with its 95% bootstrap interval over windows."""
    s, ci = result["summary"], result["summary"]["ci"]
    a, b = result["arms"]["A"], result["arms"]["B"]
    corpus = result["corpus"]
    lines = [
        f"### Agreement: `{b['name']}` against `{a['name']}` (reference)",
        "",
        f"{s['n_positions']} positions in {s['n_windows']} windows of {result['window']} tokens of "
        f"{corpus['name']} ({corpus.get('package') or 'local file'} {corpus.get('version') or ''}".rstrip()
        + f"); model {Path(str(a['describe'].get('model', {}).get('path', '?'))).name}; "
        f"A: {a['shape_text']} (CPU level {a['describe'].get('cpu_variant')}); "
        f"B: {b['shape_text']} (CPU level {b['describe'].get('cpu_variant')}).",
        "",
        "| statistic | value | 95% CI (bootstrap over windows) |",
        "|---|---:|---|",
        f"| mean KLD (nats) | {_g(s['kld_mean'])} | {_ci(ci, 'kld_mean')} |",
        f"| median KLD | {_g(s['kld_median'])} | |",
        f"| p99 KLD | {_g(s['kld_p99'])} | {_ci(ci, 'kld_p99')} |",
        f"| p99.9 KLD | {_g(s['kld_p999'])} | |",
        f"| max KLD | {_g(s['kld_max'])} at corpus token {s['kld_max_token']} (window {s['kld_max_window']}, "
        f"position {s['kld_max_position']}) | |",
        f"| top-1 agreement | {_pct(s['top1'])} | {_ci(ci, 'top1', _pct)} |",
        f"| perplexity A | {s['ppl_a']:.4f} | {_ci(ci, 'ppl_a', lambda x: f'{x:.4f}')} |",
        f"| perplexity B | {s['ppl_b']:.4f} | {_ci(ci, 'ppl_b', lambda x: f'{x:.4f}')} |",
        f"| perplexity ratio B/A | {s['ppl_ratio']:.6f} | {_ci(ci, 'ppl_ratio', lambda x: f'{x:.6f}')} |",
        "",
    ]
    thr = result.get("threshold")
    if thr:
        verdict = "within the thresholds" if not result["violations"] else "; ".join(result["violations"])
        gate = "gated" if thr.get("gate", True) else "reported only"
        limits = ", ".join(f"{k} {v}" for k, v in thr.items() if k not in ("kind", "why", "gate"))
        lines += [f"Thresholds for `{result['kind']}` ({gate}: {limits}): **{verdict}**. Why: {thr['why']}", ""]
    t = result["timing"]
    if t.get("cost_ratio"):
        arms = t["arms"]
        lines += [f"Cost: {t['loop_s']:.1f} s for the agreement run against {arms['A']['decode_s']:.1f} s + "
                  f"{arms['B']['decode_s']:.1f} s of corpus evaluation (the engines' decode calls) in A and B: "
                  f"{t['cost_ratio']:.2f}x (comparison {t['compare_s']:.1f} s).", ""]
    return "\n".join(lines)


def rows_markdown(results: Sequence[dict[str, Any]]) -> str:
    """Several comparisons, one row each (qualification: every level against the reference)."""
    lines = ["| B against A | mean KLD [95% CI] | p99 KLD | p99.9 KLD | max KLD (token) | top-1 | PPL B/A | verdict |",
             "|---|---|---:|---:|---|---:|---:|---|"]
    for r in results:
        s, ci = r["summary"], r["summary"]["ci"]
        verdict = "ok" if not r.get("violations") else ("FAIL: " if r.get("passed") is False else "outside: ") \
            + "; ".join(r["violations"])
        lines.append(f"| `{r['arms']['B']['name']}` vs `{r['arms']['A']['name']}` | {_g(s['kld_mean'])} "
                     f"{_ci(ci, 'kld_mean')} | {_g(s['kld_p99'])} | {_g(s['kld_p999'])} | {_g(s['kld_max'])} "
                     f"({s['kld_max_token']}) | {_pct(s['top1'])} | {s['ppl_ratio']:.5f} | {verdict} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], kld: Sequence[Sequence[float]], path: Path) -> Path:
    """KLD per position over the corpus (log scale) and the histogram of log10 KLD."""
    from matplotlib.figure import Figure

    values = np.concatenate([np.asarray(k, dtype=np.float64) for k in kld]) if kld else np.zeros(0)
    fig = Figure(figsize=(10, 6.5))
    top, bottom = fig.subplots(2, 1)
    floor = 1e-12
    shown = np.maximum(values, floor)
    top.plot(np.arange(values.size), shown, lw=0.4, color="#1f77b4")
    top.set_yscale("log")
    top.set_xlabel("corpus position")
    top.set_ylabel("KL(A || B), nats")
    s = result["summary"]
    top.axhline(max(s["kld_mean"], floor), color="#ff7f0e", lw=1, ls="--", label=f"mean {_g(s['kld_mean'])}")
    top.axhline(max(s["kld_p99"], floor), color="#d62728", lw=1, ls=":", label=f"p99 {_g(s['kld_p99'])}")
    top.legend(loc="upper right", fontsize=8, frameon=False)
    top.set_title(f"{result['arms']['B']['name']} against {result['arms']['A']['name']}: KLD per position "
                  f"(values below {floor:g} drawn at {floor:g})", fontsize=10)
    positive = values[values > 0]
    if positive.size:
        bottom.hist(np.log10(positive), bins=80, color="#1f77b4")
    bottom.set_xlabel("log10 KLD (positions with KLD > 0)")
    bottom.set_ylabel("positions")
    zero = int(values.size - positive.size)
    bottom.set_title(f"{positive.size} positions with KLD > 0, {zero} with KLD <= 0 (identical or rounding)",
                     fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
