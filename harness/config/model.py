"""The model config (LocalAI-compatible YAML) as frozen, keyword-only dataclasses.

Every field carries a doc string right under it: :mod:`harness.config.schema`
reads them (with ``ast``) into the committed JSON Schema, so the docs an editor
shows and the code cannot drift apart. ``metadata={"schema": {...}}`` adds JSON
Schema constraints (minimum, maximum) the type hints cannot say.

Two surfaces carry engine settings besides the typed top level: the
``options:`` list (``key:value`` strings) and the ``engine_args:`` map. Their
keys are modelled by :class:`EngineOptions` and :class:`VideoOptions`; those
classes are the registry of known keys, their types, defaults and meaning.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.config.documentation import field_docs
from harness.config.localai import vocabulary
from harness.families.canvas import CANVAS_PATTERN
from harness.families.limits import DEFAULT_LIMITS as VIDEO
from harness.families.table import default_family, family_names
from harness.runtime.embeddings import LongTextMode

#: What a model is used for: one of LocalAI's ``known_usecases`` names (``localai.yaml``).
Usecase = str
USECASES: tuple[str, ...] = vocabulary().usecases
#: The largest count or size the engines take (a C ``int``).
INT_MAX = 2**31 - 1
#: Video render defaults: the default family's (``harness/families/families.yaml``).
_VIDEO_DEFAULTS = default_family()
#: The largest seed (LocalAI decodes it into a Go ``int``); engines narrow it.
SEED_MAX = 2**63 - 1
Partition = Literal["t2va", "fl2va", "ref2va"]
VideoDevice = Literal["cpu", "cuda", "gpu"]
SchedulingPolicy = Literal["fcfs", "priority", "lpm"]
#: Speculative decoding kinds, spelled as llama.cpp's --spec-type (and LocalAI's spec_type option).
SpecType = Literal["none", "ngram-simple", "draft-simple"]


def _c(default: Any = None, **schema: Any) -> Any:
    """A field with a default and extra JSON Schema keywords."""
    return field(default=default, metadata={"schema": schema} if schema else {})


#: metadata marking a tri-state boolean (unset, true, explicit false; see harness.config.options.tristate).
TRISTATE = {"tristate": True}
#: metadata marking a path resolved against the models directory.
MODELS_PATH = {"path": "models"}
#: metadata marking an option whose value is a JSON document.
JSON_VALUE = {"json": True}


@dataclass(frozen=True, kw_only=True)
class Parameters:
    """``parameters:``: the model file and the default sampling settings of requests."""

    model: str
    """Model to load, relative to the models directory: a .gguf file or a directory with config.json."""

    temperature: float | None = _c(minimum=0)
    """Sampling temperature; 0 means greedy."""

    top_p: float | None = _c(minimum=0, maximum=1)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""

    top_k: int | None = _c(minimum=-1, maximum=INT_MAX)
    """Keep only the k most likely tokens; 0 or -1 (vLLM's spelling) disables the filter."""

    min_p: float | None = _c(minimum=0, maximum=1)
    """Drop tokens whose probability is below min_p times the top token's."""

    max_tokens: int | None = _c(minimum=0, maximum=INT_MAX)
    """Most tokens to generate; 0 means up to the context size."""

    seed: int | None = _c(minimum=-1, maximum=SEED_MAX)
    """Sampling seed; -1 picks a random seed per request."""

    repeat_penalty: float | None = _c(minimum=0)
    """Penalty for repeating one of the last repeat_last_n tokens (1.0 disables)."""

    repeat_last_n: int | None = _c(minimum=-1, maximum=INT_MAX)
    """How many recent tokens the repeat penalty looks at (-1: the whole context)."""

    presence_penalty: float | None = None
    """Penalty for tokens already present in the output (OpenAI semantics)."""

    frequency_penalty: float | None = None
    """Penalty growing with how often a token already occurred (OpenAI semantics)."""

    ignore_eos: bool | None = None
    """Keep generating past the end-of-sequence token."""

    stop: tuple[str, ...] = ()
    """Stop sequences (the harness's key; LocalAI's is the top-level stopwords, merged with it)."""


@dataclass(frozen=True, kw_only=True)
class Template:
    """``template:``: prompt templates; unset uses the model's own chat template."""

    chat: str | None = None
    """Go-template for a whole chat prompt."""

    chat_message: str | None = None
    """Go-template for one chat message."""

    completion: str | None = None
    """Go-template for a completion prompt."""

    edit: str | None = None
    """Go-template for an edit prompt."""

    function: str | None = None
    """Go-template used when tools are offered."""

    use_tokenizer_template: bool | None = None
    """Let the engine apply the model's own template (GGUF tokenizer.chat_template or tokenizer_config.json)."""

    join_chat_messages_by_character: str | None = None
    """String placed between rendered chat messages."""

    multimodal: str | None = None
    """Go-template placing images/audio markers in a prompt."""

    reply_prefix: str | None = None
    """Text the model's reply is prefixed with (prefilled in the prompt)."""

    system_messages_after_first: str | None = None
    """What happens to system messages after the first: "" / error (pass), merge, user."""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """One model as LocalAI-style YAML: which engine serves which files, and how."""

    name: str = field(metadata={"schema": {"minLength": 1}})
    """Model name clients ask for; unique in a models directory."""

    backend: str | None = None
    """Engine plugin serving this model (see `harness select`); unset lets selection choose."""

    description: str | None = None
    """Free text shown in listings."""

    context_size: int | None = _c(minimum=1, maximum=INT_MAX)
    """Sequence length; max_model_len, then options max_model_len and engine_args.max_model_len override it."""

    max_model_len: int | None = _c(minimum=1, maximum=INT_MAX)
    """Sequence length (LocalAI's top-level key); beats context_size, loses to options and engine_args."""

    threads: int | None = _c(minimum=1, maximum=INT_MAX)
    """CPU threads for prompt processing and generation; unset uses the CPU count."""

    gpu_layers: int | None = _c(minimum=-1, maximum=INT_MAX)
    """Layers offloaded to the GPU (-1, or more than the model has: all). Unset: all of them on a GPU
    variant (the engine's own default, and LocalAI's), none where there is no GPU device. LocalAI's field
    is an integer: for layers fitted to free memory write options [gpu_layers:auto]."""

    main_gpu: str | None = None
    """The device layers are offloaded to, as options device takes it; options and engine_args device
    win. LocalAI's key: a string its backends read as a GPU index."""

    f16: bool | None = None
    """Keep the KV cache in 16-bit floats."""

    mmap: bool | None = None
    """Memory-map the model file (false: read it into memory)."""

    mmlock: bool | None = None
    """Lock the model in memory (mlock), so it is never swapped out."""

    low_vram: bool | None = None
    """Trade speed for GPU memory (engines that have such a mode)."""

    no_kv_offloading: bool | None = None
    """Keep the KV cache in host memory even when layers are offloaded."""

    flash_attention: str | bool | None = _c(enum=["on", "off", "auto", True, False, None])
    """Flash attention: on, off or auto (true/false accepted); options flash_attn wins."""

    cache_type_k: str | None = None
    """KV-cache type for keys (f16, q8_0, ...); options cache_type_k wins."""

    cache_type_v: str | None = None
    """KV-cache type for values (f16, q8_0, ...); options cache_type_v wins."""

    system_prompt: str | None = None
    """Default system prompt put before a chat that has none."""

    stopwords: tuple[str, ...] = ()
    """Stop sequences (LocalAI's key), merged with parameters.stop."""

    embeddings: bool | None = None
    """Serve embeddings from this model."""

    reranking: bool | None = None
    """Serve reranking from this model."""

    parameters: Parameters
    """The model file and default sampling settings."""

    options: tuple[str, ...] = ()
    """Engine options as "key:value" strings, split on the first colon (JSON values survive)."""

    engine_args: dict[str, Any] = field(default_factory=dict)
    """Engine arguments spelled like vLLM's CLI flags; applied after options, so they win."""

    known_usecases: tuple[Usecase, ...] = ()
    """What the model is for: LocalAI's names in any case or as FLAG_* (chat, FLAG_CHAT, embeddings, image,
    video, ...); a value LocalAI does not know is dropped (a warning)."""

    cuda: bool | None = None
    """The model needs a CUDA device."""

    draft_model: str | None = None
    """Draft model for speculative decoding: a path, a models-dir name or a reference."""

    n_draft: int | None = _c(minimum=1, maximum=64)
    """Most tokens drafted per sequence and step (spec_n_max in options/engine_args wins)."""

    mmproj: str | None = None
    """Multimodal projector (.gguf), relative to the models directory."""

    template: Template | None = None
    """Prompt templates."""


# ---------------------------------------------------------------------------
# keys of options: / engine_args:
# ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    """Known keys of ``options:`` and ``engine_args:`` for text engines, with engine defaults."""

    block_size: int = _c(32, minimum=1, maximum=INT_MAX)
    """Tokens per KV-cache block."""

    num_blocks: int = _c(256, minimum=1, maximum=INT_MAX)
    """KV-cache blocks to allocate."""

    n_parallel: int | None = _c(minimum=1, maximum=INT_MAX)
    """Concurrent sequences (alias max_num_seqs); unset: min(8, CPU count)."""

    max_num_batched_tokens: int = _c(0, minimum=0, maximum=INT_MAX)
    """Token budget per chunked-prefill step; 0 keeps the engine's per-architecture default."""

    max_model_len: int | None = _c(minimum=1, maximum=INT_MAX)
    """Sequence length; beats context_size, loses to engine_args.max_model_len."""

    scheduling_policy: SchedulingPolicy = "fcfs"
    """Scheduler admission policy."""

    tool_parser: str = ""
    """Tool-call parser (alias tool_call_parser); empty: detect from the template."""

    reasoning_parser: str = ""
    """Reasoning parser; empty: detect from the template, "none": no reasoning split."""

    speculative_config: dict[str, Any] | None = field(default=None, metadata=JSON_VALUE)
    """Speculative decoding, as vLLM's --speculative-config JSON ({"method": "mtp", ...})."""

    spec_type: SpecType | None = None
    """Speculative decoding (alias speculative_type): ngram-simple drafts from the sequence's own
    prompt and output, draft-simple from draft_model, none; unset: draft-simple when draft_model is set."""

    spec_n_max: int | None = _c(minimum=1, maximum=64)
    """Most tokens drafted per sequence and step (alias draft_max; the config's n_draft feeds it); unset: 8."""

    spec_ngram_size_n: int = _c(3, minimum=1, maximum=64)
    """ngram-simple: how many of the latest tokens must recur to draft what followed them (alias ngram_size_n)."""

    spec_min_acceptance: float = _c(0.1, minimum=0, maximum=1)
    """A sequence whose running draft acceptance falls below this stops drafting for a while (backing off)."""

    kv_transfer_config: dict[str, Any] | None = field(default=None, metadata=JSON_VALUE)
    """External KV connector, as vLLM's --kv-transfer-config JSON."""

    tokenizer_config_path: str | None = field(default=None, metadata=MODELS_PATH)
    """Where the chat template comes from (alias tokenizer_config); default: the model's tokenizer_config.json."""

    enable_prefix_caching: bool | None = field(default=None, metadata=TRISTATE)
    """Automatic prefix caching (alias enable_radix_attention); unset: per model, false: force off."""

    context_shift: bool = False
    """Context shift (LocalAI's option and the engine's --context-shift; off in both): a prompt longer
    than the context loses its oldest tokens after the system prompt, and a sequence that reaches the
    context erases context_erase of its tokens after the system prompt and goes on; off, such a prompt is
    refused and such a generation stops (finish_reason length)."""

    context_erase: float = _c(0.5, exclusiveMinimum=0, exclusiveMaximum=1)
    """With context_shift: the share of the context (after the system prompt) erased each time; 0.5 is
    the engine's default (n_discard: half) and GPT4All's contextErase."""

    enable_jump_forward: bool | None = field(default=None, metadata=TRISTATE)
    """Jump-forward decoding; unset follows the engine's environment default."""

    flash_attn: bool | None = field(default=None, metadata=TRISTATE)
    """Flash attention; unset: the engine decides."""

    threads: int | None = _c(minimum=1, maximum=INT_MAX)
    """Generation threads; unset: the config's threads, else the CPU count."""

    threads_batch: int | None = _c(minimum=1, maximum=INT_MAX)
    """Prompt-processing threads; unset: same as threads."""

    n_batch: int = _c(2048, minimum=1, maximum=INT_MAX)
    """Logical batch size for prompt processing."""

    n_ubatch: int = _c(512, minimum=1, maximum=INT_MAX)
    """Physical batch size for prompt processing."""

    n_gpu_layers: int | Literal["auto"] | None = _c(minimum=-1, maximum=INT_MAX)
    """Layers offloaded to the GPU (alias gpu_layers; -1: all; unset: all on a GPU variant); "auto": as
    many as fit the chosen device's free memory less fit_target, the engine's own fitting (its -ngl auto);
    beats the config's gpu_layers."""

    device: str | int | None = None
    """The device layers are offloaded to: a name as `harness devices` lists it (Vulkan0, CUDA0), an index
    among the GPU devices (0, 1), or none (no offload); unset: every GPU device (the engine's default).
    Engines get it as a string; the config's main_gpu feeds it."""

    fit_target: int = _c(1024, minimum=0, maximum=INT_MAX)
    """Memory left free on each device when layers are fitted or checked, in MiB: the engine's --fit-target
    (default 1024 MiB)."""

    cache_type_k: str = "f16"
    """KV-cache type for keys (f16, q8_0, ...)."""

    cache_type_v: str = "f16"
    """KV-cache type for values (f16, q8_0, ...)."""

    long_text_mode: LongTextMode = "mean"
    """Embeddings of a text longer than the model's window (GPT4All's): mean of its window-sized chunks,
    weighted by their tokens (at most 8192 tokens), or truncate to its first window; a request may choose."""

    matryoshka: bool = False
    """The embedding model is Matryoshka-trained (nomic-embed-text-v1.5): a request's dimensions keeps the
    prefix and renormalizes it; otherwise (all-MiniLM-L6-v2) the prefix is the full vector's, not renormalized."""


@dataclass(frozen=True, kw_only=True)
class VideoOptions:
    """Known ``video_*`` keys of ``options:``: the checkpoint set and render defaults (the video pipeline's too)."""

    video_encoder: str | None = field(default=None, metadata=MODELS_PATH)
    """Text encoder: a .gguf file or a directory of bf16 shards."""

    video_tokenizer: str | None = field(default=None, metadata=MODELS_PATH)
    """tokenizer.json of the text encoder; required with video_encoder."""

    video_vae: str | None = field(default=None, metadata=MODELS_PATH)
    """Video VAE weights (required)."""

    video_vae_config: str | None = field(default=None, metadata=MODELS_PATH)
    """Video VAE config (latents_mean/std, clip_length); default: config.json beside video_vae."""

    audio_vae: str | None = field(default=None, metadata=MODELS_PATH)
    """Audio VAE weights (required)."""

    audio_vae_config: str | None = field(default=None, metadata=MODELS_PATH)
    """Audio VAE config; default: config.json beside audio_vae."""

    video_prompt_embeds: str | None = field(default=None, metadata=MODELS_PATH)
    """Precomputed f32 prompt embeddings, the conditioning used without an encoder."""

    video_family: str | None = _c(enum=[*family_names(), None])
    """Which video family the checkpoint set is (its frame and pixel grids, audio or not); unset: the backend's."""

    video_partition: Partition | None = None
    """Which DiT checkpoint this is: t2va/fl2va (the FL2VA file) or ref2va; undeclared: FL2VA, with a warning."""

    video_device: VideoDevice | None = None
    """Device to render on: cpu, cuda or gpu (there is no automatic choice)."""

    video_dequant_bf16: bool | None = field(default=None, metadata=TRISTATE)
    """Dequantize weights to bf16 at load."""

    video_fp4_resident: bool | None = field(default=None, metadata=TRISTATE)
    """Keep FP4 weights resident in device memory."""

    # None (unset) lets a keyframe's aspect choose the canvas; the schema documents the family default.
    video_width: int | None = field(default=None, metadata={"schema": {
        "type": "integer", "minimum": 1, "maximum": VIDEO.max_side, "default": _VIDEO_DEFAULTS.width}})
    """Default canvas width; off the family's pixel grid the engine rounds it."""

    video_height: int | None = field(default=None, metadata={"schema": {
        "type": "integer", "minimum": 1, "maximum": VIDEO.max_side, "default": _VIDEO_DEFAULTS.height}})
    """Default canvas height; off the family's pixel grid the engine rounds it."""

    video_canvas: str | None = _c(pattern=CANVAS_PATTERN)
    """Canvas as WIDTHxHEIGHT, instead of video_width and video_height."""

    video_num_frames: int = _c(_VIDEO_DEFAULTS.frames, minimum=1, maximum=VIDEO.max_frames)
    """Default frame count; off the family's frame grid (17n+5, 4n+1) it is rounded up."""

    video_steps: int = _c(_VIDEO_DEFAULTS.steps, minimum=1, maximum=VIDEO.max_steps)
    """Default denoising steps."""

    video_fps: float = _c(_VIDEO_DEFAULTS.fps, exclusiveMinimum=0, maximum=VIDEO.max_fps)
    """The engine's native frame rate; requests asking for another rate are warned."""

    video_workdir: str | None = None
    """Parent of the per-request work directories; unset: the system temp dir."""

    video_crf: int = _c(18, minimum=0, maximum=51)
    """H.264 CRF of the mux (0-51)."""

    ffmpeg: str | None = None
    """ffmpeg binary (alias video_ffmpeg); unset: found on the host before rendering starts."""


#: Alternative spellings of option keys -> the canonical key.
OPTION_ALIASES: dict[str, str] = {
    "max_num_seqs": "n_parallel",
    "parallel": "n_parallel",
    "tool_call_parser": "tool_parser",
    "tokenizer_config": "tokenizer_config_path",
    "enable_radix_attention": "enable_prefix_caching",
    "video_ffmpeg": "ffmpeg",
    "speculative_type": "spec_type",
    "draft_max": "spec_n_max",
    "ngram_size_n": "spec_ngram_size_n",
    "gpu_layers": "n_gpu_layers",
}

#: Prefixes of dotted option keys and the dataclass their second part names a field of.
NESTED_OPTIONS: dict[str, type] = {"sampling": Parameters}


@dataclass(frozen=True)
class OptionSpec:
    """One known option key: its type, default and meaning."""

    key: str
    kind: str
    default: Any
    doc: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    tristate: bool = False
    path: bool = False
    video: bool = False


def _kind(hint: Any) -> tuple[str, tuple[str, ...]]:
    """Reduce a field's type hint to a scalar kind (int, float, bool, str, json, list) and choices."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union) and len(args) == 1:
        return _kind(args[0])
    if origin in (types.UnionType, typing.Union):
        # a number or one of some words (int | Literal["auto"]): the number's kind, the words its choices
        words = tuple(str(w) for a in args if typing.get_origin(a) is Literal for w in typing.get_args(a))
        rest = [a for a in args if typing.get_origin(a) is not Literal]
        if words and len(rest) == 1 and rest[0] in (int, float):
            return _kind(rest[0])[0], words
    if origin is Literal:
        return "str", tuple(str(a) for a in typing.get_args(hint))
    if origin is tuple or origin is list:
        return "list", ()
    if origin is dict:
        return "json", ()
    return {int: "int", float: "float", bool: "bool"}.get(hint, "str"), ()


def _specs(cls: type, *, video: bool = False) -> dict[str, OptionSpec]:
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    out: dict[str, OptionSpec] = {}
    for f in dataclasses.fields(cls):
        kind, choices = _kind(hints[f.name])
        bounds = f.metadata.get("schema", {})
        if "enum" in bounds:
            choices = tuple(str(c) for c in bounds["enum"] if isinstance(c, str))
        # A field that is None when unset documents what unset means as its schema default.
        default = bounds.get("default", f.default if f.default is not dataclasses.MISSING else None)
        out[f.name] = OptionSpec(
            key=f.name, kind=kind, default=default, doc=docs.get(f.name, ""), choices=choices,
            minimum=bounds.get("minimum"), maximum=bounds.get("maximum"),
            exclusive_minimum=bounds.get("exclusiveMinimum"), exclusive_maximum=bounds.get("exclusiveMaximum"),
            tristate=bool(f.metadata.get("tristate")), path=f.metadata.get("path") == "models",
            video=video,
        )
    return out


def option_specs() -> dict[str, OptionSpec]:
    """Every known option key (text and video), canonical spelling."""
    global _OPTION_SPECS
    if _OPTION_SPECS is None:
        _OPTION_SPECS = {**_specs(EngineOptions), **_specs(VideoOptions, video=True)}
    return _OPTION_SPECS


@functools.cache
def nested_specs(prefix: str) -> dict[str, OptionSpec]:
    """Known second parts of dotted keys under ``prefix`` (``sampling.top_k``)."""
    specs = _specs(NESTED_OPTIONS[prefix])
    return {k: v for k, v in specs.items() if k not in ("model", "stop")}


_OPTION_SPECS: dict[str, OptionSpec] | None = None


# ---------------------------------------------------------------------------
# mapping -> dataclasses
# ---------------------------------------------------------------------------


_HINTS: dict[type, tuple[dict[str, Any], tuple[dataclasses.Field[Any], ...]]] = {}


def _hints(cls: type) -> tuple[dict[str, Any], tuple[dataclasses.Field[Any], ...]]:
    """A dataclass's resolved type hints and fields (resolving them is most of from_mapping's time)."""
    if cls not in _HINTS:
        _HINTS[cls] = (typing.get_type_hints(cls), dataclasses.fields(cls))
    return _HINTS[cls]


def from_mapping(cls: type[Any], data: dict[str, Any]) -> Any:
    """Build ``cls`` from a schema-valid mapping (nested dataclasses and tuples included)."""
    hints, fields = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields:
        if f.name in data and data[f.name] is not None:
            kwargs[f.name] = _convert(hints[f.name], data[f.name])
    return cls(**kwargs)


#: hint -> (the one non-None member of an optional hint or None, is a dataclass, is a tuple):
#: what _convert asks of a hint, asked once per hint.
_HINT_SHAPES: dict[Any, tuple[Any, bool, bool]] = {}


def _shape(hint: Any) -> tuple[Any, bool, bool]:
    shape = _HINT_SHAPES.get(hint)
    if shape is None:
        origin = typing.get_origin(hint)
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = args[0] if origin in (types.UnionType, typing.Union) and len(args) == 1 else None
        shape = _HINT_SHAPES[hint] = (inner, dataclasses.is_dataclass(hint), origin is tuple)
    return shape


def _convert(hint: Any, value: Any) -> Any:
    inner, is_dataclass, is_tuple = _shape(hint)
    if inner is not None:
        return _convert(inner, value)
    if is_dataclass and isinstance(value, dict):
        return from_mapping(hint, value)
    if is_tuple and isinstance(value, list):
        return tuple(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def model_config(data: dict[str, Any]) -> ModelConfig:
    """A :class:`ModelConfig` from a mapping that passed validation."""
    config: ModelConfig = from_mapping(ModelConfig, data)
    return config
