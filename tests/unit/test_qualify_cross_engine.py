"""Qualify's cross-engine stages (a descriptor's ``qualify.cross_engine``: vllm.cpp against llama.cpp on
the same weights) and the report's side-by-side table, without building or running an engine."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from harness.core.types import HostInfo
from harness.engine.descriptor import load_engine
from harness.engine.plugin import make_manager
from harness.qualify import QualifyContext, StageFailed, render_markdown
from harness.qualify.bench_plan import BenchPlan
from harness.qualify.context import Models
from harness.qualify.result import SkippedStage
from harness.qualify.stages import cross_engine, levels, stages_for

HOST = HostInfo(os="linux", arch="x86_64", cpu_model="EPYC", microarch="zen4", simd=(), cores=2,
                memory_bytes=24 << 30)


def _context(tmp_path: Path, engine: str) -> QualifyContext:
    return QualifyContext(engine=load_engine(engine), pm=make_manager(autoload=False), host=HOST,
                          plan=BenchPlan(), report=tmp_path)


def test_the_stages_run_where_the_descriptor_names_a_peer(tmp_path: Path) -> None:
    names = [s.name for s in stages_for(_context(tmp_path, "vllmcpp"))]
    assert names[names.index("peer-build"):names.index("peer-build") + 3] == [
        "peer-build", "cross-engine", "bench-vs-llamacpp"]
    assert "cross-engine" not in [s.name for s in stages_for(_context(tmp_path, "llamacpp"))]
    stage = next(s for s in stages_for(_context(tmp_path, "vllmcpp")) if s.name == "cross-engine")
    assert set(stage.needs) == {"binding", "models", "peer-build"}
    cfg = cross_engine.settings(_context(tmp_path, "vllmcpp"))
    assert cfg is not None and (cfg["peer"], cfg["model"], cfg["peer_model"]) == (
        "llamacpp", "hf-llama", "hf-llama-gguf")


def _row(prompt: str, *, diverges: int | None = None, margin: float | None = None, n: tuple[int, int] = (5, 5)
         ) -> dict[str, Any]:
    return {"prompt": prompt, "identical": diverges is None, "prompt_tokens": {"vllmcpp": n[0], "llamacpp": n[1]},
            "completion_tokens": {"vllmcpp": 32, "llamacpp": 32}, "text": {"vllmcpp": "a", "llamacpp": "b"},
            "peer_sampler_agrees": True, "diverges_at": diverges, "peer_margin_at_divergence": margin,
            "near_tie": None if margin is None else margin < 0.05, "peer_min_margin": 0.01 if margin else 2.5}


def _result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from harness_plugins.vllmcpp.crossengine import NO_LOGITS, summarize

    return {"engine": "vllmcpp", "peer": "llamacpp", "model": "/m/random-llama-hf-s0", "peer_model": "/m/x.gguf",
            "max_tokens": 32, "threads": 2, "logits": NO_LOGITS, "summary": summarize(rows), "rows": rows,
            "command": "python -m harness_plugins.vllmcpp.crossengine /m/random-llama-hf-s0 /m/x.gguf"}


def _check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, result: dict[str, Any] | None) -> Any:
    from harness.engine import registry

    impl = dataclasses.replace(registry.get("vllmcpp"), cross_engine=lambda *a, **k: result)
    monkeypatch.setattr(registry, "get", lambda name, *a, **k: impl)
    ctx = _context(tmp_path, "vllmcpp").with_product("models", Models(env={
        "HARNESS_MODEL_HF_LLAMA": "/m/random-llama-hf-s0", "HARNESS_MODEL_HF_LLAMA_GGUF": "/m/x.gguf"}))
    return cross_engine.check(ctx)


def test_the_check_passes_on_identity_and_near_ties_and_fails_on_a_clear_divergence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok = _check(tmp_path, monkeypatch, _result([_row("a"), _row("b", diverges=7, margin=0.01)]))
    assert ok.summary.startswith("1/2 prompts token-identical with llamacpp (39/64 greedy tokens")
    with pytest.raises(StageFailed, match=r"1 divergence.*top-1 was clear") as e:
        _check(tmp_path, monkeypatch, _result([_row("a"), _row("b", diverges=3, margin=1.5)]))
    assert e.value.result.data["summary"]["clear_divergences"] == 1, "the figures are kept"
    with pytest.raises(StageFailed, match="prompt token counts differ"):
        _check(tmp_path, monkeypatch, _result([_row("a", n=(5, 6))]))


def test_the_check_is_skipped_without_the_pair(tmp_path: Path) -> None:
    ctx = _context(tmp_path, "vllmcpp").with_product("models", Models(env={"HARNESS_MODEL_HF_LLAMA": "/m/d"}))
    with pytest.raises(SkippedStage, match=r"no fixture model hf-llama-gguf .*--engine vllmcpp"):
        cross_engine.check(ctx)


def test_an_engine_without_cpu_levels_has_no_isa_audit(tmp_path: Path) -> None:
    from harness.core.types import PatchedTree
    from harness.engine.plugin import get_manager
    from harness.qualify.context import Built

    ctx = dataclasses.replace(_context(tmp_path, "vllmcpp"), pm=get_manager())
    ctx = ctx.with_product("build", Built(variants=("cpu",))).with_product(
        "patch", PatchedTree(engine="vllmcpp", pin="p", path=tmp_path, series_hash="", patches=(), applied=True))
    with pytest.raises(SkippedStage, match="no per-level CPU libraries"):
        levels.audit(ctx)


def test_the_report_stands_the_two_engines_side_by_side() -> None:
    bench = {"engine": "vllmcpp", "peer": "llamacpp", "model": "random-llama-hf-s0", "peer_model": "/m/x.gguf",
             "report": "bench-vs-llamacpp/r", "markdown": "# r\n\n## Headline\n\n| x |\n",
             "headline": [{"key": "ttft_ms@c1", "name": "prefill", "label": "prefill @ c=1", "a": 1000.0, "b": 1180.0,
                           "speed": {"point": 1.18, "lo": 1.1, "hi": 1.25}, "verdict": "B faster"},
                          {"key": "decode_tps@c1", "name": "decode", "label": "decode @ c=1", "a": 50.0, "b": 50.5,
                           "speed": {"point": 1.01, "lo": None, "hi": None}, "verdict": "no interval"}],
             "peak_rss_bytes": {"A": 200 << 20, "B": 202 << 20},
             "commands": ["harness bench --a 'in-process:engine=llamacpp,model=/m/x.gguf' --b '...'"]}
    doc = {"engine": "vllmcpp", "pin": "d85906ae5896", "upstream": {"commit": "d85906ae"},
           "host": {"os": "linux", "arch": "x86_64", "cpu_model": "EPYC", "microarch": "zen4", "cores": 2,
                    "memory_bytes": 24 << 30}, "started_at": "2026-12-02T01:00:00Z", "passed": True,
           "stages": [{"name": "cross-engine", "status": "passed", "seconds": 9.0, "summary": "s",
                       "data": _result([_row("The capital of France is"), _row("b", diverges=7, margin=0.01)])},
                      {"name": "bench-vs-llamacpp", "status": "passed", "seconds": 300.0, "summary": "s", "data": bench}]}
    md = render_markdown(doc)
    assert "## Side by side: vllmcpp vs llamacpp, the same weights" in md
    assert "| prefill @ c=1 | 1,000.0 tok/s | 1,180.0 tok/s | 1.180x [1.100, 1.250] (B faster) |" in md
    assert "| decode @ c=1 | 50.0 tok/s | 50.5 tok/s | 1.010x (no interval) |" in md
    assert "| peak RSS (worker) | 200 MiB | 202 MiB | 1.010x" in md
    assert "| greedy tokens | 1/2 prompts identical | 39/64 tokens before any divergence |" in md
    assert "    harness qualify vllmcpp" in md and "    harness bench --a 'in-process:engine=llamacpp" in md
    assert "    python -m harness_plugins.vllmcpp.crossengine" in md
    assert "## Cross-engine greedy check: vllmcpp on random-llama-hf-s0, llamacpp on x.gguf" in md
    assert "| 'The capital of France is' | 5 / 5 | 32 / 32 | yes |  |  | 2.500 |" in md
    assert "no token ids, logits or log-probabilities" in md
    assert "## Benchmark: vllmcpp (B) vs llamacpp (A), the same weights" in md
