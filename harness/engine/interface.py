"""The one engine interface: what an engine provides to the core, as one registered object.

An engine plugin returns an :class:`EngineImpl` from ``harness_engine_register()``;
:mod:`harness.engine.registry` looks it up by name. Each capability is optional: what an engine
does not provide is ``None`` (or empty), and the stage that needs it says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.core.types import HostInfo, MatchResult

# The interface names the core's config and video types only in words: the modules that hold
# them (harness.config.*, harness.video.job) look engines up here, and an import back would
# close a circle. The engine packages type their functions precisely.

#: ``match(model, host)``: whether the engine serves a model (facts: format, quantization,
#: architecture, abilities) on the probed host.
MatchFn = Callable[[dict[str, Any], "HostInfo"], "MatchResult"]
#: ``config_check(config, context)`` -> diagnostics: the engine's own rules for a model config
#: whose ``backend:`` resolves to it (config: :class:`harness.config.model.ModelConfig`, values the
#: schema refuses left out; context: :class:`harness.config.rules.CheckContext`, which locates
#: findings with ``context.error(path, ...)`` / ``context.warn``; diagnostics:
#: :class:`harness.config.loader.Diagnostic`).
ConfigCheckFn = Callable[[Any, Any], Sequence[Any]]
#: ``video_generate(request, workdir, progress, cancel)`` -> :class:`harness.video.job.EngineOutput`
#: for a :class:`harness.video.job.VideoJob`.
VideoGenerateFn = Callable[[Any, Path, Callable[[int, int], None], threading.Event], Any]


@dataclass(frozen=True, kw_only=True)
class BenchArmKind:
    """One bench arm kind an engine provides (``harness bench KIND:engine=NAME,...``)."""

    make: Callable[[dict[str, Any]], Any]
    """``make(options)`` -> the arm (:class:`harness.bench.arms.Arm`), in the bench worker."""
    prepare: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
    """``prepare(options)`` -> the options the worker gets, in the parent (build the pin it names,
    with progress shown)."""
    sim_target: Callable[[dict[str, Any]], Any] | None = None
    """``sim_target(options)`` -> a :class:`harness.bench.simulation.SimTarget`; None: this kind cannot be
    measured by simulation."""


@dataclass(frozen=True, kw_only=True)
class RandomModel:
    """A random-weight model an engine's plugin writes (fixture kind ``tiny``, chosen by its ``shape``)."""

    write: Callable[[Path, int], Path]
    """``write(dest, seed)``: same seed, same bytes."""
    version: str
    """Changes whenever the bytes written would change; a file written by another version is rewritten."""
    doc: str = ""


