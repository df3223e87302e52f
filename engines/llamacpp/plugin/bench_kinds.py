"""llama.cpp's bench arm kinds (``EngineImpl.bench_arms``): ``in-process`` (our binding on a built
variant), ``xllamacpp`` (the peer baseline), ``llama-bench`` (an artifact's own llama-bench: old pin vs
new pin), and over HTTP ``server`` (``harness serve``) and ``llama-server`` (the artifact's own server,
the same settings). Each imports its module when an arm is made, not when the plugin loads."""

from __future__ import annotations

from typing import Any

from harness.engine.interface import BenchArmKind

#: harness.bench.arms.IN_PROCESS, spelled out: the plugin loads with every command, the bench machinery
#: only when an arm is made
IN_PROCESS = "in-process"


def _in_process(options: dict[str, Any]) -> Any:
    from harness_plugins.llamacpp.bench import BindingArm

    return BindingArm(options)


def _prepare_in_process(options: dict[str, Any]) -> dict[str, Any] | None:
    from harness_plugins.llamacpp.bench import prepare_in_process

    return prepare_in_process(options)


def _sim_binding(options: dict[str, Any]) -> Any:
    from harness_plugins.llamacpp.simulate import BindingTarget

    return BindingTarget(options)


def _llama_bench(options: dict[str, Any]) -> Any:
    from harness_plugins.llamacpp.bench import LlamaBenchArm

    return LlamaBenchArm(options)


def _prepare_llama_bench(options: dict[str, Any]) -> dict[str, Any]:
    from harness_plugins.llamacpp.bench import prepare_llama_bench

    return prepare_llama_bench(options)


def _sim_llama_bench(options: dict[str, Any]) -> Any:
    from harness_plugins.llamacpp.simulate import LlamaBenchTarget

    return LlamaBenchTarget(options)


def _xllamacpp(options: dict[str, Any]) -> Any:
    from harness_plugins.llamacpp.bench import XllamacppArm

    return XllamacppArm(options)


def _server(options: dict[str, Any]) -> Any:
    from harness_plugins.llamacpp.bench_http import ServerArm

    return ServerArm(options)


def _llama_server(options: dict[str, Any]) -> Any:
    from harness_plugins.llamacpp.bench_http import LlamaServerArm

    return LlamaServerArm(options)


def bench_arms() -> dict[str, BenchArmKind]:
    return {
        IN_PROCESS: BenchArmKind(make=_in_process, prepare=_prepare_in_process, sim_target=_sim_binding),
        "llama-bench": BenchArmKind(make=_llama_bench, prepare=_prepare_llama_bench, sim_target=_sim_llama_bench),
        "xllamacpp": BenchArmKind(make=_xllamacpp),
        "server": BenchArmKind(make=_server),
        "llama-server": BenchArmKind(make=_llama_server),
    }
