"""Markdown for people: the benchmark report, grouped findings, and ``report compare --markdown``.

The report leads with the headline (prefill, decode and aggregate as speeds, B/A with
its interval, the verdict and the gate), then the table in the shape of the reference
README's, every metric, the machine's state, the findings grouped by what they are
about, per-block samples, the plots and each arm's full spec.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.bench.gate import Headline, fmt_speed, headlines
from harness.bench.stats import (
    METRICS,
    WIDE_PCT,
    Analysis,
    Finding,
    Interval,
    MetricStats,
    metric_key,
)
from harness.bench.system import SystemState, malloc_line, summary_lines

if TYPE_CHECKING:
    from harness.bench.comparison import Comparison

#: What a group of findings of one kind is about (and what to do), shown above its lines.
GROUP_TITLES: dict[str, str] = {
    "outlier": "outlier samples (modified z-score beyond 3.5): a block where the host hiccupped",
    "outlier-ratio": "ratios that include outlier blocks: check the host before trusting either figure",
    "drift": ("samples drift from the first to the last block: when both arms move the host is not steady "
              "(thermal, other load, page cache; ABBA cancels a linear drift in the ratio); when one arm moves "
              "alone its warm-up is too short or it leaks, and the interval understates the noise"),
    "wide": (f"intervals too wide to support a claim at ±{WIDE_PCT:.0f}%: run more blocks "
             f"(`--until-halfwidth {WIDE_PCT:g}` adds them until they are narrow enough)"),
    "straddles": "the point estimate says a difference, but the interval contains 1.0: no difference is shown",
    "aa": "A/A run: a family-wise interval excludes 1.0 for an arm measured against itself: the setup is biased",
    "aa-chance": "A/A run: a 95% interval misses 1.0 by chance; its family-wise interval contains it",
    "system": "the machine's state",
    "engine-side": ("the client's decode rates beside the engines' own stamps (a server's `timings`, the in-process "
                    "arm's): where the arms differ, in delivery or in the engines"),
}


def _tps(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _ci(iv: Interval) -> str:
    if iv.lo is None or iv.hi is None:
        return f"{iv.point:.3f} (no interval)"
    return f"{iv.point:.3f} [{iv.lo:.3f}, {iv.hi:.3f}]"


def _val(ms: MetricStats | None, role: str) -> str:
    if ms is None or role not in ms.arms:
        return "n/a"
    arm = ms.arms[role]
    digits = 1 if ms.unit == "ms" else 2
    text = f"{arm.geomean.point:.{digits}f} {ms.unit}"
    hw = arm.geomean.half_width_pct
    return text + (f" ±{hw:.1f}%" if hw is not None else "")


def _pct_of_roof(roof: Mapping[str, float], measure: Mapping[str, Any] | None) -> str:
    parts = []
    if "decode_pct" in roof and measure:
        parts.append(f"decode {roof['decode_pct']:.1f}% of {measure['bandwidth_gbs']:.1f} GB/s")
    if "prefill_pct" in roof and measure:
        parts.append(f"prefill {roof['prefill_pct']:.1f}% of {measure['gemm_gflops']:.0f} GFLOP/s")
    return "; ".join(parts) or "n/a"


def _model_line(describe: Mapping[str, Any]) -> str:
    model = describe.get("model") or {}
    bits = [f"pin `{describe['pin']}`" if describe.get("pin") else "",
            f"model `{model['name']}`" if model.get("name") else "",
            f"{model['bytes'] / 1e6:.1f} MB" if model.get("bytes") else "",
            f"{model['n_params'] / 1e6:.0f}M params" if model.get("n_params") else ""]
    return ", ".join(b for b in bits if b)


# ---------------------------------------------------------------------------
# findings, grouped
# ---------------------------------------------------------------------------


def group_findings(findings: Sequence[Finding]) -> list[tuple[str, str, list[Finding]]]:
    """``(level, kind, findings)`` groups in order of first appearance, errors first."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.level, f.kind), []).append(f)
    rank = {"error": 0, "warning": 1, "note": 2}
    ordered = sorted(groups.items(), key=lambda kv: rank.get(kv[0][0], 3))
    return [(level, kind, items) for (level, kind), items in ordered]


