"""The qualification report: ``qualify.json`` (every stage's record) and ``qualify.md`` (the stage
table, then a section per stage that has figures to show)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.qualify.runner import Qualification

BENCH_TITLES = {"bench": "Benchmark on {model}: our cpu build (B) vs the peer baseline (A)",
                "old-pin-bench": "Benchmark on {model}: this pin (B) vs the old pin (A), each artifact's own benchmark "
                                 "tool"}

#: Sections of a bench report that qualify.md shows; the others go into a collapsed block.
SHOWN_SECTIONS = ("Headline", "System state", "Findings")


def write_qualification(q: Qualification, d: Path) -> Path:
    """qualify.json + qualify.md into ``d`` (the bench report, if any, is already in d/bench/)."""
    d.mkdir(parents=True, exist_ok=True)
    doc = {**q.header, "passed": q.passed, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "stages": [{"name": s.name, "status": s.status, "seconds": s.seconds, "summary": s.summary, "data": s.data}
                      for s in q.stages]}
    from harness.core.paths import redact

    (d / "qualify.json").write_text(redact(json.dumps(doc, indent=2, default=str)) + "\n")
    (d / "qualify.md").write_text(redact(render_markdown(doc)))
    return d


def _verdict(doc: Mapping[str, Any]) -> str:
    """PASSED (with N warnings), FAILED, or UNDECIDED (no stage failed, a gate could not be resolved: not a pass)."""
    statuses = [s.get("status") for s in doc.get("stages", [])]
    if doc["passed"]:
        warned = statuses.count("warning")
        return f"PASSED with {warned} warning{'s' if warned != 1 else ''}" if warned else "PASSED"
    return "UNDECIDED (not a pass)" if "undecided" in statuses and "failed" not in statuses else "FAILED"


def verdict_block(doc: Mapping[str, Any]) -> list[str]:
    """The report's first screen: every performance gate (its verdict, the instrument that decided it,
    what wall-clock and simulation said), then the stages that did not pass, each on one line."""
    rows = []
    for s in doc.get("stages", []):
        for d in (s.get("data") or {}).get("decisions") or ():
            wall = str(d.get("walltime") or "not run").replace("|", "/")
            sim = str(d.get("simulation") or "not run").replace("|", "/")
            rows.append(f"| {s['name']}: {d['gate']} | {d['status']} | {d.get('instrument') or 'nothing'} | {wall} | {sim} |")
    lines = ["## Verdict", ""]
    if rows:
        lines += ["| gate (speed B/A, floor 1 - gate) | verdict | decided by | wall-clock, 95% CI | simulation |",
                  "|---|---|---|---|---|", *rows, ""]
    for s in doc.get("stages", []):
        status = s.get("status")
        if status in ("failed", "undecided", "warning"):
            text = (s.get("data") or {}).get("advisory") or (s["summary"].splitlines() or [""])[0]
            lines.append(f"- **{s['name']}: {status}**: {text[:400]}")
        elif status == "skipped":
            lines.append(f"- {s['name']}: skipped: {(s['summary'].splitlines() or [''])[0][:200]}")
    ran = sum(1 for s in doc.get("stages", []) if s.get("status") in ("passed", "warning"))
    lines += ["", f"{ran} of {len(doc.get('stages', []))} stages passed "
              f"({sum(float(s.get('seconds') or 0) for s in doc.get('stages', [])) / 60:.1f} min)."]
    return lines


def _stage(doc: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return next((s for s in doc.get("stages", []) if s.get("name") == name), {})


def pin_move_block(doc: Mapping[str, Any]) -> list[str]:
    """The first screen of a pin move's report, the pull request's body: old -> new (source, upstream build
    and commit, recipe), the patch series, the binding and ABI changes (what the binding uses first), the old
    pin against the new by agreement, and the commands that reproduce it. The gates follow (Verdict)."""
    old = doc.get("old")
    if not old:
        return []
    up_old, up_new = old.get("upstream") or {}, doc.get("upstream") or {}
    recipe = doc.get("recipe") or {}
    here = (f"{str(recipe.get('commit'))[:12]}{' + edits' if recipe.get('dirty') else ''}" if recipe.get("commit")
            else "working tree")

    def commit(up: Mapping[str, Any]) -> str:
        c = str(up.get("commit") or "unknown")
        return "unknown (the source does not carry it)" if c == "unknown" else c

    from harness.pin.direction import direction

    # a rollback is named as one, on the first line (Renovate's rollback PRs)
    move = direction(up_old, up_new)
    lines = [f"## Pin move: {doc['engine']} {old.get('source')} -> {doc.get('source') or doc['pin']}", "",
             f"**{move.text}**", "",
             "| | old | new |", "|---|---|---|",
             f"| source | {old.get('source')} | {doc.get('source') or doc['pin']} |",
             f"| upstream build | {up_old.get('build', '?')} | {up_new.get('build', '?')} |",
             f"| upstream commit | {commit(up_old)} | {commit(up_new)} |",
             f"| recipe | {str(old.get('recipe_commit') or '')[:12] or 'working tree'} ({old.get('how')} "
             f"{old.get('asked')}) | {here} |"]
    fetch = (_stage(doc, "fetch").get("data") or {}).get("provenance") or []
    if fetch:
        lines.append(f"| provenance (new) | | {'; '.join(fetch)} |")
    patches = (_stage(doc, "patch").get("data") or {}).get("patches") or []
    if patches:
        lines += ["", "**Patch series**: " + "; ".join(f"{p['patch']}: {p['status']}" for p in patches)]
    abi_check = _stage(doc, "abi-check")
    binding = (abi_check.get("data") or {}).get("binding") or {}
    lines += ["", "**Binding and ABI** (what the binding uses first):", ""]
    for line in (_stage(doc, "old-pin-abi").get("data") or {}).get("versions_down") or ():
        lines.append(f"- **version going DOWN: `{line}`**")
    if binding:
        ok = "compiles" if binding.get("ok") else f"does NOT compile ({len(binding.get('problems') or [])} errors)"
        when = " (stamped by an earlier identical check)" if binding.get("cached") else ""
        lines.append(f"- the binding {ok} syntax-only against the new headers: {len(binding.get('units') or [])} "
                     f"translation units, {float(binding.get('seconds') or 0):.1f} s{when}")
    elif abi_check:
        lines.append(f"- abi-check: {abi_check.get('status')}: {(abi_check.get('summary') or '').splitlines()[0:1]}")
    diff = _stage(doc, "old-pin-abi")
    d = diff.get("data") or {}
    for line in d.get("cpp_differences") or ():
        lines.append(f"- C++ the binding uses: `{line}`")
    for line in d.get("used_lines") or ():
        lines.append(f"- C surface the binding uses: `{line}`")
    if diff:
        lines.append(f"- {diff.get('summary') or ''} (full diff below)")
    agreement = _stage(doc, "old-pin-agreement")
    if agreement:
        lines += ["", f"**Old pin vs new, numerical agreement** ({agreement.get('status')}): "
                  f"{(agreement.get('summary') or '').splitlines()[0] if agreement.get('summary') else ''}"]
    rev = str(old.get("recipe_commit") or old.get("asked") or "")[:12]
    lines += ["", "Reproduce:", "",
              f"    harness pin {doc['engine']} {doc.get('source_arg') or 'SOURCE'}   # move, fetch, patch --check, abi check",
              f"    harness abi diff {rev} {here.split(' ')[0] if recipe.get('commit') else 'HEAD'} --used --markdown",
              f"    harness qualify {doc['engine']} {old.get('how')} {old.get('asked')}", ""]
    return lines


def render_markdown(doc: dict[str, Any]) -> str:
    h = doc["host"]
    lines = [
        f"# Qualification: {doc['engine']} {doc['pin']} ({_verdict(doc)})",
        "",
        *pin_move_block(doc),
        f"upstream build {doc['upstream'].get('build')} ({doc['upstream'].get('commit')}); "
        # archspec's name for the CPU: the newest microarchitecture whose every flag the host shows (a VM
        # hiding one flag, such as waitpkg, reads as an older one); the CPU level the engine runs is its own
        f"host {h['os']} {h['arch']}, {h['cpu_model']} [archspec: {h['microarch']}], {h['cores']} cores, "
        f"{h['memory_bytes'] / 2**30:.1f} GiB; started {doc['started_at']}"
        + (f"; threads {doc['threads']} ({doc.get('threads_source') or 'given'})" if doc.get("threads") else ""),
        "",
        *verdict_block(doc),
        "",
        "## Stages",
        "",
        "| stage | status | seconds | summary |",
        "|---|---|---:|---|",
    ]
    for s in doc["stages"]:
        summary = (s["summary"].splitlines() or [""])[0].replace("|", "\\|")
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {summary} |")
    lines += side_by_side(doc)
    for s in doc["stages"]:
        for section in SECTIONS:
            lines += section(s["name"], s["data"])
    return "\n".join(lines) + "\n"


def side_by_side(doc: Mapping[str, Any]) -> list[str]:
    """The engine against another engine on the same weights (the cross-engine stages): speeds, peak
    RSS and greedy token identity in one table, with the commands that measured them."""
    stages = {s["name"]: s for s in doc["stages"]}
    bench = next((s for n, s in stages.items() if n.startswith("bench-vs-") and s["data"].get("headline")), None)
    check = stages.get("cross-engine")
    if bench is None and (check is None or not check["data"].get("summary")):
        return []
    d = bench["data"] if bench else {}
    c = check["data"] if check and check["data"].get("summary") else {}
    me, peer = d.get("engine") or c.get("engine") or doc["engine"], d.get("peer") or c.get("peer") or "peer"
    lines = ["", f"## Side by side: {me} vs {peer}, the same weights", "",
             f"| | A: {peer} | B: {me} | B/A (95% CI) |", "|---|---|---|---|"]
    for h in d.get("headline") or ():
        sp = h.get("speed") or {}
        ratio = ("n/a" if not sp else f"{sp['point']:.3f}x" + (f" [{sp['lo']:.3f}, {sp['hi']:.3f}]"
                                                                if sp.get("lo") is not None else ""))
        cell = [("n/a" if v is None else f"{v:,.1f} tok/s") for v in (h.get("a"), h.get("b"))]
        lines.append(f"| {h['label']} | {cell[0]} | {cell[1]} | {ratio} ({h.get('verdict', '')}) |")
    rss = d.get("peak_rss_bytes") or {}
    if rss.get("A") and rss.get("B"):
        lines.append(f"| peak RSS (worker) | {rss['A'] / 2**20:.0f} MiB | {rss['B'] / 2**20:.0f} MiB | "
                     f"{rss['B'] / rss['A']:.3f}x (memory: below 1 is less) |")
    if c:
        s = c["summary"]
        lines.append(f"| greedy tokens | {s['identical']}/{s['prompts']} prompts identical | "
                     f"{s['tokens_before_divergence']}/{s['tokens']} tokens before any divergence | "
                     f"{s['clear_divergences']} divergence(s) with a clear top-1 in {peer} |")
    if bench is None:
        lines.append(f"| speeds | not measured ({stages.get('bench-vs-' + peer, {}).get('summary') or 'no bench stage'}) | | |")
    lines += ["", "Speeds are B/A (above 1: B faster); prefill is prompt tokens x concurrency / TTFT. Commands:", "",
              f"    harness qualify {doc['engine']}"]
    lines += [f"    {cmd}" for cmd in d.get("commands") or ()]
    if c.get("command"):
        lines.append(f"    {c['command']}")
    return lines


def _e2e(name: str, data: Mapping[str, Any]) -> list[str]:
    if name != "e2e":
        return []
    lines: list[str] = []
    if data.get("variants"):
        lines += ["", "## e2e specs per variant", "", "| variant | passed | failed | errors | skipped |",
                  "|---|---:|---:|---:|---:|"]
        for v, c in data["variants"].items():
            lines.append(f"| {v} | {c.get('passed')} | {c.get('failures')} | {c.get('errors')} | {c.get('skipped')} |")
    crashes = [c for v in data.get("variants", {}).values() for c in v.get("crashes") or []]
    if crashes:
        lines += ["", "Crashed spec processes (the other files' results are kept):", "", *[f"- {c}" for c in crashes]]
    return lines


def _isa_audit(name: str, data: Mapping[str, Any]) -> list[str]:
    if name != "isa-audit" or not data.get("levels"):
        return []
    from harness.audit.artifact import findings_lines

    lines = ["", f"## Static ISA audit of every CPU level ({data['arch']}, {data['seconds']} s)", "",
             "Instructions decoded with iced-x86 vs the features ggml's loader checks before it picks the level "
             "(read from the pinned source). Levels this host cannot run are covered here.", "",
             "| level | result | checked by the loader | instructions | findings / notes |", "|---|---|---|---:|---|"]
    for a in data["levels"]:
        notes = findings_lines([a]) + [f"AMX tile config ({t['storage']}): {t['detail']}"
                                       for t in a["tile_configs"] if t["ok"]] + a["notes"]
        lines.append(f"| {a['level']} | {'clean' if a['clean'] else 'FINDINGS'} | "
                     f"{' '.join(a['checked']) or 'baseline x86-64'} | {a['instructions']:,} | "
                     f"{'; '.join(notes).replace('|', '/')} |")
    return lines


def _cross_variant(name: str, data: Mapping[str, Any]) -> list[str]:
    if name != "cross-variant" or not data.get("runs"):
        return []
    lines = ["", f"## Cross-variant greedy check: {data['prompt']!r}", "",
             "| run | CPU level | status | answer ok | diverges at token | note |", "|---|---|---|---|---:|---|"]
    for r in data["runs"]:
        div = "" if r["diverges_at"] is None else str(r["diverges_at"])
        status = {"not-run": "audited (static), not run here"}.get(r.get("status", "ran"), r.get("status", "ran"))
        lines.append(f"| {r['label']} | {r['cpu_level'] or ''} | {status} | {'yes' if r['ok'] else 'NO'} | "
                     f"{div} | {r['error']} |")
    agreement = data.get("agreement")
    if agreement:
        corpus = agreement["corpus"]
        lines += ["", f"### Numerical agreement against {agreement['reference']}", "",
                  f"KL(reference || row) of the next-token distributions, windows of {agreement['window']} tokens of "
                  f"{corpus['name']} ({corpus.get('package')} {corpus.get('version')}); 95% intervals bootstrap "
                  "over windows.", "", str(agreement["markdown"]).rstrip()]
        for e in agreement.get("errors") or ():
            lines.append(f"\n{e['label']} ({e['kind']}): not compared: {e['error']}")
    return lines


def _emulated(name: str, d: Mapping[str, Any]) -> list[str]:
    if not name.startswith("emulated-") or not d.get("levels"):
        return []
    from harness.qualify.emulate import table_lines

    return ["", f"## {d['build']['variant']}: every CPU level under qemu-user ({d['triple']}, qemu {d['qemu']})",
            "", f"Prompt {d['prompt']!r}, greedy, {d['n_tokens']} tokens, {d['threads']} threads; each level "
            "forced (only its library in the plugin dir) under the QEMU CPU model that has its features; "
            "tokens/s are under emulation (informational). ABI: "
            f"{d['abi']['used_functions']} used functions exported by the {d['abi']['machine']} libraries, "
            f"{len(d['abi']['headers'])} shipped headers identical to the checked ones.", "",
            *table_lines(dict(d))]


def _ceiling(name: str, d: Mapping[str, Any]) -> list[str]:
    if not name.startswith("ceiling") or not d.get("markdown"):
        return []
    title = (f"Engine ceiling on {d.get('model', '?')}: the binding (B) vs the engine's own benchmark tool (A), "
             f"same artifact, cpu level {d.get('cpu_level') or '?'}, floor {d.get('min_ratio', 0):.2f}x")
    lines = bench_section(title, d)
    if d.get("commands"):
        lines += ["", "Commands (arm A, each run in a fresh process per measurement):", "",
                  *[f"    {c}" for c in d["commands"]]]
    return lines


def _bench(name: str, data: Mapping[str, Any]) -> list[str]:
    if not (name in BENCH_TITLES or name.startswith(("bench", "old-pin-bench"))) or not data.get("markdown"):
        return []
    if name.startswith("bench-vs-"):
        title = (f"Benchmark: {data.get('engine', '?')} (B) vs {data.get('peer', '?')} (A), the same weights "
                 f"({data.get('model', '?')} and {Path(str(data.get('peer_model', '?'))).name}), both in-process bindings")
    else:
        key = "old-pin-bench" if name.startswith("old-pin-bench") else name
        title = BENCH_TITLES.get(key, BENCH_TITLES["bench"]).format(model=data.get("model", "?"))
    return bench_section(title, data)


def _cross_engine(name: str, d: Mapping[str, Any]) -> list[str]:
    """The greedy cross-engine check, prompt by prompt (harness.qualify.stages.cross_engine)."""
    if name != "cross-engine" or not d.get("rows"):
        return []
    me, peer = d["engine"], d["peer"]
    lines = ["", f"## Cross-engine greedy check: {me} on {Path(d['model']).name}, {peer} on {Path(d['peer_model']).name}",
             "", f"Greedy, EOS ignored, {d['max_tokens']} tokens per prompt, {d['threads']} threads. {d['logits']}.", "",
             f"| prompt | prompt tokens ({me} / {peer}) | generated ({me} / {peer}) | identical | diverges at token "
             f"| {peer} top-1 margin there (nats) | {peer} smallest margin |", "|---|---|---|---|---:|---:|---:|"]
    for r in d["rows"]:
        at = "" if r["diverges_at"] is None else str(r["diverges_at"])
        margin = "" if r["peer_margin_at_divergence"] is None else f"{r['peer_margin_at_divergence']:.3f}"
        smallest = "" if r["peer_min_margin"] is None else f"{r['peer_min_margin']:.3f}"
        lines.append(f"| {r['prompt']!r} | {r['prompt_tokens'][me]} / {r['prompt_tokens'][peer]} | "
                     f"{r['completion_tokens'][me]} / {r['completion_tokens'][peer]} | {'yes' if r['identical'] else 'NO'} | "
                     f"{at} | {margin} | {smallest} |")
    if d.get("command"):
        lines += ["", "Command:", "", f"    {d['command']}"]
    return lines


def _old_pin_abi(name: str, data: Mapping[str, Any]) -> list[str]:
    if name != "old-pin-abi" or not data.get("markdown"):
        return []
    return ["", *data["markdown"].splitlines()]


def _old_pin_agreement(name: str, data: Mapping[str, Any]) -> list[str]:
    """The pin move's agreement table for the pull request (harness.qualify.stages.agreement), and its plot."""
    if name != "old-pin-agreement" or not data.get("markdown"):
        return []
    rel = data.get("report") or "agree-old-pin"
    body = [("#" + ln if ln.startswith("### ") else ln) for ln in str(data["markdown"]).rstrip().splitlines()]
    return ["", f"## Numerical agreement: this pin (B) against the old pin {data.get('old', '')} (A)", "",
            f"Files: [{rel}/agree.md]({rel}/agree.md), [{rel}/agree.json]({rel}/agree.json)", "",
            *body, "", f"![KLD per position and its histogram]({rel}/kld.png)"]


