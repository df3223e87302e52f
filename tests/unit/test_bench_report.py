"""Bench reports: the files written, their shape, compare, and the CLI (bench --aa, report compare)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.bench.abba import BenchConfig, BenchResult, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.report import compare, load_results, write_report
from harness.core.errors import BenchError, UsageError

FAKE = ("harness_plugins.bench_fake",)
HOST = {"cpu_model": "Test CPU", "cores": 2}
MEASURE = {"bandwidth_gbs": 20.0, "gemm_gflops": 100.0, "measured_at": "2025-01-01T00:00:00+00:00"}


def _run(a: str, b: str, name: str, **cfg: Any) -> BenchResult:
    return run_abba(ArmSpec.parse(a), ArmSpec.parse(b), BenchConfig(**cfg), name=name, isolate=False,
                    extra_plugins=FAKE)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("reports")
    result = _run("fake", "fake:slowdown=1.1,outlier_block=3", "fake vs slower/10%")
    return write_report(result, out=out, host=HOST, host_measure=MEASURE)


def test_report_directory_and_files(report: Any) -> None:
    d = report.directory
    assert d.name.endswith("-fake-vs-slower-10-") or d.name.endswith("-fake-vs-slower-10")
    assert d.name[:8].isdigit() and "T" in d.name[:16]
    assert {p.name for p in d.iterdir()} == {"results.json", "report.md", "samples.png", "ratios.png"}
    for png in report.plots:
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_results_json_keeps_every_sample_and_both_arms(report: Any) -> None:
    doc = load_results(report.results)
    assert doc["schema"] == "harness.bench/1"
    assert {"name", "config", "arms", "samples", "host", "host_measure", "analysis", "findings",
            "roofline", "started_at", "finished_at"} <= set(doc)
    assert doc["config"]["order"] == list("ABBAABBA")
    assert len(doc["samples"]) == 4 * 2 * 2
    sample = doc["samples"][0]
    assert {"arm", "block", "position", "sequence", "concurrency", "ttft_s", "decode_tps",
            "aggregate_tps", "peak_rss_bytes", "started_at", "finished_at"} <= set(sample)
    for role in ("A", "B"):
        arm = doc["arms"][role]
        assert arm["kind"] == "fake" and arm["describe"]["pin"] and arm["describe"]["model"]["bytes"]
    assert doc["host"]["cpu_model"] == "Test CPU"
    assert 0 < doc["roofline"]["A"]["decode_pct"] < 100
    assert doc["analysis"]["metrics"]["decode_tps@c1"]["arms"]["B"]["outliers"] == [3]
    # the document is self-contained: the result can be rebuilt from it
    assert len(BenchResult.from_dict(doc).samples) == 16


def test_markdown_has_the_seed_shaped_table(report: Any) -> None:
    md = report.markdown.read_text()
    assert ("| configuration | prefill TTFT | warm throughput | ratio to baseline (95% CI) | "
            "% of roofline |") in md
    b_row = next(line for line in md.splitlines() if line.startswith("| B: "))
    assert " ms" in b_row and "tok/s" in b_row and "% of A" in b_row and "[" in b_row
    assert "of 20.0 GB/s" in b_row
    assert "arm B block 3" in md and "outlier" in md
    assert "![samples](samples.png)" in md and "![ratios](ratios.png)" in md
    assert "A B B A A B B A" in md


def test_report_dir_never_overwrites(tmp_path: Path) -> None:
    r = _run("fake", "fake", "same", blocks=2, concurrency=(1,))
    first = write_report(r, out=tmp_path, plots=False)
    second = write_report(r, out=tmp_path, plots=False)
    assert first.directory != second.directory and second.directory.name.endswith("-2")


def test_compare_flags_a_regression_beyond_noise(tmp_path: Path) -> None:
    old = write_report(_run("fake:seed=1", "fake:seed=1", "old"), out=tmp_path, plots=False)
    new = write_report(_run("fake:seed=2", "fake:seed=2,slowdown=1.1", "new"), out=tmp_path,
                       plots=False)
    comp = compare(old.results, new.results)
    reg = {(r.metric, r.what) for r in comp.regressions}
    assert ("decode_tps@c1", "B/A") in reg and ("ttft_ms@c1", "B/A") in reg
    row = next(r for r in comp.rows if r.metric == "decode_tps@c1" and r.what == "B/A")
    assert row.change_pct < -5 and row.z is not None and row.z < -1.96
    # the baseline did not move: no regression reported for A
    assert all(r.verdict == "within noise" for r in comp.rows if r.what == "A")
    # the other way round it is an improvement, and a run against itself is within noise
    assert not compare(new.results, old.results).regressions
    assert not compare(old.directory, old.results).regressions


def test_load_results_rejects_other_json(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(UsageError, match="expected schema"):
        load_results(p)
    with pytest.raises(UsageError, match="cannot read"):
        load_results(tmp_path / "missing.json")


@pytest.fixture
def harness_cli(monkeypatch: pytest.MonkeyPatch, cache: Path) -> Any:
    """``harness.cli.main`` with the bench commands registered and a fixed host probe."""
    from harness.core import host

    monkeypatch.setattr(host, "probe", lambda: None)
    monkeypatch.setattr(host, "as_dict", lambda h: dict(HOST))
    return cli.main


def test_cli_bench_aa_in_worker_processes(harness_cli: Any, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc = harness_cli(["bench", "--aa", "--a", "fake:seed=5", "--blocks", "4", "--no-roofline",
                      "--no-plots", "--plugin", FAKE[0], "--out", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["aa"] is True and out["aa_ok"] is True
    s = out["summary"]["decode_tps@c1"]
    assert s["lo"] <= 1.0 <= s["hi"]
    doc = load_results(out["results"])
    assert doc["isolated"] is True and doc["aa"] is True
    # the arms get the host's threads (its physical cores), and the report records them
    from harness.core.host import default_threads

    threads = default_threads()
    assert doc["arms"]["A"]["options"] == doc["arms"]["B"]["options"] == {"seed": 5, "threads": threads}
    assert doc["system"]["threads"] == threads and "physical cores" in doc["system"]["threads_source"]
    assert doc["arms"]["A"]["name"] == "fake" and doc["arms"]["A"]["spec"] == f"fake:seed=5,threads={threads}"


def test_cli_usage_errors(harness_cli: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert harness_cli(["bench", "--a", "fake"]) == 2
    assert harness_cli(["bench", "--aa", "--a", "fake", "--b", "fake"]) == 2
    assert harness_cli(["bench", "--a", "fake", "--b", "fake", "--concurrency", "0"]) == 2
    assert "expected --b" in capsys.readouterr().err


def test_cli_report_compare_exit_code(harness_cli: Any, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    old = write_report(_run("fake", "fake", "old"), out=tmp_path, plots=False)
    new = write_report(_run("fake", "fake:slowdown=1.1", "new"), out=tmp_path, plots=False)
    assert harness_cli(["report", "compare", str(old.results), str(new.results)]) == BenchError.exit_code
    assert "regression" in capsys.readouterr().out
    assert harness_cli(["report", "compare", str(new.results), str(old.results), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["regressions"] == []


def test_findings_are_grouped_by_kind(report: Any) -> None:
    md = report.markdown.read_text()
    findings = md.split("## Findings", 1)[1].split("\n## ", 1)[0]
    # B's outlier block shows in several metrics: one titled bullet, one short line per metric
    assert findings.count("- **warning** (") >= 1
    head = next(line for line in findings.splitlines() if "outlier samples" in line)
    n = int(head.split("(", 1)[1].split(")", 1)[0])
    assert n >= 3 and head.startswith("- **warning** (")
    subs = [line for line in findings.splitlines() if line.startswith("  - `") and "arm B block 3" in line]
    assert len(subs) == n
    assert sum(1 for line in findings.splitlines() if "is an outlier" in line) == 0, "no near-duplicate sentences"


def test_prefill_is_also_tok_s_and_plots_fold_with_attach_instructions(report: Any) -> None:
    md = report.markdown.read_text()
    b_row = next(line for line in md.splitlines() if line.startswith("| B: "))
    assert " ms ±" in b_row and "tok/s)" in b_row.split("|")[2]
    plots = md.split("## Plots", 1)[1]
    assert plots.lstrip().startswith("<details><summary>")
    assert "Drag ratios.png and samples.png from that directory into the comment box" in plots


def test_embedded_plots_need_no_files(tmp_path: Path) -> None:
    files = write_report(_run("fake", "fake", "embed", blocks=2, concurrency=(1,)), out=tmp_path,
                         embed_plots=True)
    md = files.markdown.read_text()
    assert "![ratios](data:image/png;base64,iVBOR" in md and "![samples](data:image/png;base64," in md
    assert "](ratios.png)" not in md


def test_results_json_holds_json_values_only(tmp_path: Path) -> None:
    """Whatever an arm's describe() hands out (a build-info dict, paths, tuples, numpy), JSON gets values."""
    import dataclasses

    import numpy as np

    from harness.core.jsonvalue import json_value

    odd = {"build_info": {"build_number": 0, "commit": "unknown"}, "path": Path("/m/x.gguf"), "shape": (1, 2),
           "n": np.int64(3), "x": np.float32(0.5), "nan": float("nan"), 7: {"set": {1}}}
    assert json_value(odd) == {"build_info": {"build_number": 0, "commit": "unknown"}, "path": "/m/x.gguf",
                               "shape": [1, 2], "n": 3, "x": 0.5, "nan": None, "7": {"set": [1]}}
    r = _run("fake", "fake", "json", blocks=2, concurrency=(1,))
    r = dataclasses.replace(r, describe={**r.describe, "A": {**r.describe["A"], "odd": odd}})
    files = write_report(r, out=tmp_path, plots=False)
    text = files.results.read_text()
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["arms"]["A"]["describe"]["odd"]["build_info"] == {"build_number": 0, "commit": "unknown"}
    assert "{'" not in text and "PosixPath" not in text and "np.float" not in text
    assert doc["arms"]["A"]["spec"] == "fake" and doc["arms"]["A"]["name"] == "fake"


def test_long_arm_names_fit_the_legend() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from harness.bench.plots import fit_label, samples_figure
    from harness.bench.stats import analyze

    long_a = "in-process:model=/root/.cache/harness/models/SmolLM2-135M-Instruct.Q4_1.gguf,variant=cpu,threads=16"
    assert len(fit_label(long_a)) == 40 and fit_label(long_a).startswith("in-process:") and "…" in fit_label(long_a)
    assert fit_label("xllamacpp") == "xllamacpp"
    r = _run("fake", "fake:slowdown=1.1", "legend", blocks=2, concurrency=(1,))
    for names in ({"A": long_a, "B": long_a + ",n_ctx=2624"}, {"A": "xllamacpp", "B": "in-process:cpu"}):
        fig = samples_figure(analyze(r.samples), names)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        box = fig.legends[0].get_window_extent(canvas.get_renderer())
        assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1, names
