"""The qualification report: stage table, and the pin-move sections (ABI diff, old-pin bench)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.qualify import Qualification, SkippedStage, render_markdown, write_qualification

HOST = {"os": "linux", "arch": "x86_64", "cpu_model": "EPYC", "microarch": "zen4", "cores": 2,
        "memory_bytes": 24 << 30}
BENCH_MD = "# old-pin-0.3.35-vs-0.3.36\n\n## Every metric\n\n| metric | A | B |\n|---|---|---|\n| decode @ c=1 | 1 | 2 |\n![ratios](ratios.png)\n"
ABI_MD = "## ABI/API changes: llamacpp 0.3.35 -> llamacpp 0.3.36\n\n3 differences: 3 structs.\n\n### Structs\n"


def _doc(stages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"engine": "llamacpp", "pin": "0.3.36", "upstream": {"build": 11312, "commit": "0c1e570"}, "host": HOST,
            "started_at": "2026-11-29T16:00:00Z", "passed": True, "stages": stages}


def test_pin_move_sections() -> None:
    md = render_markdown(_doc([
        {"name": "old-pin-abi", "status": "passed", "seconds": 1.0, "summary": "0.3.35 -> 0.3.36: 3 differences",
         "data": {"markdown": ABI_MD}},
        {"name": "old-pin-bench", "status": "passed", "seconds": 60.0, "summary": "report bench-old-pin/x",
         "data": {"report": "bench-old-pin/x", "markdown": BENCH_MD}},
    ]))
    assert "| old-pin-abi | passed | 1.0 | 0.3.35 -> 0.3.36: 3 differences |" in md
    assert "## ABI/API changes: llamacpp 0.3.35 -> llamacpp 0.3.36" in md and "### Structs" in md
    assert "## Benchmark: this pin (B) vs the old pin (A), each artifact's own benchmark tool" in md
    assert "[bench-old-pin/x/report.md](bench-old-pin/x/report.md)" in md
    # Plot links are rewritten relative to the qualification dir; the bench report's title is dropped.
    assert "![ratios](bench-old-pin/x/ratios.png)" in md and "# old-pin-0.3.35-vs-0.3.36" not in md
    assert "\n### Every metric\n" in md and "\n## Every metric" not in md


def test_without_an_old_pin_the_stages_are_skipped_not_failed(tmp_path: Path) -> None:
    q = Qualification(engine="llamacpp")
    q.context.update(_doc([]))

    def skipped() -> tuple[str, dict[str, Any]]:
        raise SkippedStage("no old pin given (--old-pin VERSION or --old-rev GITREV)")

    q.run("old-pin-abi", skipped)
    q.run("old-pin-bench", skipped, needs=("build",))
    assert [s.status for s in q.stages] == ["skipped", "skipped"] and q.passed
    out = write_qualification(q, tmp_path / "r")
    text = (out / "qualify.md").read_text()
    assert "| old-pin-abi | skipped | 0.0 | no old pin given" in text
    assert "| old-pin-bench | skipped | 0.0 | needs build |" in text


def test_stages_hand_typed_results_and_a_failure_skips_its_dependants() -> None:
    from harness.qualify import Carried, StageResult

    q = Qualification(engine="e")
    carried = Carried()

    def patch() -> StageResult:
        raise ValueError("boom")  # a bug in a stage: recorded, the others still run

    def build() -> StageResult:
        return StageResult(f"built on {carried.patched()}")

    q.run("patch", patch)
    q.run("build", build, needs=("patch",))
    q.run("models", lambda: StageResult("2 model variables", {"env": {"A": "1"}}))
    assert [(s.name, s.status) for s in q.stages] == [("patch", "failed"), ("build", "skipped"), ("models", "passed")]
    assert "ValueError: boom" in q.stages[0].summary and "traceback" in q.stages[0].data
    assert q.stages[2].data == {"env": {"A": "1"}} and not q.passed
