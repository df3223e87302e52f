"""Engine plugin ``llamacpp``: llama.cpp serves GGUF models (and HF safetensors dirs, converted once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.plugin import hookimpl
from harness.types import HostInfo, MatchResult

NAME = "llamacpp"
FORMATS = ("ggufv2", "safetensors")
#: Architectures the pinned llama.cpp loads (general.architecture); the engine has the final word.
UNSUPPORTED_QUANT = ("gptq", "awq", "fp8")


@hookimpl
def harness_engine_names() -> list[str]:
    return [NAME]


@hookimpl
def harness_engine_match(engine: str, model: dict[str, Any], host: HostInfo) -> MatchResult | None:
    if engine != NAME:
        return None
    fmt = model.get("format")
    if fmt in UNSUPPORTED_QUANT or fmt not in FORMATS:
        return MatchResult(engine=NAME, ok=False,
                           reason=f"llama.cpp engine only supports ggufv2 format (or safetensors, converted); model is {fmt}")
    version = model.get("gguf_version")
    if fmt == "ggufv2" and isinstance(version, int) and version > 3:
        return MatchResult(engine=NAME, ok=False, reason=f"GGUF version {version} is newer than the supported 3")
    if host.os == "darwin" and host.arch == "arm64":
        variant = "metal"
    elif host.has_gpu("cuda"):
        variant = "cuda"
    else:
        variant = "cpu"
    return MatchResult(engine=NAME, ok=True, variant=variant)


@hookimpl
def harness_e2e_specs(engine: str) -> list[Path] | None:
    if engine != NAME:
        return None
    from harness.paths import project_root

    e2e = project_root() / "tests" / "e2e"
    return sorted(p for p in e2e.glob("test_*.py") if p.name != "test_video_render.py")