#: The sections a stage's record may add below the stage table, in this order.
SECTIONS: tuple[Callable[[str, Mapping[str, Any]], list[str]], ...] = (
    _e2e, _isa_audit, _cross_variant, _emulated, _ceiling, _bench, _cross_engine, _old_pin_abi, _old_pin_agreement)


def bench_section(title: str, data: Mapping[str, Any]) -> list[str]:
    """A bench stage's part of qualify.md: the report's headline, system state and findings, the rest folded.

    The report's sections become subsections, and its relative image links are made
    relative to the qualification directory.
    """
    rel = data["report"]
    md = str(data["markdown"])
    body = md.split("\n", 1)[1] if "\n" in md else md
    parts = re.split(r"(?m)^(?=## )", body)
    preamble, sections = parts[0], parts[1:]

    def heading(part: str) -> str:
        return part.split("\n", 1)[0].removeprefix("## ").strip()

    def demoted(part: str) -> list[str]:
        return [ln.replace("](", f"]({rel}/", 1) if ln.startswith("![") and "](data:" not in ln
                else "#" + ln if ln.startswith("## ") else ln for ln in part.rstrip().splitlines()]

    shown = [p for p in sections if heading(p) in SHOWN_SECTIONS]
    folded = [p for p in sections if heading(p) not in SHOWN_SECTIONS]
    lines = ["", f"## {title}", "", f"Full report: [{rel}/report.md]({rel}/report.md)", ""]
    from harness.bench.verdict import Decision
    from harness.bench.verdict import markdown as decisions_md

    decisions = [Decision(**d) for d in data.get("decisions") or ()]
    if decisions:
        lines += ["### Gates and the instrument that decided each", "", decisions_md(decisions)]
    if data.get("simulation_markdown"):
        lines += [str(data["simulation_markdown"]).replace("### CPU simulation", "### CPU simulation", 1), ""]
    elif data.get("simulation_note"):
        lines += [f"CPU simulation: not run ({data['simulation_note']}).", ""]
    for part in (preamble, *shown):
        lines += [*demoted(part), ""]
    if folded:
        lines += [f"<details><summary>{', '.join(heading(p) for p in folded)}</summary>", ""]
        for part in folded:
            lines += [*demoted(part), ""]
        lines += ["</details>"]
    return lines
