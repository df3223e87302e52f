"""Engine plugin ``sdcpp`` (stable-diffusion.cpp): Wan video checkpoints rendered by the pybind11 binding.

Its config rules (``config_check`` on the registered engine) are its video family's (``video_family``,
else the engine's own, ``wan``: 4n+1 frames, a 16-pixel grid, no audio; see harness/families/families.yaml).
LocalAI calls this backend ``stablediffusion-ggml``; those configs are checked here too,
and their options may be flags (``diffusion_model``), as LocalAI's backend takes them.

The checkpoint set comes from the model config: ``parameters.model`` is the DiT,
``video_vae`` the video VAE, ``video_encoder`` the umt5 text encoder (optional:
without one the engine renders unconditioned, which the tiny CI set relies on). The harness
resolves them inside the models directory before the job reaches this plugin. The engine
renders the wan family only (``select`` refuses a config of another family); a job is planned
on Wan's grids (4n+1 frames, 16-pixel sides), so the binding renders exactly the planned count.
The binding wheel (``harness build-binding sdcpp --variant cpu``)
writes binary PPM frames; the harness muxes them. Wan renders no audio, so the
MP4 is video-only.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from harness.core.errors import BindingError, VideoError
from harness.core.types import HostInfo, MatchResult
from harness.engine.plugin import hookimpl
from harness.engine.registry import EngineImpl

if TYPE_CHECKING:
    from harness.config.loader import Diagnostic
    from harness.config.model import ModelConfig
    from harness.config.rules import CheckContext
    from harness.video.job import EngineOutput, VideoJob


NAME = "sdcpp"
FORMATS = ("ggufv2", "safetensors")
#: Binding variants in the order they are tried; the descriptor lists what is built.
VARIANT_ORDER = ("cuda", "vulkan", "metal", "cpu")
#: Video families this engine renders (harness/families/families.yaml): Wan's VAE packs 4n+1 frames.
FAMILIES = ("wan",)
#: Partitions this engine renders: text-only and first/last-frame (keyframes through the VAE).
PARTITIONS = ("t2va", "fl2va")
FRAMES_DIR = "frames"

_lock = threading.Lock()
_contexts: dict[tuple[Any, ...], Any] = {}
_loaded_backends: set[str] = set()


def _fixture_env() -> dict[str, str]:
    """The tiny random-weight Wan set the video specs render with (written once, deterministic)."""
    from harness.core import paths
    from harness_plugins.sdcpp.tiny_wan import write_tiny_wan

    wan = paths.models_dir() / "tiny-wan"
    write_tiny_wan(wan)
    return {"HARNESS_VIDEO_TINY": str(wan)}


@hookimpl
def harness_engine_register() -> list[EngineImpl]:
    # The binding takes an int64_t seed; width, height and frames are C ints, which the
    # default video limits already keep in range.
    return [EngineImpl(name=NAME, serves=("video",), default=True, fixture_env=_fixture_env, match=match,
                       config_check=config_check, localai_backends=("stablediffusion-ggml",),
                       video_family=FAMILIES[0], video_families=FAMILIES, video_limits={"max_seed": 2**63 - 1}, video_generate=video_generate)]


def match(model: dict[str, Any], host: HostInfo) -> MatchResult:
    """Whether stable-diffusion.cpp serves ``model`` (its facts) on ``host``: video checkpoints only."""
    fmt = model.get("format")
    abilities = model.get("abilities") or []
    if "video" not in abilities:
        return MatchResult(engine=NAME, ok=False,
                           reason="stable-diffusion.cpp engine serves video models only "
                                  f"(known_usecases has no 'video'; found {list(abilities)})")
    if fmt not in FORMATS:
        return MatchResult(engine=NAME, ok=False,
                           reason=f"stable-diffusion.cpp engine loads GGUF or safetensors checkpoints; model is {fmt}")
    return MatchResult(engine=NAME, ok=True, variant="cpu")


def config_rules() -> tuple[Any, ...]:
    """stable-diffusion.cpp's own config rules (``harness validate --explain``); the video family's
    are the core's (HRN013, HRN014)."""
    from harness.config.refs import Rule

    return (Rule(code="SDC001", severity="note",
                 summary="known_usecases has video but no video_* option names the checkpoints this harness's "
                         "stable-diffusion.cpp engine renders from"),)


def config_check(config: ModelConfig, context: CheckContext) -> list[Diagnostic]:
    """The video family's rules for a config whose backend resolves to this engine."""
    from harness.config.refs import register
    from harness.config.video_rules import check_video

    register(*config_rules())
    if context.options.video_engaged:
        return check_video(context)
    if "video" in config.known_usecases:
        # LocalAI's own backend takes its options (diffusion_model, vae_path, ...): only this
        # harness's engine needs the video_* set, so this is about coverage, not the config.
        return [context.note(("known_usecases",), "known_usecases includes video but no video_* option "
                                                  "names the checkpoint set (video_vae, ...) that this "
                                                  "harness's stable-diffusion.cpp engine renders from",
                             code="SDC001")]
    return []