def findings_lines(findings: Sequence[Finding]) -> list[str]:
    """One bullet per finding of a kind that occurs once; a titled bullet with sub-bullets otherwise."""
    lines: list[str] = []
    for level, kind, items in group_findings(findings):
        if len(items) == 1 or not kind or kind == "system":
            for f in items:
                where = f" `{f.metric}`" if f.metric else ""
                lines.append(f"- **{level}**{where}: {f.message}")
            continue
        lines.append(f"- **{level}** ({len(items)}): {GROUP_TITLES.get(kind, kind)}")
        lines += [f"  - `{f.metric}`: {f.detail or f.message}" if f.metric else f"  - {f.detail or f.message}"
                  for f in items]
    return lines


# ---------------------------------------------------------------------------
# the benchmark report
# ---------------------------------------------------------------------------


def headline_lines(heads: Sequence[Headline], names: Mapping[str, str], gate: Mapping[str, Any] | None,
                   *, pn: int, ttft: Mapping[str, MetricStats] | None = None) -> list[str]:
    """The headline table (speeds, B/A with interval, verdict, gate) and the gate's verdict line."""
    checks = {c["key"]: c for c in (gate or {}).get("checks", [])}
    lines = [f"| metric | A: {names.get('A', 'A')} | B: {names.get('B', 'B')} | B/A speed (95% CI) | verdict | gate |",
             "|---|---|---|---|---|---|"]
    for h in heads:
        cells = []
        for role, v in (("A", h.a), ("B", h.b)):
            text = f"{_tps(v)} tok/s"
            ms = (ttft or {}).get(h.key)
            if h.name == "prefill" and ms is not None and role in ms.arms:
                text += f" (TTFT {ms.arms[role].geomean.point:.1f} ms)"
            cells.append(text)
        check = checks.get(h.key)
        gate_cell = "—" if check is None else f"{check['status']} (>{check['threshold_pct']:g}%)"
        if check is not None and check["status"] == "FAILED":
            gate_cell = f"**{gate_cell}**"
        lines.append(f"| {h.label} | {cells[0]} | {cells[1]} | {fmt_speed(h.speed)} | {h.verdict} | {gate_cell} |")
    if gate and gate.get("checks"):
        lines += ["", f"**{gate['verdict']}**"]
        lines += [f"- {c['message']}" for c in gate["checks"] if c["status"] == "FAILED"]
    lines += ["", f"_Speeds in tok/s (prefill: {pn} prompt tokens x concurrency / TTFT); a B/A speed above "
              "1.0 means B is faster._"]
    return lines


def _plots_lines(plots: Sequence[Path], embed: bool) -> list[str]:
    if not plots:
        return []
    if embed:
        imgs = [f"![{p.stem}](data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()})" for p in plots]
        note = ("The plots are embedded as data URIs (VS Code, GitLab and most viewers show them; GitHub does not: "
                f"attach {', '.join(p.name for p in plots)} from the report directory instead).")
    else:
        imgs = [f"![{p.stem}]({p.name})" for p in plots]
        note = ("These links are relative to the report directory. Pasting this report into a pull request? "
                f"Drag {' and '.join(p.name for p in plots)} from that directory into the comment box (GitHub "
                "uploads them and writes the links), then delete the lines above; or write the report with "
                "`--embed-plots` for viewers that show data URIs.")
    return ["", "## Plots", "", "<details><summary>ratios (forest plot) and per-block samples</summary>", "",
            *imgs, "", note, "", "</details>"]