@dataclass(frozen=True, kw_only=True)
class EngineImpl:
    """What one engine plugin provides to the core."""

    name: str
    serves: tuple[str, ...] = ()
    """request kinds: "text", "embeddings", "video"."""
    default: bool = False
    """The engine used when a command names none (one per kind of request)."""
    load: Callable[..., Any] | None = None
    """``load(model, *, variant=None, **engine_args)`` -> a loaded engine (text engines). Loading a
    model config adds ``effective=`` (:class:`harness.config.effective.Effective`, the values
    ``harness config show`` prints) for the engine to map onto its own parameters."""
    estimate_memory: Callable[..., dict[str, Any]] | None = None
    """``estimate_memory(model, *, variant=None, **engine_args)`` (``effective=`` for a config, as
    ``load``) -> the engine's own estimate of that load, no weight read: ``rows`` (each device the
    model uses, then the host: ``weights``, ``kv_cache``, ``compute``, ``need``, ``free``, ``total``,
    ``budget``, ``margin``, ``available``, ``fits``), ``n_ctx``, ``n_layer``, ``n_gpu_layers``, ``fit``,
    ``fits``, ``verdict``, ``variant``. None: the engine cannot say (``harness inspect memory`` says
    "not known" rather than guess)."""
    devices: Callable[[], list[dict[str, Any]]] | None = None
    """``devices()`` -> per installed variant (``variant``, ``accepted``, ``devices``: ``name``,
    ``platform`` (the ggml registry: CPU, Vulkan, CUDA), ``type``, ``free``, ``total``, ``gpu_index``;
    or ``error``)."""
    probe_model: Callable[[], Path] | None = None
    """A tiny model for the CPU-level smoke probe (written on demand)."""
    random_models: Mapping[str, RandomModel] = field(default_factory=dict)
    """Shape name (``tiny``, ...) -> the random-weight model the engine writes (fixture kind ``tiny``)."""
    convert: Callable[..., tuple[Path, bool]] | None = None
    """``convert(src_dir, *, engine_tree, outtype)`` -> (gguf, converted now) (fixture kind ``converted``)."""
    cross_variant: Callable[..., dict[str, Any]] | None = None
    """``cross_variant(model, *, threads)``: the same greedy prompt on every installed variant and CPU
    level (qualify's cross-variant stage)."""
    cross_engine: Callable[..., dict[str, Any]] | None = None
    """``cross_engine(model, peer_model, *, threads)``: the same greedy prompts on this engine (``model``)
    and on the peer its descriptor's ``qualify.cross_engine`` names (``peer_model``, the same weights in
    the peer's format); a dict with ``summary`` (``passed``, ``prompts``, ``identical``, ...) and
    ``rows`` (qualify's cross-engine stage)."""
    emulated_levels: Callable[..., dict[str, Any]] | None = None
    """``emulated_levels(artifact, *, tree, models, expect, bench_model, threads, only, n_tokens)``: every
    CPU level of a cross-built artifact run under an emulated CPU that has its features (the level table)."""
    fixture_env: Callable[[], Mapping[str, str]] | None = None
    """Extra model fixtures the engine's e2e specs need (name -> path), written on demand."""
    old_pin_bench_arm: str | None = None
    """Bench arm kind that runs an artifact's own benchmark tool (old pin vs new pin)."""
    compare_outputs: Callable[..., dict[str, Any]] | None = None
    """``compare_outputs(a, b, *, model, workdir)`` -> ``kld`` (mean KL divergence of b's next-token
    distributions from a's), ``top1`` (the fraction of positions whose most likely token agrees) and
    ``positions``: two builds of this engine (artifact dirs ``a`` and ``b``, e.g. two commits) on the same
    model and text, through the artifacts' own programs (``harness bisect``'s agreement gate)."""
    bench_arms: Mapping[str, BenchArmKind] = field(default_factory=dict)
    """Arm kind -> how to make it. A spec naming ``engine=NAME`` takes that engine's kind; one naming
    none takes the only engine that has the kind, or the default text engine among several
    (:func:`harness.bench.arms.engine_arm`). Engine-free kinds (the fake) come from the
    ``harness_bench_arm`` hook."""
    match: MatchFn | None = None
    """``match(model, host)`` -> :class:`~harness.core.types.MatchResult` (``harness select``); without
    it the engine is registered but answers for no model."""
    config_check: ConfigCheckFn | None = None
    """``config_check(config, context)`` -> diagnostics, called for every config whose backend
    resolves to this engine (LocalAI's backend names included), valid or not."""
    e2e_specs: Callable[[], list[Path]] | None = None
    """Pytest files holding the engine's e2e specs (qualify's e2e stage), for an engine whose specs are
    not in its folder's ``e2e/`` (one installed from another distribution keeps them in its package)."""
    localai_backends: tuple[str, ...] = ()
    """LocalAI backend names this engine serves (what configs write as ``backend:``); their aliases in
    ``harness/config/localai.yaml`` follow them."""
    video_family: str | None = None
    """The video family (``harness/families/families.yaml``) of a config whose backend is this engine,
    when the config declares none."""
    video_families: tuple[str, ...] = ()
    """Every video family this engine renders; empty: ``video_family`` alone. ``harness select`` and
    the video commands refuse a config of another family, saying why."""
    video_limits: Mapping[str, int | float] = field(default_factory=dict)
    """Overrides of :class:`harness.families.limits.VideoLimits` (field -> value) for this engine."""
    video_generate: VideoGenerateFn | None = None
    """``video_generate(request, workdir, progress, cancel)`` -> :class:`~harness.video.job.EngineOutput`.

    Called only after the request, partition, canvas and frame count were checked and ffmpeg was
    found; keyframes are already binary PPMs at the exact canvas. The engine writes frames
    (PPM/PNG files or one raw RGB24 file) and optionally a WAV under ``workdir`` and spawns no
    ffmpeg itself: it may propose a mux argv, whose argv[0] the harness replaces with the
    resolved ffmpeg. ``progress(step, total)`` after each denoising step raises when the request
    was cancelled; ``cancel`` is set when the caller cancels (check it between steps)."""
    extra: dict[str, Any] = field(default_factory=dict)