def checkpoint_set(checkpoints: Mapping[str, Path]) -> dict[str, Any]:
    """The binding's context parameters from the job's checkpoint set.

    The paths were resolved and confined to the models directory by the harness
    (:func:`harness.video.target.resolve_checkpoints`); this only names them as the binding does.
    """
    dit = checkpoints.get("parameters.model")
    if dit is None:
        msg = "the model config names no DiT: set parameters.model"
        raise VideoError(msg)
    vae = checkpoints.get("video_vae")
    if vae is None:
        msg = "stable-diffusion.cpp needs the video VAE: set video_vae in options"
        raise VideoError(msg)
    out: dict[str, Any] = {"diffusion_model": str(dit), "vae": str(vae)}
    encoder = checkpoints.get("video_encoder")
    if encoder is not None:
        out["text_encoder"] = str(encoder)
    threads = os.environ.get("HARNESS_VIDEO_THREADS")
    if threads and threads.isdigit():
        out["n_threads"] = int(threads)
    return out


def _check_grid(request: VideoJob) -> None:
    """Refuse a job off Wan's grids: the binding would render another frame count or canvas than planned."""
    from harness.families.table import get_family

    if request.family not in FAMILIES:
        msg = (f"stable-diffusion.cpp renders the {' and '.join(FAMILIES)} family, not {request.family}; "
               f"declare video_family:{FAMILIES[0]}")
        raise VideoError(msg)
    family = get_family(request.family)
    frames_ok = family.align_frames(request.num_frames) == request.num_frames
    sides_ok = all(family.align_side(n) == n for n in (request.width, request.height))
    if not (frames_ok and sides_ok):
        msg = (f"the job asks for {request.num_frames} frames at {request.width}x{request.height}, off "
               f"{family.name}'s grids ({family.frame_grid_name} frames, {family.pixel_grid}-pixel sides): "
               "plan it with harness.video (video check shows the plan)")
        raise VideoError(msg)


def load_binding() -> ModuleType:
    """The installed binding (``harness_stable_diffusion_cpp_<variant>._core``)."""
    from harness.binding.wheel import package_name
    from harness.core import crash
    from harness.engine.descriptor import load_engine
    from harness.runtime import levels

    spec = load_engine(NAME)
    allowed = spec.variants or VARIANT_ORDER
    tried = []
    for variant in (v for v in VARIANT_ORDER if v in allowed):
        package = package_name(NAME, variant)
        tried.append(package)
        try:
            pkg = importlib.import_module(package)
            core = importlib.import_module(f"{package}._core")
        except ImportError:
            continue
        lib_dir = str(getattr(pkg, "LIB_DIR", ""))
        if lib_dir:
            # $HARNESS_CPU_LEVEL forces one CPU level here too (no smoke probe for video yet).
            lib_dir = str(levels.backend_dir(Path(lib_dir), probe=False))
        with _lock:
            if lib_dir and lib_dir not in _loaded_backends:
                core.load_backends(lib_dir)
                _loaded_backends.add(lib_dir)
        crash.note(variant=variant, cpu_level=os.environ.get(levels.LEVEL_ENV) or None)
        return core
    msg = (f"no stable-diffusion.cpp binding is installed (tried {', '.join(tried)}); "
           "run `harness build sdcpp --variant cpu` then "
           "`harness build-binding sdcpp --variant cpu`")
    raise BindingError(msg)


def _context(core: ModuleType, params: dict[str, Any]) -> Any:
    # Loading a real checkpoint set takes minutes: keep it for the next request.
    key = tuple(sorted(params.items()))
    with _lock:
        ctx = _contexts.get(key)
        if ctx is None or not ctx.usable:
            ctx = core.VideoContext(params)
            _contexts[key] = ctx
        return ctx


def video_generate(request: VideoJob, workdir: Path, progress: Callable[[int, int], None],
                   cancel: threading.Event) -> EngineOutput:
    """Render a validated request into ``workdir`` (binary PPM frames; the harness muxes them)."""
    from harness.video.job import EngineOutput
    if request.partition not in PARTITIONS:
        msg = (f"stable-diffusion.cpp renders {' and '.join(PARTITIONS)} (text-only, first/last frame), "
               f"not {request.partition}; declare video_partition:fl2va")
        raise VideoError(msg)
    if request.device in ("cuda", "gpu"):
        msg = (f"video_device:{request.device} asked for, but stable-diffusion.cpp is built for cpu only here; "
               "set video_device:cpu (a GPU variant needs a cuda/vulkan row in engines/sdcpp)")
        raise VideoError(msg)
    _check_grid(request)
    params = checkpoint_set(request.checkpoints)
    core = load_binding()
    ctx = _context(core, params)
    frames = workdir / FRAMES_DIR
    frames.mkdir(parents=True, exist_ok=True)

    def on_step(step: int, total: int) -> None:
        if cancel.is_set():
            from harness.video.mux import VideoCancelledError

            msg = f"cancelled at step {step}/{total}"
            raise VideoCancelledError(msg)
        progress(step, total)

    ctx.generate_video(
        out_dir=str(frames), prompt=request.prompt, width=request.width, height=request.height,
        frames=request.num_frames, steps=request.steps, seed=request.seed,
        init_image=str(request.start_image) if request.start_image else None,
        end_image=str(request.end_image) if request.end_image else None,
        progress=on_step)
    return EngineOutput(frames=frames)

