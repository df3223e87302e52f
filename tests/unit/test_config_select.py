"""Engine selection, the CUDA -> wheel index mapping, speculative-decoding translation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pluggy
import pytest

from harness.config.facts import model_facts, quantization_from_name, size_from_name
from harness.config.model import ModelConfig, model_config
from harness.config.select import (
    cuda_wheel_index,
    select_engine,
)
from harness.core.types import HostInfo, MatchResult
from harness.engine import hookspec
from harness.engine.registry import EngineImpl

hookimpl = pluggy.HookimplMarker("harness")
HOST = HostInfo(os="linux", arch="x86_64", cpu_model="test", microarch="x86_64_v3", simd=("avx2",),
                cores=8, memory_bytes=16 << 30)


@pytest.mark.parametrize(
    ("version", "index"),
    [("13.0", "cu132"), ("13.2", "cu132"), ("13", "cu132"), ("V13.0.48", "cu132"),
     ("12.8", "cu128"), ("12.9", "cu128"), ("12.6", None), ("11.8", None), ("", None),
     (None, None), ("unknown", None), ("12", None)],
)
def test_cuda_wheel_index(version: str | None, index: str | None) -> None:
    assert cuda_wheel_index(version) == index


# -- speculative decoding ------------------------------------------------------


def test_names() -> None:
    assert quantization_from_name("SmolLM2-135M-Instruct.Q4_1.gguf") == "Q4_1"
    assert quantization_from_name("x-Q4_K_M.gguf") == "Q4_K_M"
    assert quantization_from_name("all-MiniLM-L6-v2") is None
    assert size_from_name("SmolLM2-135M-Instruct.Q4_1.gguf") == "135M"
    assert size_from_name("gemma-26B-A4B") == "26B-A4B"


def config(model: str, **kw: Any) -> ModelConfig:
    return model_config({"name": "m", "parameters": {"model": model}, **kw})


def test_gguf_facts(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(str(tmp_path / "s.Q4_1.gguf"), "llama")
    w.add_context_length(2048)
    w.add_basename("SmolLM2")
    w.add_size_label("135M")
    w.add_file_type(3)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = model_facts(config("s.Q4_1.gguf"), tmp_path)
    assert {k: f[k] for k in ("format", "gguf_version", "architecture", "context_length",
                              "quantization", "family", "size", "exists", "abilities")} == {
        "format": "ggufv2", "gguf_version": 3, "architecture": "llama", "context_length": 2048,
        "quantization": "Q4_1", "family": "SmolLM2", "size": "135M", "exists": True,
        "abilities": ["chat", "completion"],
    }


def test_directory_facts(tmp_path: Path) -> None:
    d = tmp_path / "all-MiniLM-L6-v2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    (d / "model.safetensors").write_bytes(b"x")
    f = model_facts(config("all-MiniLM-L6-v2", known_usecases=["embeddings"]), tmp_path)
    assert (f["format"], f["architecture"], f["abilities"]) == ("safetensors", "bert", ["embeddings"])
    (d / "config.json").write_text(json.dumps({"model_type": "llama",
                                               "quantization_config": {"quant_method": "awq"}}))
    assert model_facts(config("all-MiniLM-L6-v2"), tmp_path)["format"] == "awq"


def test_facts_without_models_dir() -> None:
    f = model_facts(config("x.Q8_0.gguf"), None)
    assert (f["format"], f["quantization"], f["exists"]) == ("ggufv2", "Q8_0", False)


# -- selection -------------------------------------------------------------------


def gg_match(model: dict[str, Any], host: HostInfo) -> MatchResult:
    if model["format"] != "ggufv2":
        return MatchResult(engine="gg", ok=False, reason="gg engine only supports ggufv2 format")
    return MatchResult(engine="gg", ok=True, variant="cpu")


def cu_match(model: dict[str, Any], host: HostInfo) -> MatchResult:
    ok = host.has_gpu("cuda")
    return MatchResult(engine="cu", ok=ok, reason="" if ok else "requires Linux with a CUDA device")


class GgufEngine:
    @hookimpl
    def harness_engine_register(self) -> list[EngineImpl]:
        return [EngineImpl(name="gg", match=gg_match)]


class CudaEngine:
    @hookimpl
    def harness_engine_register(self) -> list[EngineImpl]:
        return [EngineImpl(name="cu", match=cu_match), EngineImpl(name="silent")]


def _boom(model: dict[str, Any], host: HostInfo) -> MatchResult:
    raise RuntimeError("boom")


class Broken:
    @hookimpl
    def harness_engine_register(self) -> list[EngineImpl]:
        return [EngineImpl(name="bad", match=_boom)]


def manager(*plugins: object) -> pluggy.PluginManager:
    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    for p in plugins:
        pm.register(p)
    return pm


def test_select_reports_every_rejection() -> None:
    sel = select_engine(config("x.safetensors"), HOST, pm=manager(GgufEngine(), CudaEngine()))
    assert sel.chosen is None
    assert [(r.engine, r.ok, r.reason) for r in sel.results] == [
        ("gg", False, "gg engine only supports ggufv2 format"),
        ("cu", False, "requires Linux with a CUDA device"),
        ("silent", False, "no plugin answered for this engine"),
    ]
    assert sel.reason == "no engine can serve this model here"


def test_select_first_accepting_or_declared() -> None:
    pm = manager(GgufEngine(), CudaEngine())
    sel = select_engine(config("x.gguf"), HOST, pm=pm)
    assert sel.chosen == MatchResult(engine="gg", ok=True, variant="cpu")
    sel = select_engine(config("x.gguf", backend="cu"), HOST, pm=pm)
    assert sel.chosen is None
    assert sel.reason == "backend 'cu' rejects this model: requires Linux with a CUDA device"
    sel = select_engine(config("x.gguf", backend="nope"), HOST, pm=pm)
    assert sel.reason == ("backend 'nope' is neither an engine here nor in LocalAI 82c191afadf5's backend "
                          "names: LocalAI loads the config and fails only when no gallery has that "
                          "backend; engines here: cu, gg, silent")
    assert sel.to_json()["chosen"] is None


def test_an_engine_with_only_a_descriptor_is_known_but_cannot_serve() -> None:
    pm = manager(GgufEngine())
    sel = select_engine(config("x.gguf", backend="tiny"), HOST, pm=pm, described=["tiny", "gg"])
    assert [r.engine for r in sel.results] == ["gg", "tiny"]
    assert sel.chosen is None
    assert sel.reason.startswith("backend 'tiny' rejects this model: the engine has a descriptor but no plugin")
    # Without a declared backend the plugin's engine serves; the descriptor-only one is listed as a rejection.
    sel = select_engine(config("x.gguf"), HOST, pm=pm, described=["tiny"])
    assert sel.chosen is not None and sel.chosen.engine == "gg"
    assert [(r.engine, r.ok) for r in sel.results] == [("gg", True), ("tiny", False)]


def test_default_manager_lists_descriptor_engines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import harness.engine.plugin as plugin

    engines = tmp_path / "engines"
    (engines / "tiny").mkdir(parents=True)
    (engines / "tiny" / "engine.yaml").write_text("name: tiny\n")
    monkeypatch.setenv("HARNESS_ENGINES_PATH", str(engines))
    monkeypatch.setattr(plugin, "get_manager", lambda: manager(GgufEngine()))
    sel = select_engine(config("x.gguf", backend="tiny"), HOST)
    assert "tiny" in [r.engine for r in sel.results]
    assert "no plugin yet" in sel.reason


def test_select_survives_a_failing_plugin() -> None:
    sel = select_engine(config("x.gguf"), HOST, pm=manager(Broken()))
    assert [(r.engine, r.reason) for r in sel.results] == [("bad", "match hook failed: boom")]
