"""Engine plugin ``llamacpp``: llama.cpp through its GGUF models."""

from __future__ import annotations

from typing import Any

from harness.plugin import hookimpl
from harness.types import HostInfo, MatchResult

NAME = "llamacpp"


@hookimpl
def harness_engine_names() -> list[str]:
    return [NAME]


@hookimpl
def harness_engine_match(engine: str, model: dict[str, Any], host: HostInfo) -> MatchResult | None:
    if engine != NAME:
        return None
    fmt = model.get("format")
    if fmt not in ("ggufv2", "gguf", "safetensors-dir"):
        return MatchResult(engine=NAME, ok=False, reason=f"llama.cpp engine only supports ggufv2 format, model is {fmt}")
    return MatchResult(engine=NAME, ok=True, variant="cpu")
