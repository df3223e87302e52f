"""The regression gate (--fail-on-slower), headline speed ratios, and compare --markdown."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.bench.abba import BenchConfig, BenchResult, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.gate import evaluate, headlines, parse_gate, resolve_gate
from harness.bench.report import write_report
from harness.bench.stats import analyze
from harness.core.errors import BenchError, GateUndecidedError, UsageError

FAKE = ("harness_plugins.bench_fake",)
HOST = {"cpu_model": "Test CPU", "cores": 2}


def _run(a: str, b: str, **cfg: Any) -> BenchResult:
    return run_abba(ArmSpec.parse(a), ArmSpec.parse(b), BenchConfig(**cfg), isolate=False, extra_plugins=FAKE,
                    record_system=False)


@pytest.fixture
def harness_cli(monkeypatch: pytest.MonkeyPatch, cache: Path) -> Any:
    from harness.core import host

    monkeypatch.setattr(host, "probe", lambda: None)
    monkeypatch.setattr(host, "as_dict", lambda h: dict(HOST))
    return cli.main


BENCH = ["bench", "--no-roofline", "--no-plots", "--plugin", FAKE[0], "--blocks", "4"]


def test_ten_percent_slower_fails_a_five_percent_gate_and_aa_does_not(
        harness_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's "done when": a synthetic 10% regression exits non-zero; an A/A run does not."""
    rc = harness_cli([*BENCH, "--a", "fake", "--b", "fake:slowdown=1.1", "--fail-on-slower", "5",
                      "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert rc == BenchError.exit_code
    text = captured.out + captured.err
    # the metric, the ratio and its interval are named
    assert "FAILED on prefill @ c=1, decode @ c=1, aggregate @ c=4" in text
    assert re.search(r"decode @ c=1: B/A 0\.9\d\d \[0\.[89]\d\d, 0\.9\d\d\] \(95% CI, resolves ±\d\.\d%\): B is [89]\.\d% slower, "
                     r"beyond the 5% gate", text)

    rc = harness_cli([*BENCH, "--aa", "--a", "fake", "--fail-on-slower", "5", "--out", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["gate"]["passed"] is True
    assert {c["status"] for c in out["gate"]["checks"]} == {"passed"}


def test_gate_per_metric_and_a_small_slowdown_within_it(harness_cli: Any, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # 10% slower, but only prefill gated at 20%: passes; decode gated at 5%: fails on decode alone
    assert harness_cli([*BENCH, "--a", "fake", "--b", "fake:slowdown=1.1", "--fail-on-slower", "prefill=20",
                        "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["key"] for c in out["gate"]["checks"]] == ["ttft_ms@c1"]
    rc = harness_cli([*BENCH, "--a", "fake", "--b", "fake:slowdown=1.1", "--fail-on-slower", "20,decode=5",
                      "--out", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == BenchError.exit_code
    failed = [c["key"] for c in out["gate"]["checks"] if c["status"] == "FAILED"]
    assert failed == ["decode_tps@c1"]
    # a 2% slowdown is within a 5% gate once the run resolves it; with 4 noisy blocks the prefill and
    # aggregate intervals still straddle 0.95: undecided, which is not a pass
    capsys.readouterr()
    assert harness_cli([*BENCH, "--a", "fake", "--b", "fake:slowdown=1.02", "--fail-on-slower", "5",
                        "--out", str(tmp_path)]) == GateUndecidedError.exit_code
    assert "undecided on prefill @ c=1, aggregate @ c=4 (the run cannot resolve the gate: not a pass)" in \
        capsys.readouterr().out
    assert harness_cli([*BENCH, "--a", "fake", "--b", "fake:slowdown=1.02", "--fail-on-slower", "5",
                        "--blocks", "8", "--out", str(tmp_path)]) == 0


def test_gate_typos_fail_before_the_run(harness_cli: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert harness_cli([*BENCH, "--a", "fake", "--b", "fake", "--fail-on-slower", "decod=5"]) == UsageError.exit_code
    assert "did you mean 'decode'" in capsys.readouterr().err
    assert harness_cli([*BENCH, "--a", "fake", "--b", "fake", "--fail-on-slower", "decode@c8=5"]) == UsageError.exit_code
    assert "concurrency 8 is not measured" in capsys.readouterr().err


def test_parse_and_resolve_gate() -> None:
    assert parse_gate(["5"]) == {"all": 5.0}
    assert parse_gate(["5,decode=3", "aggregate@c4=10"]) == {"all": 5.0, "decode": 3.0, "aggregate@c4": 10.0}
    assert parse_gate({"all": 5, "prefill": 2}) == {"all": 5.0, "prefill": 2.0}
    assert parse_gate(7) == {"all": 7.0} and parse_gate(None) == {}
    assert resolve_gate({"all": 5.0, "decode": 3.0}, (1, 4)) == {
        "ttft_ms@c1": 5.0, "decode_tps@c1": 3.0, "aggregate_tps@c4": 5.0}
    assert resolve_gate({"decode_tps@c4": 2.0, "ttft": 9.0}, (1, 4)) == {"decode_tps@c4": 2.0, "ttft_ms@c1": 9.0}
    # one concurrency level: prefill and decode are the headline
    assert resolve_gate({"all": 5.0}, (1,)) == {"ttft_ms@c1": 5.0, "decode_tps@c1": 5.0}
    for bad in (["-1"], ["100"], ["x=abc"], ["five"]):
        with pytest.raises(UsageError, match="percentage"):
            parse_gate(bad)


def test_speeds_are_b_over_a_with_prefill_from_ttft() -> None:
    r = _run("fake", "fake:slowdown=1.25", blocks=4)
    an = analyze(r.samples)
    heads = {h.name: h for h in headlines(an, r.config.pn)}
    assert list(heads) == ["prefill", "decode", "aggregate"]
    prefill = heads["prefill"]
    ttft_a = an.metrics["ttft_ms@c1"].arms["A"].geomean.point
    assert prefill.a == pytest.approx(512 / (ttft_a / 1000.0))  # prompt tokens per second
    assert prefill.a == pytest.approx(1000.0, rel=0.05)  # the fake's prefill speed
    for h in heads.values():  # B is 25% slower in time: every speed ratio is about 0.8, below 1
        assert h.speed is not None and h.speed.point == pytest.approx(0.8, rel=0.03)
        assert h.speed.hi is not None and h.speed.hi < 1.0 and h.verdict == "B slower"
    gate = evaluate({"ttft_ms@c1": 10.0, "decode_tps@c1": 30.0}, an, r.config.pn)
    assert [c.status for c in gate.checks] == ["FAILED", "passed"]
    assert gate.verdict() == "gate (B >10/30% slower): FAILED on prefill @ c=1"


def test_an_interval_reaching_the_threshold_is_undecided() -> None:
    # 6% slower with a noisy fake: the point is past a 5% gate but the interval is not wholly below it
    r = _run("fake:noise=0.05,seed=3", "fake:noise=0.05,seed=3,slowdown=1.06", blocks=4)
    an = analyze(r.samples)
    check = evaluate({"decode_tps@c1": 5.0}, an, r.config.pn).checks[0]
    assert check.speed is not None and check.speed.lo is not None and check.speed.hi is not None
    assert check.speed.lo < 0.95 < check.speed.hi
    assert check.status == "undecided" and "straddles the floor 0.950" in check.message
    assert "run more blocks" in check.message and check.halfwidth_pct is not None


def test_one_block_cannot_decide() -> None:
    r = _run("fake", "fake:slowdown=2", blocks=1)
    check = evaluate({"decode_tps@c1": 5.0}, analyze(r.samples), r.config.pn).checks[0]
    assert check.status == "undecided" and "no interval (one block)" in check.message


def test_report_shows_headline_and_gate(tmp_path: Path) -> None:
    r = _run("fake", "fake:slowdown=1.1", blocks=4)
    an = analyze(r.samples)
    gate = evaluate(resolve_gate({"all": 5.0}, (1, 4)), an, r.config.pn)
    files = write_report(r, out=tmp_path, analysis=an, host=HOST, plots=False, gate=gate)
    md = files.markdown.read_text()
    assert "## Headline" in md and "| metric | A: fake | B: fake:slowdown=1.1 | B/A speed (95% CI) |" in md
    prefill_row = next(line for line in md.splitlines() if line.startswith("| prefill @ c=1 |"))
    assert "tok/s (TTFT" in prefill_row and "B slower" in prefill_row and "**FAILED (>5%)**" in prefill_row
    assert "**gate (B >5% slower): FAILED on prefill @ c=1, decode @ c=1, aggregate @ c=4**" in md
    doc = json.loads(files.results.read_text())
    assert doc["gate"]["passed"] is False and len(doc["gate"]["checks"]) == 3
    assert [h["name"] for h in doc["headline"]] == ["prefill", "decode", "aggregate"]


def test_compare_markdown_for_a_pull_request(harness_cli: Any, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    old = write_report(_run("fake:seed=1", "fake:seed=1", blocks=4), out=tmp_path, plots=False)
    new = write_report(_run("fake:seed=2", "fake:seed=2,slowdown=1.1", blocks=4), out=tmp_path, plots=False)
    rc = harness_cli(["report", "compare", str(old.results), str(new.results), "--markdown"])
    md = capsys.readouterr().out
    assert rc == BenchError.exit_code
    assert md.startswith("### Benchmark: `fake-vs-fake` → `fake-vs-fake`")
    assert "| metric | old B/A (95% CI) | new B/A (95% CI) | change | verdict |" in md
    decode = next(line for line in md.splitlines() if line.startswith("| decode @ c=1 |"))
    assert "**regression**" in decode and re.search(r"\| -[5-9]\.\d% \|", decode)
    assert "regression(s)** of the candidate" in md and "<details><summary>absolute figures" in md
    assert harness_cli(["report", "compare", str(new.results), str(old.results), "--markdown"]) == 0
    assert "**No regression**" in capsys.readouterr().out


def test_compare_notes_a_change_of_thread_count(tmp_path: Path) -> None:
    from harness.bench.report import compare

    def run(threads: int) -> Path:
        r = run_abba(ArmSpec.parse(f"fake:threads={threads}"), ArmSpec.parse(f"fake:threads={threads}"),
                     BenchConfig(blocks=2, concurrency=(1,)), isolate=False, extra_plugins=FAKE)
        return write_report(r, out=tmp_path, plots=False).results

    comp = compare(run(2), run(8))
    assert "the runs used different thread counts per arm: 2 -> 8" in comp.notes
