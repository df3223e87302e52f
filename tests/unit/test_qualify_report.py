"""The qualification report: stage table, and the pin-move sections (ABI diff, old-pin bench)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.qualify import (
    Qualification,
    QualifyContext,
    SkippedStage,
    render_markdown,
    write_qualification,
)

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
    assert "this pin (B) vs the old pin (A), each artifact's own benchmark tool" in md
    assert "[bench-old-pin/x/report.md](bench-old-pin/x/report.md)" in md
    # Plot links are rewritten relative to the qualification dir; the bench report's title is dropped.
    assert "![ratios](bench-old-pin/x/ratios.png)" in md and "# old-pin-0.3.35-vs-0.3.36" not in md
    assert "\n### Every metric\n" in md and "\n## Every metric" not in md


def test_without_an_old_pin_the_stages_are_skipped_not_failed(tmp_path: Path) -> None:
    q = Qualification(engine="llamacpp")
    q.header.update(_doc([]))

    def skipped() -> tuple[str, dict[str, Any]]:
        raise SkippedStage("no old pin given (--old-pin VERSION or --old-rev GITREV)")

    q.run("old-pin-abi", skipped)
    q.run("old-pin-bench", skipped, needs=("build",))
    assert [s.status for s in q.stages] == ["skipped", "skipped"] and q.passed
    out = write_qualification(q, tmp_path / "r")
    text = (out / "qualify.md").read_text()
    assert "| old-pin-abi | skipped | 0.0 | no old pin given" in text
    assert "| old-pin-bench | skipped | 0.0 | needs build |" in text


def _context(tmp_path: Path) -> QualifyContext:
    from harness.core.types import HostInfo
    from harness.engine.descriptor import load_engine
    from harness.engine.plugin import make_manager
    from harness.qualify.bench_plan import BenchPlan

    host = HostInfo(os="linux", arch="x86_64", cpu_model="EPYC", microarch="zen4", simd=(), cores=2,
                    memory_bytes=24 << 30)
    return QualifyContext(engine=load_engine("llamacpp"), pm=make_manager(autoload=False), host=host,
                          plan=BenchPlan(), report=tmp_path)


def test_stages_hand_typed_results_and_a_failure_skips_its_dependants(tmp_path: Path) -> None:
    from harness.qualify import Stage, StageResult
    from harness.qualify.context import Models

    q = Qualification(engine="e")

    def patch(ctx: QualifyContext) -> StageResult:
        raise ValueError("boom")  # a bug in a stage: recorded, the others still run

    def build(ctx: QualifyContext) -> StageResult:
        return StageResult(f"built on {ctx.product('patch', Path)}")

    def models(ctx: QualifyContext) -> StageResult:
        return StageResult("2 model variables", {"env": {"A": "1"}}, product=Models(env={"A": "1"}))

    ctx = q.run_stages([Stage(name="patch", run=patch), Stage(name="build", run=build, needs=("patch",)),
                        Stage(name="models", run=models)], _context(tmp_path))
    assert [(s.name, s.status) for s in q.stages] == [("patch", "failed"), ("build", "skipped"), ("models", "passed")]
    assert "ValueError: boom" in q.stages[0].summary and "traceback" in q.stages[0].data
    assert q.stages[2].data == {"env": {"A": "1"}} and not q.passed
    assert ctx.product("models", Models).env == {"A": "1"} and "patch" not in ctx.products


def test_a_stage_reads_what_the_stage_it_needs_handed_on(tmp_path: Path) -> None:
    from harness.core.errors import HarnessError
    from harness.qualify import Stage, StageResult
    from harness.qualify.context import Models

    def models(ctx: QualifyContext) -> StageResult:
        return StageResult("1 model variable", product=Models(env={"A": "1"}))

    def e2e(ctx: QualifyContext) -> StageResult:
        return StageResult(f"with {dict(ctx.product('models', Models).env)}")

    q = Qualification(engine="e")
    q.run_stages([Stage(name="models", run=models), Stage(name="e2e", run=e2e, needs=("models",))],
                 _context(tmp_path))
    assert [s.status for s in q.stages] == ["passed", "passed"] and q.stages[1].summary == "with {'A': '1'}"
    import pytest

    with pytest.raises(HarnessError, match="must list 'build' in its needs"):
        _context(tmp_path).product("build", Models)


def test_a_stage_list_whose_needs_come_later_is_refused(tmp_path: Path) -> None:
    import pytest

    from harness.qualify import Stage, StageResult

    def ok(ctx: QualifyContext) -> StageResult:
        return StageResult("ok")

    with pytest.raises(ValueError, match="stage build needs patch, which no earlier stage is"):
        Qualification(engine="e").run_stages([Stage(name="build", run=ok, needs=("patch",)),
                                              Stage(name="patch", run=ok)], _context(tmp_path))


def test_bench_plan_from_the_descriptor_and_the_command_line() -> None:
    from harness.core.host import default_threads
    from harness.engine.descriptor import load_engine
    from harness.qualify.bench_plan import bench_plan, stage_name

    engine = load_engine("llamacpp")
    plan = bench_plan(engine)
    # the descriptor's defaults: both models, a 5% gate, adaptive blocks; threads from the host
    assert plan.models == ("smollm2", "bandwidth")
    assert plan.gate == {"all": 5.0} and plan.until_halfwidth == 3.0 and plan.max_blocks == 12
    assert plan.threads == default_threads() and "physical cores" in plan.threads_source
    assert plan.config().until_halfwidth == 3.0 and plan.config((1,)).concurrency == (1,)
    cli = bench_plan(engine, threads=3, fail_on_slower=["decode=2"], until_halfwidth=0, blocks=6)
    assert (cli.threads, cli.threads_source) == (3, "--threads")
    assert cli.gate == {"decode": 2.0} and cli.until_halfwidth is None and cli.config().max_blocks is None
    assert cli.config().blocks == 6
    assert [stage_name(v, n) for n, v in enumerate(plan.models)] == ["bench", "bench-bandwidth"]
    import pytest

    from harness.core.errors import UsageError

    with pytest.raises(UsageError, match="did you mean 'decode'"):
        bench_plan(engine, fail_on_slower=["decdoe=3"])


def _bench_stage(tmp_path: Path, b: str, model: str) -> dict[str, Any]:
    """A bench stage's record, from a real (fake-arm) run through the same code as qualify's."""
    from harness.bench.abba import BenchConfig
    from harness.bench.arms import ArmSpec
    from harness.bench.session import run_and_report
    from harness.qualify import StageFailed
    from harness.qualify.stages.bench import bench_stage_result

    outcome = run_and_report(ArmSpec.parse("fake:threads=2"), ArmSpec.parse(f"{b},threads=2"),
                             BenchConfig(blocks=4, until_halfwidth=3.0, max_blocks=8), out=tmp_path / "bench",
                             host=HOST, gate={"all": 5.0}, threads_source="2 physical cores",
                             extra_plugins=("harness_plugins.bench_fake",), plots=False, isolate=False)
    try:
        r = bench_stage_result(outcome, tmp_path, model)
        status = "passed"
    except StageFailed as e:
        r, status = e.result, "failed"
    return {"status": status, "seconds": 1.0, "summary": r.summary, "data": r.data}


def test_qualify_report_shows_headline_gate_system_threads_and_both_models(tmp_path: Path) -> None:
    smol = {"name": "bench", **_bench_stage(tmp_path, "fake:slowdown=0.9", "SmolLM2-135M-Instruct.Q4_1.gguf")}
    bw = {"name": "bench-bandwidth", **_bench_stage(tmp_path, "fake:slowdown=1.1", "random-llama-0.7B-Q4_0-s0.gguf")}
    assert smol["status"] == "passed" and bw["status"] == "failed"
    # the stage summaries carry the headline speed ratios and the verdict
    assert smol["summary"].startswith("SmolLM2-135M-Instruct.Q4_1.gguf: prefill @ c=1 1.1")
    assert "gate (B >5% slower): passed" in smol["summary"] and re.search(r"; [46] blocks \(halfwidth\); decided: prefill @ c=1 passed \(walltime\)", smol["summary"])
    assert "gate (B >5% slower): FAILED on prefill @ c=1, decode @ c=1, aggregate @ c=4" in bw["summary"]
    doc = {**_doc([smol, bw]), "threads": 2, "threads_source": "2 physical cores", "passed": False}
    md = render_markdown(doc)
    assert "threads 2 (2 physical cores)" in md.split("\n")[2]
    assert "## Benchmark on SmolLM2-135M-Instruct.Q4_1.gguf: our cpu build (B) vs the peer baseline (A)" in md
    assert "## Benchmark on random-llama-0.7B-Q4_0-s0.gguf: our cpu build (B) vs the peer baseline (A)" in md
    assert md.count("### Headline") == 2 and md.count("### System state") == 2
    assert "**gate (B >5% slower): FAILED on prefill @ c=1, decode @ c=1, aggregate @ c=4**" in md
    assert "- threads per arm: 2 (2 physical cores)" in md and "- governor:" in md
    assert "| bench-bandwidth | failed |" in md
    # the rest of each report is folded, its links made relative to the qualification dir
    assert "<details><summary>Configurations, Every metric, Per-block samples (c=1), Arms</summary>" in md
    rel = smol["data"]["report"]
    assert rel.startswith("bench/") and f"[{rel}/report.md]({rel}/report.md)" in md


def test_a_failed_gate_keeps_its_figures() -> None:
    from harness.qualify import StageFailed, StageResult

    q = Qualification(engine="e")

    def bench() -> StageResult:
        raise StageFailed(StageResult("m.gguf: decode @ c=1 0.900x [0.890, 0.910]; gate (B >5% slower): FAILED",
                                      {"report": "bench/x", "markdown": "# x\n"}))

    st = q.run("bench", bench)
    assert st.status == "failed" and st.summary.startswith("m.gguf: decode") and st.data["report"] == "bench/x"
    assert not q.passed


def test_the_report_has_the_emulated_level_table() -> None:
    data = {"build": {"variant": "cpu-aarch64"}, "triple": "aarch64-linux-gnu", "qemu": "7.2.22",
            "prompt": "The capital of France is", "n_tokens": 12, "threads": 2,
            "abi": {"used_functions": 38, "machine": "AArch64", "headers": {"llama.h": "same"}},
            "models": {"SmolLM2": "/m.gguf"}, "bench_shape": None,
            "levels": [{"level": "armv8.2_2", "qemu_model": "cortex-a76", "isolated": True, "isolation_note": "",
                        "runs": {"SmolLM2": {"status": "ran", "ok": True, "diverges_at": None, "eval_tok_s": 0.5,
                                             "reference": True}}}]}
    md = render_markdown(_doc([{"name": "emulated-cpu-aarch64", "status": "passed", "seconds": 300.0,
                                "summary": "8 aarch64-linux-gnu levels ran", "data": data}]))
    assert "## cpu-aarch64: every CPU level under qemu-user (aarch64-linux-gnu, qemu 7.2.22)" in md
    assert "38 used functions exported by the AArch64 libraries" in md
    assert "| armv8.2_2 | `cortex-a76` | yes | yes | (reference) | 0.50 |" in md


def _agreement_row(label: str, kld: float, violations: list[str], passed: bool) -> dict[str, Any]:
    return {"label": label, "kind": "level", "passed": passed, "violations": violations,
            "arms": {"A": {"name": "in-process:cpu,level=sapphirerapids"}, "B": {"name": f"in-process:cpu,level={label}"}},
            "summary": {"kld_mean": kld, "kld_p99": 4 * kld, "kld_p999": 9 * kld, "kld_max": 20 * kld,
                        "kld_max_token": 2278, "kld_max_window": 4, "kld_max_position": 230, "top1": 0.96,
                        "ppl_ratio": 1.0005, "ci": {"kld_mean": [0.9 * kld, 1.1 * kld]}}}


def _cross_variant_data(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from harness.agree.report import rows_markdown

    return {"prompt": "The capital of France is", "expect": "Paris", "threads": 2, "reference": "cpu", "passed": True,
            "runs": [{"label": "cpu", "variant": "cpu", "cpu_level": "sapphirerapids", "ok": True, "status": "ran",
                      "diverges_at": None, "text": " Paris", "error": ""}],
            "agreement": {"reference": "cpu/sapphirerapids", "window": 512, "tokens": 4096,
                          "corpus": {"name": "docutils-prose", "package": "docutils", "version": "0.21.2"},
                          "results": rows, "errors": [{"label": "cpu/x64", "kind": "level", "error": "crashed"}],
                          "markdown": rows_markdown(rows), "passed": all(r["passed"] for r in rows)}}


def test_cross_variant_stage_reports_kld_per_level_and_gates_naming_level_and_worst_position(
        tmp_path: Path, monkeypatch: Any) -> None:
    from harness.engine import registry
    from harness.qualify.context import Models
    from harness.qualify.stages.levels import cross_variant

    good = _agreement_row("haswell", 0.0039, [], True)
    bad = _agreement_row("zen4", 0.2, ["mean KLD 0.2 > 0.01"], False)
    data = _cross_variant_data([good])

    class Impl:
        name = "llamacpp"

        def cross_variant(self, model: Path, *, threads: int | None = None) -> dict[str, Any]:
            return data

    monkeypatch.setattr(registry, "get", lambda name: Impl())
    ctx = _context(tmp_path).with_product("models", Models(env={"HARNESS_CHAT_MODEL": "/m.gguf"}))
    r = cross_variant(ctx)
    assert "agreement against cpu/sapphirerapids: haswell KLD 0.0039 top-1 96.0%" in r.summary
    assert "could not compare: cpu/x64" in r.summary
    data["agreement"] = _cross_variant_data([good, bad])["agreement"]
    q = Qualification(engine="llamacpp")
    st = q.run("cross-variant", lambda: cross_variant(ctx))
    assert st.status == "failed" and not q.passed
    assert re.search(r"Outside the agreement thresholds: zen4 against cpu/sapphirerapids \(level\): mean KLD 0\.2 "
                     r"> 0\.01, worst position corpus token 2278 \(window 4, position 230", st.summary), st.summary
    # the failed stage keeps its figures: the report shows the table with the failing row
    assert st.data["agreement"]["results"][1]["label"] == "zen4"
    md = render_markdown(_doc([{"name": "cross-variant", "status": "failed", "seconds": 60.0, "summary": st.summary,
                                "data": st.data}]))
    assert "### Numerical agreement against cpu/sapphirerapids" in md
    assert "| `in-process:cpu,level=zen4` vs `in-process:cpu,level=sapphirerapids` | 0.2 [0.18, 0.22] |" in md
    assert "FAIL: mean KLD 0.2 > 0.01" in md and "cpu/x64 (level): not compared: crashed" in md


def test_a_pin_move_report_opens_with_the_pull_request_body_and_holds_no_host_path(tmp_path: Path) -> None:
    """The first screen: old -> new (source, upstream build and commit, recipes), patch series, the binding's
    compile check, the C++ and C the binding uses that changed, agreement, how to reproduce. Written files
    carry no host path: the cache, the checkout and the home directory are redacted, wherever a stage put them."""
    from harness.core import paths
    from harness.qualify.result import StageResult

    cache, home = str(paths.cache_root()), str(Path.home())
    q = Qualification(engine="llamacpp")
    q.header.update({**_doc([]), "pin": "2026.10.11549", "upstream": {"build": 11549, "commit": "unknown"},
                     "source": "xllamacpp 2026.10.11549", "source_arg": "pypi:xllamacpp==2026.10.11549#thirdparty/llama.cpp",
                     "recipe": {"commit": "38ef2933bd70aaaa", "dirty": False},
                     "old": {"pin": "0.3.36", "source": "llama-cpp-python 0.3.36",
                             "upstream": {"build": 11312, "commit": "0c1e570"}, "recipe_commit": "8b3ade45a2ae0000",
                             "asked": "8b3ade4", "how": "--old-rev"}})
    q.run("fetch", lambda: StageResult(f"xllamacpp 2026.10.11549 at {cache}/sources/c17ee/tree", {
        "path": f"{cache}/sources/c17ee/tree", "provenance": ["build 11549: xllamacpp's version encodes it"]}))
    q.run("patch", lambda: StageResult("2 patch(es) applied", {"patches": [
        {"patch": "0001-ggml-backend-search-library-dir.patch", "status": "applies", "detail": ""}]}))
    q.run("abi-check", lambda: StageResult("matches", {"binding": {"ok": True, "units": ["a.cpp", "b.cpp"], "seconds": 4.2,
                                                        "problems": []}}))
    q.run("old-pin-abi", lambda: StageResult("0.3.36 -> 2026.10.11549: 21 differences, 16 in the binding's used set, 2 in "
                                  "the C++ it uses", {
        "cpp_differences": ["common_peg_arena::load: removed (was void (const std::string &))",
                            "common_chat_params::parser: std::string -> common_peg_arena"],
        "used_lines": ["GGML_BACKEND_API_VERSION 2 -> 3"], "markdown": ABI_MD,
        "log": f"{home}/somewhere and {cache}/work/llamacpp/tree"}))
    out = write_qualification(q, tmp_path / "r")
    md = (out / "qualify.md").read_text()
    first = md.split("## Verdict")[0]
    assert "## Pin move: llamacpp llama-cpp-python 0.3.36 -> xllamacpp 2026.10.11549" in first
    assert "| upstream build | 11312 | 11549 |" in first
    assert "| upstream commit | 0c1e570 | unknown (the source does not carry it) |" in first
    assert "| recipe | 8b3ade45a2ae (--old-rev 8b3ade4) | 38ef2933bd70 |" in first
    assert "0001-ggml-backend-search-library-dir.patch: applies" in first
    assert "the binding compiles syntax-only against the new headers: 2 translation units" in first
    assert "`common_peg_arena::load: removed (was void (const std::string &))`" in first
    assert "`GGML_BACKEND_API_VERSION 2 -> 3`" in first
    assert "harness pin llamacpp pypi:xllamacpp==2026.10.11549#thirdparty/llama.cpp" in first
    assert "harness qualify llamacpp --old-rev 8b3ade4" in first
    for name in ("qualify.md", "qualify.json"):
        text = (out / name).read_text()
        assert cache not in text and home + "/" not in text, name
        assert "$HARNESS_CACHE/sources/c17ee/tree" in text
