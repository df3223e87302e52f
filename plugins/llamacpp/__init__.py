"""Engine plugin ``llamacpp``: llama.cpp serves GGUF models (and HF safetensors dirs, converted once).

Everything llama.cpp-specific in Python lives in this package: the runtime glue
(:mod:`.engine`), model resolution and conversion (:mod:`.models`, :mod:`.convert`), the tiny
model (:mod:`.tiny`), bench arms (:mod:`.bench`: our backend, the xllamacpp peer,
llama-bench) and the cross-variant check (:mod:`.crossvariant`). The core reaches them
through the :class:`~harness.registry.EngineImpl` registered below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import paths
from harness.plugin import hookimpl
from harness.registry import EngineImpl
from harness.types import HostInfo, MatchResult

NAME = "llamacpp"
FORMATS = ("ggufv2", "safetensors")
#: Architectures the pinned llama.cpp loads (general.architecture); the engine has the final word.
UNSUPPORTED_QUANT = ("gptq", "awq", "fp8")


@hookimpl
def harness_engine_names() -> list[str]:
    return [NAME]


def _load(model: str | Path, *, variant: str | None = None, **engine_args: Any) -> Any:
    from harness_plugins.llamacpp.engine import Engine

    return Engine.load(model, variant=variant, **engine_args)


def _probe_model() -> Path:
    """The tiny llama with Q4_1 matrices: the quantized (SIMD and AMX) matmul kernels run."""
    from harness_plugins.llamacpp.tiny import write_tiny_llama

    path = paths.models_dir() / "tiny-llama-s0-Q4_1.gguf"
    if not path.is_file():
        write_tiny_llama(path, quant="Q4_1")
    return path


def _write_tiny(dest: Path, seed: int) -> Path:
    from harness_plugins.llamacpp.tiny import write_tiny_llama

    return write_tiny_llama(dest, seed=seed)


def _convert(src_dir: Path, *, engine_tree: Path, outtype: str) -> tuple[Path, bool]:
    from harness_plugins.llamacpp.convert import ensure_converted

    return ensure_converted(src_dir, engine_tree=engine_tree, outtype=outtype)


def _cross_variant(model: Path) -> dict[str, Any]:
    from harness_plugins.llamacpp.crossvariant import cross_variant

    return cross_variant(model)


@hookimpl
def harness_engine_register() -> list[EngineImpl]:
    return [EngineImpl(name=NAME, serves=("text", "embeddings"), default=True, load=_load,
                       probe_model=_probe_model, write_tiny=_write_tiny, convert=_convert,
                       cross_variant=_cross_variant, old_pin_bench_arm="llama-bench")]


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

    return sorted((project_root() / "tests" / "e2e" / "llamacpp").glob("test_*.py"))
