"""Adaptive blocks (--until-halfwidth, --max-blocks): the runner adds pairs until the headline is narrow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.bench.abba import BenchConfig, BenchResult, Stop, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.gate import headline_keys
from harness.bench.report import load_results, write_report
from harness.bench.stats import analyze
from harness.core.errors import BenchError

FAKE = ("harness_plugins.bench_fake",)


def _run(a: str, b: str, **cfg: Any) -> BenchResult:
    return run_abba(ArmSpec.parse(a), ArmSpec.parse(b), BenchConfig(**cfg), isolate=False, extra_plugins=FAKE,
                    record_system=False)


def _widths(r: BenchResult) -> dict[str, float | None]:
    an = analyze(r.samples)
    out: dict[str, float | None] = {}
    for k in headline_keys(r.config.concurrency):
        ratio = an.metrics[k].ratio
        out[k] = None if ratio is None else ratio.ratio.half_width_pct
    return out


def test_stops_when_every_headline_interval_is_narrow_enough() -> None:
    r = _run("fake:noise=0.03,seed=4", "fake:noise=0.03,seed=4", blocks=4, until_halfwidth=2.5, max_blocks=40)
    assert r.stop is not None and r.stop.reason == "halfwidth"
    assert 4 < r.blocks_run < 40 and r.blocks_run % 2 == 0, "blocks are added in AB/BA pairs"
    widths = _widths(r)
    assert all(w is not None and w <= 2.5 for w in widths.values())
    assert r.stop.halfwidths == pytest.approx(widths)
    # one pair fewer would not have been enough for some headline metric
    fewer = BenchResult(**{**r.__dict__, "samples": tuple(s for s in r.samples if s.block < r.blocks_run - 2)})
    assert any(w is None or w > 2.5 for w in _widths(fewer).values())
    assert "adaptive: stopped after" in r.stop.text() and "within ±2.5%" in r.stop.text()


def test_max_blocks_stops_a_run_that_cannot_get_narrow() -> None:
    r = _run("fake:noise=0.2,seed=1", "fake:noise=0.2,seed=1", blocks=4, until_halfwidth=1.0, max_blocks=7)
    assert r.stop is not None and r.stop.reason == "max-blocks" and r.blocks_run == 7
    text = r.stop.text()
    assert text.startswith("adaptive: stopped at --max-blocks 7 with") and "the target was not reached" in text
    assert sorted({s.block for s in r.samples}) == list(range(7))
    # the blocks keep alternating AB / BA
    assert [s.arm for s in r.samples if s.concurrency == 1][-2:] == ["A", "B"]


def test_a_narrow_run_stops_at_its_minimum_and_a_fixed_run_says_so() -> None:
    r = _run("fake", "fake:slowdown=1.1", blocks=4, until_halfwidth=5.0)
    assert r.stop == Stop(reason="halfwidth", blocks=4, target_pct=5.0, max_blocks=32, halfwidths=r.stop.halfwidths)
    fixed = _run("fake", "fake", blocks=3, concurrency=(1,))
    assert fixed.stop is not None and fixed.stop.reason == "blocks" and fixed.blocks_run == 3
    assert fixed.stop.text() == "fixed: 3 blocks (--blocks)"


@pytest.mark.parametrize(("cfg", "match"), [
    ({"max_blocks": 10}, "--max-blocks 10 bounds an adaptive run"),
    ({"until_halfwidth": 0.0}, "until-halfwidth in"),
    ({"until_halfwidth": 3.0, "blocks": 6, "max_blocks": 4}, "expected --max-blocks >= --blocks"),
])
def test_adaptive_config_is_checked(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(BenchError, match=match):
        BenchConfig(**cfg)


def test_report_and_results_say_what_stopped_the_run(tmp_path: Path) -> None:
    r = _run("fake:noise=0.2,seed=1", "fake:noise=0.2,seed=1", blocks=2, until_halfwidth=1.0, max_blocks=4)
    files = write_report(r, out=tmp_path, plots=False)
    md = files.markdown.read_text()
    assert "- adaptive: stopped at --max-blocks 4 with" in md
    assert "4 ABBA blocks (A B B A A B B A)" in md
    doc = load_results(files.results)
    assert doc["stop"]["reason"] == "max-blocks" and doc["blocks_run"] == 4
    assert doc["config"]["order"] == list("ABBAABBA") and doc["config"]["blocks"] == 2
    again = BenchResult.from_dict(doc)
    assert again.stop == r.stop and again.config == r.config


def test_cli_until_halfwidth(monkeypatch: pytest.MonkeyPatch, cache: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    from harness.core import host

    monkeypatch.setattr(host, "probe", lambda: None)
    monkeypatch.setattr(host, "as_dict", lambda h: {"cpu_model": "Test CPU", "cores": 2})
    rc = cli.main(["bench", "--a", "fake:noise=0.03", "--b", "fake:noise=0.03", "--until-halfwidth", "2.5",
                   "--max-blocks", "24", "--no-roofline", "--no-plots", "--plugin", FAKE[0], "--in-process",
                   "--out", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["stop"]["reason"] == "halfwidth" and out["blocks"] > 4
    assert cli.main(["bench", "--a", "fake", "--b", "fake", "--max-blocks", "8", "--plugin", FAKE[0]]) == 13
    assert "bounds an adaptive run" in capsys.readouterr().err


def test_a_wall_clock_budget_stops_an_adaptive_run_and_says_what_it_resolved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.bench import abba

    clock = [1000.0]

    def tick() -> float:  # every look at the clock is 1 s later: a block costs a few seconds
        clock[0] += 1.0
        return clock[0]

    monkeypatch.setattr(abba.time, "time", tick)
    # a target no run reaches and a generous block limit: only the budget can stop it
    r = _run("fake:noise=0.05", "fake:noise=0.05", blocks=2, until_halfwidth=0.01, max_blocks=30, max_seconds=60,
             concurrency=(1,))
    assert r.stop is not None and r.stop.reason == "budget"
    assert 2 <= r.blocks_run < 30 and r.blocks_run % 2 == 0
    assert r.stop.text().startswith(f"adaptive: stopped after {r.blocks_run} blocks when the 60 s budget was spent")
    assert "what it resolved: prefill @ c=1 ±" in r.stop.text() and "decode @ c=1 ±" in r.stop.text()
    assert Stop.from_dict(r.stop.as_dict()) == r.stop
    with pytest.raises(BenchError, match="--max-seconds"):
        BenchConfig(blocks=2, max_seconds=60)  # a budget without --until-halfwidth


def test_a_futile_target_stops_after_the_first_blocks_and_says_how_many_it_needs() -> None:
    """With stop_when_futile (qualify's bench stages), noise that needs far more blocks than the limit
    stops the run after its first blocks instead of spending the budget."""
    r = _run("fake:noise=0.2,seed=1", "fake:noise=0.2,seed=1", blocks=4, until_halfwidth=1.0, max_blocks=12,
             stop_when_futile=True)
    assert r.stop is not None and r.stop.reason == "futile" and r.blocks_run == 4
    assert r.stop.needed_blocks is not None and r.stop.needed_blocks > 12
    assert f"needs about {r.stop.needed_blocks} blocks" in r.stop.text()
    assert Stop.from_dict(r.stop.as_dict()) == r.stop
    # a reachable target is not cut short
    near = _run("fake:noise=0.03,seed=4", "fake:noise=0.03,seed=4", blocks=4, until_halfwidth=2.5, max_blocks=40,
                stop_when_futile=True)
    assert near.stop is not None and near.stop.reason == "halfwidth"