def render_markdown(doc: Mapping[str, Any], analysis: Analysis, *, findings: Sequence[Finding] | None = None,
                    plots: Sequence[Path | str] | None = None, embed_plots: bool = False) -> str:
    cfg, arms = doc["config"], doc["arms"]
    measure = doc.get("host_measure")
    roof = doc.get("roofline") or {}
    c1 = min(cfg["concurrency"])
    ttft = analysis.metrics.get(metric_key("ttft_ms", c1))
    dec = analysis.metrics.get(metric_key("decode_tps", c1))
    names = {role: str(arms[role]["name"]) for role in ("A", "B")}
    lines = [f"# Benchmark: {doc['name']}", ""]
    for role, label in (("A", "baseline"), ("B", "candidate")):
        a = arms[role]
        peak = max((s["peak_rss_bytes"] for s in doc["samples"] if s["arm"] == role), default=0)
        desc = _model_line(a.get("describe", {}))
        lines.append(f"- **{role}** ({label}): `{a['name']}` — kind `{a['kind']}`"
                     + (f", {desc}" if desc else "") + f", peak RSS {peak / 2**20:.0f} MiB")
    host = doc.get("host") or {}
    host_bits = [str(host.get("cpu_model", "")), f"{host['cores']} cores" if host.get("cores") else ""]
    if measure:
        host_bits.append(f"{measure['bandwidth_gbs']:.1f} GB/s, {measure['gemm_gflops']:.0f} GFLOP/s "
                         f"(measured {measure.get('measured_at', '?')})")
    order = " ".join(cfg["order"])
    if len(cfg["order"]) > 16:
        order = " ".join(cfg["order"][:8]) + " ..."
    blocks = doc.get("blocks_run", cfg["blocks"])
    state = SystemState.from_dict(doc["system"]) if doc.get("system") else None
    lines += [
        f"- p{cfg['pn']} g{cfg['gn']}, {blocks} ABBA blocks ({order}) after warm-up, "
        f"concurrency {', '.join(map(str, cfg['concurrency']))}"
        + ("; **A/A run** (the same arm against itself)" if doc.get("aa") else ""),
        ("- processes: a fresh worker per arm for every block (warmed by one discarded measurement), so each "
         "block's ratio carries its own draw of the per-process offset and the intervals are over processes"
         if cfg.get("fresh_process") else
         "- processes: **one worker per arm for the whole run**: the intervals do not cover the per-process "
         "offset (two processes of one arm can differ by 1-3%); not a verdict"),
    ]
    if doc.get("stop"):
        lines.append(f"- {doc['stop']['text']}")
    if state is not None and state.threads is not None:
        lines.append(f"- threads per arm: {state.threads}" + (f" ({state.threads_source})" if state.threads_source else ""))
    if state is not None and state.malloc_hugetlb is not None:
        lines.append(f"- {malloc_line(state)}")
    lines += [
        f"- {analysis.confidence:.0%} intervals: geometric mean of per-block B/A ratios, hull of a "
        f"seeded bootstrap ({analysis.resamples} resamples) and Student-t",
        "- host: " + (", ".join(b for b in host_bits if b) or "not recorded"),
        "", "## Headline", "",
    ]
    ttft_by_key = {k: m for k, m in analysis.metrics.items() if m.metric == "ttft_ms"}
    lines += headline_lines(headlines(analysis, int(cfg["pn"])), names, doc.get("gate"), pn=int(cfg["pn"]),
                            ttft=ttft_by_key)
    lines += ["", "## Configurations", "",
              "| configuration | prefill TTFT | warm throughput | ratio to baseline (95% CI) | % of roofline |",
              "|---|---|---|---|---|"]
    for role in ("A", "B"):
        name = f"{role}: {names[role]}" + (" (baseline)" if role == "A" else "")
        thr = _val(dec, role)
        ratio_cell = "—"
        if role == "B" and dec is not None and dec.ratio is not None:
            r = dec.ratio.ratio
            thr += f", {100 * r.point:.1f}% of A"
            ratio_cell = f"throughput {_ci(r)}"
            if ttft is not None and ttft.ratio is not None:
                ratio_cell += f"; TTFT {_ci(ttft.ratio.ratio)}"
            ratio_cell += f"; {dec.ratio.verdict}"
        prefill = _val(ttft, role)
        if ttft is not None and role in ttft.arms:
            prefill += f" ({_tps(int(cfg['pn']) * c1 / (ttft.arms[role].geomean.point / 1000.0))} tok/s)"
        lines.append(f"| {name} | {prefill} | {thr} | {ratio_cell} | {_pct_of_roof(roof.get(role, {}), measure)} |")
    lines += ["", "## Every metric", "",
              "| metric | A | B | B/A (95% CI) | ± | verdict | method |", "|---|---|---|---|---|---|---|"]
    for ms in analysis.metrics.values():
        if ms.ratio is None:
            continue
        hw = ms.ratio.ratio.half_width_pct
        lines.append(f"| {ms.label} @ c={ms.concurrency} | {_val(ms, 'A')} | {_val(ms, 'B')} | "
                     f"{_ci(ms.ratio.ratio)} | {'n/a' if hw is None else f'{hw:.1f}%'} | "
                     f"{ms.ratio.verdict} | {ms.ratio.method} |")
    if state is not None:
        lines += ["", "## System state", "", *summary_lines(state)]
    lines += ["", "## Findings", ""]
    if analysis.aa:
        lines.append("- A/A check: " + ("**passed**, every interval contains 1.0" if analysis.aa_ok
                                        else "**FAILED**, an interval excludes 1.0"))
    found = list(analysis.findings) if findings is None else list(findings)
    if not found:
        lines.append(f"- no outliers, no drift, every interval within ±{WIDE_PCT:.0f}%")
    lines += findings_lines(found)
    lines += ["", f"## Per-block samples (c={c1})", "",
              "| block | order | A TTFT ms | B TTFT ms | A tok/s | B tok/s | B/A tok/s |",
              "|---|---|---|---|---|---|---|"]
    if ttft is not None and dec is not None and dec.ratio is not None:
        for i, block in enumerate(dec.ratio.blocks):
            order_ = "AB" if block % 2 == 0 else "BA"
            cells = [_block_val(ttft, "A", block), _block_val(ttft, "B", block),
                     _block_val(dec, "A", block), _block_val(dec, "B", block)]
            lines.append(f"| {block} | {order_} | " + " | ".join(cells) + f" | {dec.ratio.ratios[i]:.3f} |")
    lines += _plots_lines([Path(p) for p in plots or ()], embed_plots)
    lines += ["", "## Arms", ""]
    for role in ("A", "B"):
        lines += [f"<details><summary>{role}: {names[role]}</summary>", "", "```json",
                  json.dumps({k: arms[role].get(k) for k in ("kind", "spec", "options", "describe")}, indent=2),
                  "```", "", "</details>", ""]
    return "\n".join(lines).rstrip() + "\n"


