"""Hook specifications: every stage of the pipeline is a hook.

Names follow ``harness_<phase>_<verb>``. Hooks marked ``firstresult`` are
"choose one" hooks: they stop at the first non-None result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from harness.registry import EngineImpl
    from harness.types import (
        Buildability,
        CpuLevel,
        EngineSpec,
        HostInfo,
        MatchResult,
        PatchedTree,
        SourceSpec,
        SourceTree,
        Variant,
    )
    from harness.video.job import EngineOutput, VideoJob

hookspec = pluggy.HookspecMarker("harness")


# -------------------------------------------------------------------------
# engines
# -------------------------------------------------------------------------


@hookspec
def harness_engine_names() -> list[str]:
    """Engine names this plugin implements (each has ``engines/<name>/engine.yaml``)."""


@hookspec
def harness_engine_register() -> list[EngineImpl]:
    """The engines this plugin provides, as objects the core looks up by name.

    The core never compares engine names: it asks :mod:`harness.registry` for an engine
    and calls what the engine provides (load, probe model, fixtures, cross-variant check).
    """


@hookspec
def harness_engine_match(
    engine: str, model: dict[str, Any], host: HostInfo
) -> MatchResult | None:
    """Say whether ``engine`` can serve ``model`` on ``host``.

    :param engine: the engine being asked; plugins answer only for their own.
    :param model: facts about the model (format, quantization, architecture, abilities).
    :param host: the probed host.
    :return: a :class:`MatchResult`, or None when the engine is not this plugin's.
    """


# -------------------------------------------------------------------------
# source
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def harness_source_fetch(
    engine: str, spec: SourceSpec, cache_dir: Path
) -> SourceTree | None:
    """Fetch and verify a pinned source into the cache. Stops at first non-None result.

    :param engine: engine name, for messages.
    :param spec: the ``source:`` entry of the engine descriptor.
    :param cache_dir: the content-addressed source cache root.
    """


@hookspec
def harness_source_kinds() -> list[str]:
    """Source kinds (``source.kind`` values) this plugin fetches."""


# -------------------------------------------------------------------------
# patch
# -------------------------------------------------------------------------


@hookspec
def harness_patch_applied(tree: PatchedTree) -> None:
    """Called after the patch series was applied to a fresh working copy."""


# -------------------------------------------------------------------------
# variants
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def harness_variant_requirements(
    variant: Variant, host: HostInfo
) -> Buildability | None:
    """Check a matrix row against the host. Stops at first non-None result.

    The plugin owning ``variant.backend`` answers.
    """


@hookspec
def harness_variant_configure(
    engine: EngineSpec, variant: Variant, host: HostInfo
) -> dict[str, str] | None:
    """Extra CMake cache entries for a variant on this host (merged in plugin order)."""


@hookspec
def harness_variant_environment(
    engine: EngineSpec, variant: Variant, host: HostInfo
) -> dict[str, str] | None:
    """Extra environment variables for configuring and building a variant."""


# -------------------------------------------------------------------------
# artifacts and backend
# -------------------------------------------------------------------------


@hookspec
def harness_artifact_manifest(
    engine: EngineSpec, variant: Variant, manifest: dict[str, Any]
) -> dict[str, Any] | None:
    """Extra fields for an artifact's ``manifest.json``."""


@hookspec(firstresult=True)
def harness_artifact_cpu_levels(tree: Path, arch: str) -> list[CpuLevel] | None:
    """The CPU levels a portable build of ``tree`` produces for ``arch``, as its source defines them.

    Each level names its library and the ISA features the loader checks before it picks
    that level (read from the pinned source, never from a hand-copied table). The static
    ISA audit compares them with what each library's instructions need. Stops at first
    non-None result.

    :param tree: the patched source tree of the pin.
    :param arch: ``x86_64`` or ``aarch64``.
    """


# -------------------------------------------------------------------------
# e2e, bench, report
# -------------------------------------------------------------------------


@hookspec
def harness_e2e_specs(engine: str) -> list[Path] | None:
    """Pytest paths holding the engine's e2e specs."""


@hookspec(firstresult=True)
def harness_bench_arm(kind: str, options: dict[str, Any]) -> Any | None:
    """Create a benchmark arm of ``kind``. Stops at first non-None result."""


@hookspec(firstresult=True)
def harness_bench_arm_prepare(kind: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """Prepare an arm in the parent process before its worker starts (e.g. build the artifact it
    runs, with progress shown); return the options the worker gets. Stops at first non-None result."""


@hookspec
def harness_report_write(
    results: dict[str, Any], out_dir: Path
) -> list[Path] | None:
    """Write a report for ``results`` into ``out_dir``; return the files written."""


# -------------------------------------------------------------------------
# model configs
# -------------------------------------------------------------------------


@hookspec
def harness_config_check(config: Any, context: Any) -> list[Any] | None:
    """An engine's own rules for a model config; return diagnostics.

    Called for every config, valid or not: answer only when ``context.engine`` is one of
    this plugin's engines (LocalAI's backend names are resolved to it already).

    :param config: the typed :class:`~harness.config.model.ModelConfig`, values the schema
        refuses left out (``name`` / ``parameters.model`` are "" when missing, as in a
        gallery template: ``context.template``).
    :param context: a :class:`~harness.config.rules.CheckContext`: the document (locate
        findings with ``context.error(path, ...)`` / ``context.warn``), resolved options,
        the models directory, the engine the backend resolves to.
    :return: diagnostics, or None when the config is not this plugin's engine's.
    """


# -------------------------------------------------------------------------
# video
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def harness_video_limits(engine: str) -> Mapping[str, int | float] | None:
    """Engine-specific overrides of :class:`harness.video.limits.VideoLimits` (field -> value).

    Stops at first non-None result.

    :param engine: the engine a video request is planned for.
    """


@hookspec(firstresult=True)
def harness_video_generate(
    engine: str,
    request: VideoJob,
    workdir: Path,
    progress: Callable[[int, int], None],
    cancel: threading.Event,
) -> EngineOutput | None:
    """Render a validated video request into ``workdir``. Stops at first non-None result.

    Called only after the request, partition, canvas and frame count were checked
    and ffmpeg was found; keyframes are already binary PPMs at the exact canvas.
    The plugin writes frames (PPM/PNG files or one raw RGB24 file) and optionally a
    WAV under ``workdir`` and spawns no ffmpeg itself: it may propose a mux argv,
    whose argv[0] the harness replaces with the resolved ffmpeg.

    :param engine: the engine being asked; plugins answer only for their own.
    :param request: the resolved job (prompt, canvas, frames, fps, steps, seed, crf,
        keyframe PPMs, reference paths, device, the model config).
    :param workdir: a fresh directory for this request; removed after a verified
        mux, kept after a failure.
    :param progress: call as ``progress(step, total)`` after each denoising step; it
        raises when the request was cancelled, which stops the render.
    :param cancel: set when the caller cancels; check it between steps and return.
    :return: an :class:`EngineOutput`, or None when ``engine`` is not this plugin's.
    """
