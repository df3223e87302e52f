"""Engine plugin ``vllmcpp`` (vllm.cpp): the engine LocalAI's ``vllm-cpp`` backend binds.

vllm.cpp (engines/vllmcpp/engine.yaml) is a C++20 port of vLLM's V1 engine behind a versioned
C ABI (``include/vllm.h``, ``VLLM_ABI_VERSION``). Its runtime here (:mod:`.engine`) is a
pybind11 module over that ABI; the module refuses a libvllm whose ``vllm_abi_version()`` is not
the version it was compiled against. Model configs with ``backend: vllm-cpp`` (LocalAI's
spelling) select this engine; vllm.cpp's own option names (``block_size``, ``num_blocks``,
``max_num_seqs``, ``max_model_len``, ``tool_parser``, ``reasoning_parser``,
``tokenizer_config_path``) are the config's ``options:`` keys and reach its load parameters.

Model rule (SPEC §4): ``parameters.model`` is a ``.gguf`` file or a directory with
``config.json``; anything else is refused. vllm.cpp's GGUF loader takes the Qwen3.5/3.6 family
only (``general.architecture`` qwen35, qwen35moe, qwen3next); safetensors directories take its
dense families (``config.json`` ``architectures``, :data:`ARCHITECTURES`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.pyexec import python_argv
from harness.core.types import HostInfo, MatchResult
from harness.engine.interface import BenchArmKind, RandomModel
from harness.engine.plugin import hookimpl
from harness.engine.registry import EngineImpl

if TYPE_CHECKING:
    from harness.config.loader import Diagnostic
    from harness.config.model import ModelConfig
    from harness.config.rules import CheckContext

NAME = "vllmcpp"
FORMATS = ("ggufv2", "safetensors")
#: ``general.architecture`` values the pinned vllm.cpp's GGUF loader takes (HfConfigFromGguf).
GGUF_ARCHITECTURES = frozenset({"qwen35", "qwen35moe", "qwen3next"})
#: ``config.json`` architectures the pinned vllm.cpp registers for safetensors (its README's table).
ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "OPTForCausalLM",
    "DeepseekV2ForCausalLM", "Glm4ForCausalLM", "Glm4MoeLiteForCausalLM", "GemmaForCausalLM",
    "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM", "GraniteForCausalLM",
    "Phi3ForCausalLM",
})
SERVES = frozenset({"chat", "completion"})


def _load(model: str | Path, *, variant: str | None = None, **engine_args: Any) -> Any:
    from harness_plugins.vllmcpp.engine import Engine

    return Engine.load(model, variant=variant, **engine_args)


def _write_hf_llama(dest: Path, seed: int) -> Path:
    from harness_plugins.vllmcpp.random_hf import write

    return write(dest, seed)


def _writer_version() -> str:
    """The writer's source (its shape included): what the bytes depend on besides the seed (and
    NumPy's generator, which the member pins check). Read, not imported: registration stays cheap."""
    import hashlib

    return hashlib.sha256((Path(__file__).parent / "random_hf.py").read_bytes()).hexdigest()[:16]


def _random_models() -> dict[str, RandomModel]:
    return {"hf-llama": RandomModel(write=_write_hf_llama, version=_writer_version(),
                                    doc="a 16 M-parameter random-weight Llama, HF safetensors (BF16) with GPT-2's "
                                        "tokenizer: the model vllm.cpp and llama.cpp (its conversion) both run")}


def _cross_engine(model: Path, peer_model: Path, *, threads: int | None = None) -> dict[str, Any]:
    """The greedy cross-engine check in a process of its own (two engines' native libraries; a crash
    there names its signal and leaves the qualification running)."""
    import json
    import signal
    import subprocess

    from harness.core.errors import EngineCrashError, SubprocessError

    argv = [*python_argv("-m", "harness_plugins.vllmcpp.crossengine"), str(model), str(peer_model)]
    if threads:
        argv += ["--threads", str(threads)]
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode < 0:
        name = signal.Signals(-r.returncode).name
        raise EngineCrashError(f"the cross-engine check (vllm.cpp on {model}, llama.cpp on {peer_model}) died of "
                               f"{name}; run it alone: {' '.join(argv)}\n{r.stderr[-2000:]}")
    if r.returncode != 0:
        raise SubprocessError(argv, r.returncode, r.stdout[-2000:] + r.stderr[-4000:])
    return {**json.loads(r.stdout), "command": " ".join(argv)}


