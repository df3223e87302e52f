"""One report from many hosts: ``harness report merge`` over qualification reports.

Each input is one ``qualify.json`` (a host, maybe with a CPU level forced, maybe other variants).
The merged report puts them side by side: a stage x host table, the CPU levels each host ran or
audited, each host's benchmark headline ratios with their intervals (never averaged: hosts differ
in what they measure), and the differences that matter (a level that passes on one host and
crashes on another, a stage that passes on one and fails on another, a ratio whose interval sits
above 1 on one host and below 1 on another). Reports of different pins or patch series are
refused, naming them: their differences would be the pin's, not the hosts'.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core import paths
from harness.core.errors import ReportMismatchError, UsageError
from harness.core.inputs import read_text

#: How deep under a given directory qualify.json files are looked for (a CI run's downloaded
#: artifacts: <dir>/<artifact name>/<stamp>-qualify-<engine>/qualify.json).
SEARCH_DEPTH = 3

_SERIES_IN_SUMMARY = re.compile(r"\(series ([0-9a-f]{12,64})\)")


@dataclass(frozen=True)
class HostReport:
    """One qualification report, as the merge sees it."""

    label: str
    """Column name: CPU model, arch and microarchitecture, the forced CPU level, and a number when
    two collide."""
    path: Path
    doc: dict[str, Any]

    @property
    def series(self) -> str | None:
        return series_hash(self.doc)

    def stage(self, name: str) -> dict[str, Any] | None:
        return next((s for s in self.doc.get("stages", []) if s.get("name") == name), None)


def series_hash(doc: dict[str, Any]) -> str | None:
    """The patch series a report was made with: recorded in the patch stage's data (newer reports),
    else read from its summary (``... applied (series 77d0126a7654)``, 12 hex digits)."""
    patch = next((s for s in doc.get("stages", []) if s.get("name") == "patch"), None)
    if patch is None:
        return None
    recorded = (patch.get("data") or {}).get("series_hash")
    if recorded:
        return str(recorded)
    m = _SERIES_IN_SUMMARY.search(patch.get("summary") or "")
    return m.group(1) if m else None


def find_reports(inputs: Sequence[Path]) -> list[Path]:
    """qualify.json files: each input is one, a report directory holding one, or a directory whose
    subdirectories (up to :data:`SEARCH_DEPTH` deep) hold them."""
    found: list[Path] = []
    # os.path's tests: a name too long for the file system is absent, not an OSError
    for p in inputs:
        if os.path.lexists(p) and not os.path.isdir(p):
            found.append(p)  # a FIFO, a device or a link loop too: reading it says what it is
        elif os.path.isfile(p / "qualify.json"):
            found.append(p / "qualify.json")
        elif os.path.isdir(p):
            below = sorted(f for depth in range(1, SEARCH_DEPTH + 1) for f in p.glob("/".join(["*"] * depth) + "/qualify.json"))
            if not below:
                msg = f"no qualify.json in {p} or the {SEARCH_DEPTH} levels below it; give qualification report directories (reports/*-qualify-*)"
                raise UsageError(msg)
            found.extend(below)
        else:
            msg = f"{p} does not exist; give qualification report directories (reports/*-qualify-*) or their qualify.json"
            raise UsageError(msg)
    unique = list(dict.fromkeys(Path(os.path.realpath(f)) for f in found))  # no RuntimeError on a link loop
    if len(unique) < 2:
        msg = f"merging needs at least two qualification reports, found {len(unique)} ({', '.join(map(str, unique)) or 'none'})"
        raise UsageError(msg)
    return unique


_CPU_NOISE = re.compile(r"\((?:R|TM|tm)\)|\bCPU\b|\bProcessor\b|@.*$|\b\d+-Core\b")


def _base_label(doc: dict[str, Any]) -> str:
    h = doc.get("host") or {}
    cpu = " ".join(_CPU_NOISE.sub(" ", str(h.get("cpu_model") or "?")).split())
    label = f"{cpu} {h.get('arch', '?')} [{h.get('microarch', '?')}]"
    forced = doc.get("cpu_level_forced")
    return f"{label} level={forced}" if forced else label


def load_reports(inputs: Sequence[Path]) -> list[HostReport]:
    """Read every report, label its column, and refuse a mix of engines, pins or patch series."""
    docs: list[tuple[Path, dict[str, Any]]] = []
    for f in find_reports(inputs):
        # a regular file within the report limit: a FIFO or /dev/zero is refused unread
        text = read_text(f, kind="report", error=UsageError)
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as e:
            msg = f"cannot read {f} as a qualification report: {str(e)[:200]}"
            raise UsageError(msg) from None
        if not isinstance(doc, dict) or "stages" not in doc or "pin" not in doc:
            msg = f"{f} is not a qualification report (no pin/stages); `harness qualify` writes them"
            raise UsageError(msg)
        docs.append((f, doc))
    check_same_pin(docs)
    bases = [_base_label(d) for _, d in docs]
    reports = []
    for i, ((f, doc), base) in enumerate(zip(docs, bases, strict=True)):
        n = bases[:i].count(base) + 1
        label = base if bases.count(base) == 1 else f"{base} #{n}"
        reports.append(HostReport(label=label, path=f.parent, doc=doc))
    return reports


def check_same_pin(docs: Sequence[tuple[Path, dict[str, Any]]]) -> None:
    """Raise :class:`ReportMismatchError` naming each report's engine, pin, upstream commit and
    patch series when they are not all the same."""
    def key(doc: dict[str, Any]) -> tuple[str, str, str, str]:
        return (str(doc.get("engine")), str(doc.get("pin")), str((doc.get("upstream") or {}).get("commit")),
                (series_hash(doc) or "unknown")[:12])

    keys = [key(d) for _, d in docs]
    unknown = [f for (f, d) in docs if series_hash(d) is None]
    if len(set(keys)) == 1 and not unknown:
        return
    lines = [f"  {f.parent}: {k[0]} {k[1]} (upstream {k[2]}), patch series {k[3]}"
             + (" (its patch stage did not pass: the series cannot be matched)" if f in unknown else "")
             for (f, _), k in zip(docs, keys, strict=True)]
    msg = ("refusing to merge reports of different engines, pins or patch series:\n" + "\n".join(lines)
           + "\nmerge only qualifications of one pin and one patch series (their differences are then the hosts')")
    raise ReportMismatchError(msg)


# -- what the merge computes ---------------------------------------------------------------------


def stage_names(reports: Iterable[HostReport]) -> list[str]:
    names: dict[str, None] = {}
    for r in reports:
        for s in r.doc.get("stages", []):
            names.setdefault(str(s["name"]), None)
    return list(names)


def level_outcomes(r: HostReport) -> dict[str, dict[str, Any]]:
    """CPU level -> what this host did with it: ``run`` (ran ok / diverged / crashed / failed / not run
    here), ``audit`` (clean / findings), ``chosen`` (ggml's choice here) and ``excluded`` (the smoke
    probe's reason)."""
    out: dict[str, dict[str, Any]] = {}
    cross = r.stage("cross-variant")
    for run in ((cross or {}).get("data") or {}).get("runs") or []:
        level = run.get("cpu_level")
        if not level or run.get("label") == run.get("variant"):
            continue  # the unforced run: ggml's own choice, shown by `chosen`
        status = run.get("status", "ran")
        if status == "ran":
            div = run.get("diverges_at")
            what = "ran ok" if run.get("ok") else "ran, wrong answer"
            what += f", diverges at token {div}" if div is not None else ""
        elif status == "not-run":
            what = "not run here"
        else:
            what = f"{status.upper()}: {run.get('error', '')}".strip()
        out.setdefault(level, {})["run"] = what
        out[level]["run_ok"] = status in ("ran", "not-run") and bool(run.get("ok"))
        out[level]["run_status"] = status
    audit = r.stage("isa-audit")
    for a in ((audit or {}).get("data") or {}).get("levels") or []:
        out.setdefault(a["level"], {})["audit"] = "clean" if a.get("clean") else "FINDINGS"
    probe = ((r.stage("cpu-levels") or {}).get("data") or {})
    if probe.get("chosen"):
        out.setdefault(probe["chosen"], {})["chosen"] = True
    for level, why in (probe.get("excluded") or {}).items():
        out.setdefault(level, {})["excluded"] = why
    return out


def _level_cell(o: dict[str, Any] | None) -> str:
    if not o:
        return "-"
    parts = [p for p in (o.get("run"), f"audit {o['audit']}" if o.get("audit") else None,
                         "ggml's choice here" if o.get("chosen") else None,
                         f"EXCLUDED by the smoke probe: {o['excluded']}" if o.get("excluded") else None) if p]
    return "; ".join(parts)


def _level_fails(o: dict[str, Any]) -> str | None:
    if o.get("excluded"):
        return f"excluded by the smoke probe ({o['excluded']})"
    if o.get("run_status") in ("crashed", "failed"):
        return str(o["run"]).lower()
    if "run_ok" in o and not o["run_ok"]:
        return str(o["run"])
    if o.get("audit") == "FINDINGS":
        return "audit findings"
    return None


def _level_passes(o: dict[str, Any]) -> bool:
    return _level_fails(o) is None and (o.get("run_status") == "ran" or o.get("audit") == "clean" or bool(o.get("chosen")))


def bench_rows(r: HostReport) -> list[dict[str, Any]]:
    """This host's headline ratios: one row per bench stage and metric, with its 95% interval."""
    rows = []
    for s in r.doc.get("stages", []):
        data = s.get("data") or {}
        for h in data.get("headline") or []:
            speed = h.get("speed") or {}
            rows.append({"stage": s["name"], "model": data.get("model", ""), "metric": h.get("label", h.get("key")),
                         "key": h.get("key"), "point": speed.get("point"), "lo": speed.get("lo"), "hi": speed.get("hi"),
                         "verdict": h.get("verdict", ""), "stage_status": s.get("status")})
    return rows


def _side(row: dict[str, Any]) -> int:
    """+1: the interval is above 1 (B faster); -1: below (B slower); 0: it spans 1."""
    lo, hi = row.get("lo"), row.get("hi")
    if lo is None or hi is None:
        return 0
    return 1 if lo > 1 else -1 if hi < 1 else 0


def differences(reports: Sequence[HostReport]) -> list[dict[str, str]]:
    """What differs between hosts and matters: stage verdicts, CPU levels, bench ratios that flip."""
    diffs: list[dict[str, str]] = []
    for name in stage_names(reports):
        status = {r.label: (r.stage(name) or {}).get("status", "missing") for r in reports}
        others = set(status.values()) - {"failed"}
        # a failure matters beside a pass, and beside a host whose report lacks the stage (an older
        # harness, or a stage this host's run did not have): "the same verdict" cannot be claimed
        if "failed" in status.values() and others & {"passed", "missing"}:
            failed = [r for r in reports if status[r.label] == "failed"]
            passed = [h for h, s in status.items() if s == "passed"]
            missing = [h for h, s in status.items() if s == "missing"]
            head = f"stage {name} passes on {', '.join(passed)} and fails on " if passed else f"stage {name} fails on "
            tail = f"; not in the report of {', '.join(missing)}" if missing else ""
            diffs.append({"kind": "stage", "what": name, "detail": (
                head + "; ".join(f"{r.label} ({((r.stage(name) or {}).get('summary') or '').splitlines()[0][:200]})"
                                 for r in failed) + tail)})
    outcomes = {r.label: level_outcomes(r) for r in reports}
    levels = sorted({lvl for o in outcomes.values() for lvl in o})
    for level in levels:
        per = {h: o[level] for h, o in outcomes.items() if level in o}
        passing = [h for h, o in per.items() if _level_passes(o)]
        failing = {h: why for h, o in per.items() if (why := _level_fails(o))}
        if passing and failing:
            diffs.append({"kind": "cpu-level", "what": level, "detail": (
                f"cpu level {level} passes on {', '.join(passing)} and fails on "
                + "; ".join(f"{h}: {why}" for h, why in failing.items()))})
    by_metric: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in reports:
        for row in bench_rows(r):
            by_metric.setdefault((row["stage"], row["metric"]), {})[r.label] = row
    for (stage, metric), per_host in by_metric.items():
        faster = [h for h, row in per_host.items() if _side(row) > 0]
        slower = [h for h, row in per_host.items() if _side(row) < 0]
        if faster and slower:
            diffs.append({"kind": "ratio-flip", "what": f"{stage}: {metric}", "detail": (
                f"{stage} {metric}: B faster on {', '.join(f'{h} {_ratio(per_host[h])}' for h in faster)}, "
                f"B slower on {', '.join(f'{h} {_ratio(per_host[h])}' for h in slower)}")})
    return diffs


def _ratio(row: dict[str, Any]) -> str:
    if row.get("point") is None:
        return "n/a"
    return f"{row['point']:.3f}x [{row['lo']:.3f}, {row['hi']:.3f}]"


# -- output --------------------------------------------------------------------------------------


def merge(reports: Sequence[HostReport]) -> dict[str, Any]:
    """The merged report as JSON-ready data."""
    first = reports[0].doc
    outcomes = {r.label: level_outcomes(r) for r in reports}
    levels = sorted({lvl for o in outcomes.values() for lvl in o})
    hosts = []
    for r in reports:
        h = r.doc.get("host") or {}
        hosts.append({"label": r.label, "report": str(r.path), "passed": bool(r.doc.get("passed")),
                      "os": h.get("os"), "arch": h.get("arch"), "cpu_model": h.get("cpu_model"),
                      "microarch": h.get("microarch"), "cores": h.get("cores"), "memory_bytes": h.get("memory_bytes"),
                      "cpu_level_forced": r.doc.get("cpu_level_forced"), "threads": r.doc.get("threads"),
                      "started_at": r.doc.get("started_at"),
                      "variants": [b["variant"] for b in (((r.stage("build") or {}).get("data") or {}).get("built") or [])]})
    return {
        "engine": first.get("engine"), "pin": first.get("pin"), "upstream": first.get("upstream"),
        "series_hash": reports[0].series, "passed": all(r.doc.get("passed") for r in reports),
        "merged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hosts": hosts,
        "stages": [{"name": n, "per_host": {r.label: {k: (r.stage(n) or {}).get(k) for k in ("status", "seconds", "summary")}
                                              for r in reports}} for n in stage_names(reports)],
        "cpu_levels": [{"level": lvl, "per_host": {h: {k: v for k, v in o[lvl].items()} for h, o in outcomes.items() if lvl in o}}
                       for lvl in levels],
        "bench": {r.label: bench_rows(r) for r in reports},
        "differences": differences(reports),
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(m: dict[str, Any]) -> str:
    labels = [h["label"] for h in m["hosts"]]
    up = m.get("upstream") or {}
    lines = [f"# Qualification of {m['engine']} {m['pin']} on {len(labels)} hosts "
             f"({'ALL PASSED' if m['passed'] else 'NOT ALL PASSED'})", "",
             f"upstream build {up.get('build')} ({up.get('commit')}), patch series {(m['series_hash'] or '?')[:12]}; "
             f"merged {m['merged_at']} by `harness report merge`. Figures are each host's own: nothing is averaged "
             "across hosts.", "", "## Hosts", "",
             "| host | cpu | cores | memory | forced CPU level | threads | variants | result | report |",
             "|---|---|---:|---:|---|---:|---|---|---|"]
    for h in m["hosts"]:
        mem = f"{h['memory_bytes'] / 2**30:.1f} GiB" if h.get("memory_bytes") else "?"
        lines.append(f"| {h['label']} | {_cell(str(h['cpu_model']))} ({h['os']} {h['arch']}) | {h['cores']} | {mem} | "
                     f"{h['cpu_level_forced'] or '-'} | {h['threads'] or '?'} | {', '.join(h['variants']) or '-'} | "
                     f"{'passed' if h['passed'] else 'FAILED'} | `{Path(h['report']).name}` |")
    lines += ["", "## Differences that matter", ""]
    if m["differences"]:
        lines += [f"- **{d['kind']}** {_cell(d['detail'])}" for d in m["differences"]]
    else:
        lines.append("None: every stage has the same verdict on every host, no CPU level passes on one host and "
                     "fails on another, and no headline ratio is faster on one host and slower on another.")
    lines += ["", "## Stages", "", "| stage | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for s in m["stages"]:
        cells = []
        for h in labels:
            st = s["per_host"][h]
            cells.append("-" if st["status"] is None else f"{st['status']} ({st['seconds'] or 0:.1f} s)")
        lines.append(f"| {s['name']} | " + " | ".join(cells) + " |")
    if m["cpu_levels"]:
        lines += ["", "## CPU levels run or audited per host", "",
                  "Run: the cross-variant stage forced the level on that host; audit: the static ISA audit "
                  "(levels a host cannot run are covered there).", "",
                  "| level | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        for lvl in m["cpu_levels"]:
            lines.append(f"| {lvl['level']} | " + " | ".join(_cell(_level_cell(lvl["per_host"].get(h))) for h in labels) + " |")
    metrics: dict[tuple[str, str, str], None] = {}
    for rows in m["bench"].values():
        for row in rows:
            metrics.setdefault((row["stage"], row["model"], row["metric"]), None)
    if metrics:
        lines += ["", "## Benchmark headlines per host (B/A speed, 95% interval)", "",
                  "Each host's ratio of its own A/B run; hosts are not averaged.", "",
                  "| stage | model | metric | " + " | ".join(labels) + " |", "|---|---|---|" + "---|" * len(labels)]
        for stage, model, metric in metrics:
            cells = []
            for h in labels:
                row = next((r for r in m["bench"][h] if (r["stage"], r["metric"]) == (stage, metric)), None)
                cells.append("-" if row is None else f"{_ratio(row)} {row['verdict']}".strip())
            lines.append(f"| {stage} | {model} | {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_merged(inputs: Sequence[Path], out: Path | None = None) -> tuple[dict[str, Any], Path]:
    """Load, check and merge the reports; write ``merged.json`` and ``merged.md`` into ``out``
    (default ``reports/<timestamp>-merged-qualify-<engine>/``)."""
    reports = load_reports(inputs)
    m = merge(reports)
    if out is None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        out = paths.reports_dir() / f"{stamp}-merged-qualify-{m['engine']}"
    out.mkdir(parents=True, exist_ok=True)
    from harness.core.paths import redact

    (out / "merged.json").write_text(redact(json.dumps(m, indent=2, default=str)) + "\n")
    (out / "merged.md").write_text(redact(render_markdown(m)))
    return m, out
