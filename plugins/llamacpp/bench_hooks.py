"""Bench arms ``in-process`` (our engine on a built variant), ``xllamacpp`` (the peer baseline),
``llama-bench`` (an artifact's own llama-bench: old pin vs new pin), and over HTTP ``server``
(``harness serve``) and ``llama-server`` (the artifact's own server, the same settings)."""

from __future__ import annotations

from typing import Any

from harness.bench.arms import IN_PROCESS
from harness.engine.plugin import hookimpl


@hookimpl
def harness_bench_arm_kinds() -> list[str]:
    return [IN_PROCESS, "llama-bench", "xllamacpp", "server", "llama-server"]


@hookimpl
def harness_bench_arm(kind: str, options: dict[str, Any]) -> Any | None:
    if options.get("engine", "llamacpp") != "llamacpp":
        return None  # another engine's arm of the same kind (in-process:engine=vllm.cpp)
    if kind == IN_PROCESS:
        from harness_plugins.llamacpp.bench import BackendArm

        return BackendArm(options)
    if kind == "llama-bench":
        from harness_plugins.llamacpp.bench import LlamaBenchArm

        return LlamaBenchArm(options)
    if kind == "xllamacpp":
        from harness_plugins.llamacpp.bench import XllamacppArm

        return XllamacppArm(options)
    if kind == "server":
        from harness_plugins.llamacpp.bench_http import ServerArm

        return ServerArm(options)
    if kind == "llama-server":
        from harness_plugins.llamacpp.bench_http import LlamaServerArm

        return LlamaServerArm(options)
    return None


@hookimpl
def harness_bench_arm_prepare(kind: str, options: dict[str, Any]) -> dict[str, Any] | None:
    if options.get("engine", "llamacpp") != "llamacpp":
        return None
    if kind == "llama-bench":
        from harness_plugins.llamacpp.bench import prepare_llama_bench

        return prepare_llama_bench(options)
    if kind == IN_PROCESS:
        from harness_plugins.llamacpp.bench import prepare_in_process

        return prepare_in_process(options)
    return None


@hookimpl
def harness_sim_target(kind: str, options: dict[str, Any]) -> Any | None:
    if options.get("engine", "llamacpp") != "llamacpp":
        return None
    if kind == IN_PROCESS:
        from harness_plugins.llamacpp.simulate import BindingTarget

        return BindingTarget(options)
    if kind == "llama-bench":
        from harness_plugins.llamacpp.simulate import LlamaBenchTarget

        return LlamaBenchTarget(options)
    return None
