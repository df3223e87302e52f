"""``harness report merge``: qualification reports from several hosts side by side.

The inputs start from the committed reference qualification (the real format qualify writes);
a second host is that report with what another host would change (a CPU level that crashed, a
ratio on the other side of 1, another pin).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.core.errors import ReportMismatchError, UsageError
from harness.qualify.merge import find_reports, load_reports, merge, render_markdown, series_hash

REPORTS = Path(__file__).parents[2] / "reports"
# A real qualification (this project's machine, 2026-12-01, patch series 77d0126a7654), kept as
# test data when the committed reference moved on: the figures below are its own.
REFERENCE = Path(__file__).parent / "data" / "qualify-20261201-series-77d0126a7654"
OLDER_SERIES = REPORTS / "reference-20261129-qualify-llamacpp-from-0.3.35"


def reference() -> dict[str, Any]:
    return dict(json.loads((REFERENCE / "qualify.json").read_text()))


def write(tmp: Path, name: str, doc: dict[str, Any]) -> Path:
    d = tmp / name
    d.mkdir(parents=True)
    (d / "qualify.json").write_text(json.dumps(doc))
    return d


def stage(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["stages"] if s["name"] == name)


def other_host(doc: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    d["host"].update(cpu_model="Intel(R) Xeon(R) Platinum 8480+", microarch="sapphirerapids", cores=8)
    return d


def test_series_from_summary_of_reports_written_before_it_was_recorded() -> None:
    assert series_hash(reference()) == "77d0126a7654"
    doc = reference()
    stage(doc, "patch")["data"]["series_hash"] = "77d0126a7654" + "0" * 52
    assert series_hash(doc) == "77d0126a7654" + "0" * 52


def test_same_report_twice_has_no_differences_and_numbered_columns(tmp_path: Path) -> None:
    reports = load_reports([write(tmp_path, "a", reference()), write(tmp_path, "b", reference())])
    assert [r.label for r in reports] == ["AMD EPYC x86_64 [x86_64_v4] #1", "AMD EPYC x86_64 [x86_64_v4] #2"]
    m = merge(reports)
    assert m["differences"] == []
    assert m["pin"] == "0.3.36" and m["series_hash"] == "77d0126a7654"
    levels = {lvl["level"]: lvl["per_host"] for lvl in m["cpu_levels"]}
    assert levels["zen4"]["AMD EPYC x86_64 [x86_64_v4] #1"]["chosen"] is True
    assert levels["sapphirerapids"]["AMD EPYC x86_64 [x86_64_v4] #1"] == {
        "run": "not run here", "run_ok": True, "run_status": "not-run", "audit": "clean"}
    md = render_markdown(m)
    assert "| e2e | passed (56.5 s) | passed (56.5 s) |" in md
    assert "1.189x [1.149, 1.230] B faster" in md


def test_level_crashing_on_one_host_and_a_flipped_ratio_are_named(tmp_path: Path) -> None:
    b = other_host(reference())
    runs = stage(b, "cross-variant")["data"]["runs"]
    haswell = next(r for r in runs if r["cpu_level"] == "haswell")
    haswell.update(status="crashed", ok=False, error="SIGILL in the greedy run")
    stage(b, "cross-variant")["status"] = "failed"
    stage(b, "cross-variant")["summary"] = "HarnessError: cpu/haswell: SIGILL in the greedy run"
    decode = next(h for h in stage(b, "bench")["data"]["headline"] if h["name"] == "decode")
    decode["speed"] = {"point": 0.91, "lo": 0.88, "hi": 0.94}
    decode["verdict"] = "B slower"
    m = merge(load_reports([write(tmp_path, "amd", reference()), write(tmp_path, "intel", b)]))
    kinds = {d["kind"]: d["detail"] for d in m["differences"]}
    assert set(kinds) == {"stage", "cpu-level", "ratio-flip"}
    assert kinds["stage"].startswith("stage cross-variant passes on AMD EPYC x86_64 [x86_64_v4] and fails on "
                                     "Intel Xeon Platinum 8480+ x86_64 [sapphirerapids]")
    assert kinds["cpu-level"] == ("cpu level haswell passes on AMD EPYC x86_64 [x86_64_v4] and fails on "
                                  "Intel Xeon Platinum 8480+ x86_64 [sapphirerapids]: crashed: sigill in the greedy run")
    assert "B faster on AMD EPYC x86_64 [x86_64_v4] 1.189x [1.149, 1.230]" in kinds["ratio-flip"]
    assert "B slower on Intel Xeon Platinum 8480+ x86_64 [sapphirerapids] 0.910x [0.880, 0.940]" in kinds["ratio-flip"]
    # each host's own interval, never a mean of the two
    assert not any("1.05" in line for line in render_markdown(m).splitlines() if "decode @ c=1" in line)


def test_a_stage_failing_where_another_report_lacks_it_is_named(tmp_path: Path) -> None:
    """A stage new on one host (an engine-ceiling stage, say) that fails there is a difference, though
    no host passed it: 'the same verdict on every host' cannot be claimed."""
    b = other_host(reference())
    b["stages"].append({"name": "ceiling-bandwidth", "status": "failed", "seconds": 74.8, "data": {},
                        "summary": "m.gguf, cpu level sapphirerapids: binding / llama-bench decode 0.961x"})
    m = merge(load_reports([write(tmp_path, "amd", reference()), write(tmp_path, "intel", b)]))
    details = [d["detail"] for d in m["differences"] if d["kind"] == "stage"]
    assert details == ["stage ceiling-bandwidth fails on Intel Xeon Platinum 8480+ x86_64 [sapphirerapids] "
                       "(m.gguf, cpu level sapphirerapids: binding / llama-bench decode 0.961x); "
                       "not in the report of AMD EPYC x86_64 [x86_64_v4]"]


def test_an_interval_spanning_one_is_not_a_flip(tmp_path: Path) -> None:
    b = other_host(reference())
    decode = next(h for h in stage(b, "bench")["data"]["headline"] if h["name"] == "decode")
    decode["speed"] = {"point": 0.99, "lo": 0.95, "hi": 1.03}
    m = merge(load_reports([write(tmp_path, "a", reference()), write(tmp_path, "b", b)]))
    assert m["differences"] == []


def test_forced_level_names_the_column(tmp_path: Path) -> None:
    b = reference()
    b["cpu_level_forced"] = "haswell"
    reports = load_reports([write(tmp_path, "a", reference()), write(tmp_path, "b", b)])
    assert [r.label for r in reports] == ["AMD EPYC x86_64 [x86_64_v4]", "AMD EPYC x86_64 [x86_64_v4] level=haswell"]


def test_different_patch_series_are_refused_naming_both() -> None:
    with pytest.raises(ReportMismatchError) as e:
        load_reports([REFERENCE, OLDER_SERIES])
    assert "patch series 77d0126a7654" in str(e.value) and "patch series 1ed7d3b9db0b" in str(e.value)
    assert str(OLDER_SERIES.resolve()) in str(e.value)


def test_different_pins_are_refused(tmp_path: Path) -> None:
    b = reference()
    b["pin"] = "0.3.37"
    with pytest.raises(ReportMismatchError) as e:
        load_reports([write(tmp_path, "a", reference()), write(tmp_path, "b", b)])
    assert f"{tmp_path / 'a'}: llamacpp 0.3.36" in str(e.value) and f"{tmp_path / 'b'}: llamacpp 0.3.37" in str(e.value)


def test_a_report_without_a_series_is_refused(tmp_path: Path) -> None:
    b = reference()
    stage(b, "patch").update(status="failed", summary="0002: conflicts", data={})
    with pytest.raises(ReportMismatchError, match=r"patch series unknown \(its patch stage did not pass"):
        load_reports([write(tmp_path, "a", reference()), write(tmp_path, "b", b)])


def test_finds_reports_in_downloaded_ci_artifacts(tmp_path: Path) -> None:
    write(tmp_path / "artifacts" / "qualify-llamacpp-cpu-linux-x86_64", "20261201T000000Z-qualify-llamacpp", reference())
    write(tmp_path / "artifacts" / "qualify-llamacpp-cpu-linux-aarch64", "20261201T000001Z-qualify-llamacpp", reference())
    assert len(find_reports([tmp_path / "artifacts"])) == 2
    with pytest.raises(UsageError, match="at least two"):
        find_reports([REFERENCE, REFERENCE / "qualify.json"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"no qualify\.json"):
        find_reports([tmp_path / "empty", REFERENCE])


def test_cli_writes_markdown_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = write(tmp_path, "a", reference()), write(tmp_path, "b", other_host(reference()))
    assert cli.main(["report", "merge", str(a), str(b), "--out", str(tmp_path / "out"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["report"] == str(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "merged.json").read_text())["hosts"][1]["cpu_model"].startswith("Intel")
    assert (tmp_path / "out" / "merged.md").read_text().startswith("# Qualification of llamacpp 0.3.36 on 2 hosts")
    assert cli.main(["report", "merge", str(REFERENCE), str(OLDER_SERIES), "--out", str(tmp_path / "no")]) == 2
    assert not (tmp_path / "no").exists()