@hookimpl
def harness_engine_register() -> list[EngineImpl]:
    return [EngineImpl(name=NAME, serves=("text",), load=_load, match=match, config_check=config_check,
                       bench_arms={"in-process": BenchArmKind(make=_in_process_arm)},
                       localai_backends=("vllm-cpp",), random_models=_random_models(),
                       cross_engine=_cross_engine)]


def match(model: dict[str, Any], host: HostInfo) -> MatchResult:
    """Whether vllm.cpp serves ``model`` (its facts) on ``host``; its CPU build runs everywhere."""
    uses = [str(u) for u in model.get("abilities") or ()]
    if uses and not SERVES.intersection(uses):
        return MatchResult(engine=NAME, ok=False,
                           reason=f"the config is for {', '.join(uses)}; vllm.cpp serves {', '.join(sorted(SERVES))}")
    fmt = model.get("format")
    if fmt not in FORMATS:
        return MatchResult(engine=NAME, ok=False,
                           reason=f"vllm.cpp engine loads GGUF or safetensors (HF directory) models; model is {fmt}")
    arch = model.get("architecture")
    if fmt == "ggufv2" and isinstance(arch, str) and arch not in GGUF_ARCHITECTURES:
        return MatchResult(engine=NAME, ok=False,
                           reason=f"vllm.cpp's GGUF loader takes {', '.join(sorted(GGUF_ARCHITECTURES))} only; "
                                  f"the model is {arch}")
    archs = [str(a) for a in model.get("architectures") or ()]
    if fmt == "safetensors" and archs and not ARCHITECTURES.intersection(archs):
        return MatchResult(engine=NAME, ok=False, reason=f"family not supported by vllm.cpp: {', '.join(archs)}")
    return MatchResult(engine=NAME, ok=True, variant="cpu")


def config_rules() -> tuple[Any, ...]:
    """vllm.cpp's config rules (``harness validate --explain``)."""
    from harness.config.refs import Rule

    # a path that is not a .gguf file is read as a Hugging Face directory, whose config.json it opens first
    return (Rule(code="VLC001", severity="error",
                 source="mudler/vllm.cpp@d85906ae src/vllm/transformers_utils/hf_config.cpp:308",
                 summary="parameters.model is neither a .gguf file nor a directory with config.json: vllm.cpp "
                         "refuses it at load"),)


def config_check(config: ModelConfig, context: CheckContext) -> list[Diagnostic]:
    """The model rule (SPEC §4): ``parameters.model`` is a ``.gguf`` file or a directory with
    ``config.json``; checked when it names something in the models directory."""
    from harness.config.refs import register

    register(*config_rules())
    ref = config.parameters.model
    full = context.local_file(ref) if ref else None
    if full is None:
        return []
    at = ("parameters", "model")
    if full.is_dir() and not (full / "config.json").is_file():
        return [context.error(at, f"parameters.model {ref!r} is a directory without config.json; vllm.cpp loads "
                                  "a .gguf file or a Hugging Face model directory", code="VLC001")]
    if not full.is_dir() and full.suffix.lower() != ".gguf":
        return [context.error(at, f"parameters.model {ref!r} must be a .gguf file or a directory with config.json "
                                  "(vllm.cpp refuses anything else)", code="VLC001")]
    return []



def _in_process_arm(options: dict[str, Any]) -> Any:
    """``in-process:engine=vllmcpp,...``: vllm.cpp's binding as a bench arm (:mod:`.bench`)."""
    from harness_plugins.vllmcpp.bench import VllmArm

    return VllmArm(options)