def _block_val(ms: MetricStats, role: str, block: int) -> str:
    arm = ms.arms.get(role)
    if arm is None or block not in arm.blocks:
        return "n/a"
    v = arm.values[arm.blocks.index(block)]
    mark = " ⚠" if block in arm.outliers else ""
    return f"{v:.1f}{mark}" if ms.unit == "ms" else f"{v:.2f}{mark}"


# ---------------------------------------------------------------------------
# compare, for a pull request
# ---------------------------------------------------------------------------


def _metric_label(key: str) -> str:
    metric, _, c = key.partition("@c")
    label = METRICS.get(metric, (metric, "", True))[0]
    return f"{label} @ c={c}"


def render_compare_markdown(comp: Comparison, *, min_pct: float = 1.0) -> str:
    """A table to paste into a pull request: B/A per metric, old vs new, change and verdict."""
    lines = [f"### Benchmark: `{comp.old}` → `{comp.new}`", "",
             "| metric | old B/A (95% CI) | new B/A (95% CI) | change | verdict |", "|---|---|---|---:|---|"]
    ratio_rows = [r for r in comp.rows if r.what == "B/A"]
    for r in ratio_rows:
        verdict = f"**{r.verdict}**" if r.verdict in ("regression", "improvement") else r.verdict
        lines.append(f"| {_metric_label(r.metric)} | {_ci(r.old)} | {_ci(r.new)} | {r.change_pct:+.1f}% | {verdict} |")
    n = len(comp.regressions)
    lines += ["", (f"**{n} regression(s)** of the candidate" if n else "**No regression**")
              + f" beyond the combined noise of both runs (|z| > 1.96 and at least {min_pct:g}%)."]
    if comp.notes:
        lines += ["", *[f"- note: {note}" for note in comp.notes]]
    absolute = [r for r in comp.rows if r.what in ("A", "B")]
    if absolute:
        lines += ["", "<details><summary>absolute figures (A = baseline, B = candidate)</summary>", "",
                  "| metric | arm | old | new | change | verdict |", "|---|---|---|---|---:|---|"]
        for r in absolute:
            lines.append(f"| {_metric_label(r.metric)} | {r.what} | {r.old.point:.4g} | {r.new.point:.4g} | "
                         f"{r.change_pct:+.1f}% | {r.verdict} |")
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
