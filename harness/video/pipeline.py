"""One video request end to end: validate, convert keyframes, render (the engine's), mux, verify.

Everything that can be refused is refused before the engine is called: the
render is hours long, so ffmpeg is resolved when the pipeline is created and
the request, partition and geometry are checked before rendering starts.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy

from harness.core.errors import HarnessError, VideoError
from harness.families.limits import check_plan
from harness.video.ffmpeg import Ffmpeg, get_ffmpeg
from harness.video.geometry import resolve_canvas, resolve_frames
from harness.video.job import EngineOutput, VideoJob, VideoPlan
from harness.video.keyframes import convert_keyframe, probe_keyframe, read_keyframe
from harness.video.mux import MediaInfo, VideoCancelledError, mux
from harness.video.options import configured_canvas
from harness.video.partition import check_partition
from harness.video.request import parse_request, resolve_paths
from harness.video.target import VideoTarget, engine_limits, resolve_checkpoints

__all__ = ["VideoPipeline", "VideoResult", "engine_limits", "plan_request"]

ProgressCallback = Callable[[int, int], None]
StatusCallback = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class VideoResult:
    path: Path
    plan: VideoPlan
    seed: int
    info: MediaInfo
    encoder: str
    ffmpeg: str
    seconds: float
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "seed": self.seed, "encoder": self.encoder,
            "ffmpeg": self.ffmpeg, "seconds": round(self.seconds, 3),
            "video_codecs": list(self.info.video_codecs),
            "audio_codecs": list(self.info.audio_codecs),
            "width": self.info.width, "height": self.info.height,
            "frames": self.info.frames, "duration_s": self.info.duration,
            "verified_by": self.info.probe, "plan": self.plan.to_dict(),
            "warnings": list(self.warnings),
        }


def _renderer(engine: str, pm: pluggy.PluginManager) -> Any:
    """The registered engine's ``video_generate``; None when it has none (or is not registered)."""
    from harness.engine import registry

    impl = registry.engines(pm).get(engine)
    return impl.video_generate if impl is not None else None


def _default_manager() -> pluggy.PluginManager:
    from harness.engine.plugin import get_manager

    return get_manager()


def _keep_note(exc: BaseException, workdir: Path) -> None:
    # Mutating args keeps the error's class (and so its exit code) and shows the
    # path wherever str(exc) is printed.
    note = f"\nworkdir kept for inspection: {workdir}"
    if exc.args and isinstance(exc.args[0], str):
        exc.args = (exc.args[0] + note, *exc.args[1:])
    else:
        exc.args = (*exc.args, note)


def plan_request(data: Mapping[str, Any], target: VideoTarget, *,
                 base_dir: Path | None = None) -> VideoPlan:
    """Validate a request against a resolved config and make its plan.

    Everything comes from ``target``: the family's grids and defaults, the options, the
    engine's limits, the checkpoints (resolved inside the models directory). Needs no ffmpeg
    and no engine, so ``video check`` refuses a bad request before probing anything, and
    ``generate`` renders exactly this plan. Keyframe sizes come from bounded header reads.

    :param base_dir: the media directory (default: cwd); see :meth:`VideoPipeline.check`.
    :raises VideoError: naming the request key (or config option) that is wrong.
    :raises ConfigError: a checkpoint path outside the models directory or missing.
    """
    base = base_dir or Path.cwd()
    family, options, limits = target.family, target.options, target.limits
    request, warnings = parse_request(data, native_fps=options.video_fps, limits=limits)
    partition, more = check_partition(options.video_partition, request, family)
    warnings += more
    inputs = resolve_paths(request, base, limits)
    keyframe_size = None
    if request.keyframe is not None:
        # Size from the header only: the canvas is resolved before any scaling.
        keyframe_size = probe_keyframe(request.keyframe, "start_image" if request.start_image
                                       else "end_image", base, limits)
    # Probe the other keyframe too so a bad end_image fails now, not after the render.
    if request.start_image and request.end_image:
        probe_keyframe(request.end_image, "end_image", base, limits)
    default_width, default_height = configured_canvas(options)
    canvas, more = resolve_canvas(width=request.width, height=request.height,
                                  keyframe_size=keyframe_size, family=family,
                                  default_width=default_width, default_height=default_height)
    warnings += more
    frames, more = resolve_frames(request.num_frames, options.video_num_frames, family)
    warnings += more
    steps = request.steps or options.video_steps
    check_plan(width=canvas.width, height=canvas.height, canvas_source=canvas.source,
               frames=frames, steps=steps, fps=options.video_fps, limits=limits,
               frames_source=("from the request" if request.num_frames is not None
                              else "video_num_frames in the model config"),
               steps_source=("from the request" if request.steps is not None
                             else "video_steps in the model config"))
    return VideoPlan(
        request=request, family=family.name, audio_track=family.audio, partition=partition,
        canvas=canvas, num_frames=frames, fps=options.video_fps, steps=steps,
        crf=request.crf if request.crf is not None else options.video_crf,
        seed=request.seed, inputs=inputs, checkpoints=resolve_checkpoints(target),
        warnings=tuple(warnings))


class VideoPipeline:
    """A loaded video engine: resolves ffmpeg now, then serves requests.

    :param target: the resolved config (:func:`harness.video.target.resolve_target`): engine,
        family, options, limits, checkpoints.
    :param pm: the plugin manager whose engine renders (default: the process-wide one).
    :param ffmpeg: an already-resolved ffmpeg (default: resolve from options/env/PATH/wheel).
    :raises HostError: no usable ffmpeg: at load time, never after a render.
    """

    def __init__(self, target: VideoTarget, *, pm: pluggy.PluginManager | None = None,
                 ffmpeg: Ffmpeg | None = None) -> None:
        self.target = target
        self.engine = target.engine
        self.options = target.options
        self.limits = target.limits
        self._pm = pm
        self.ffmpeg = ffmpeg or get_ffmpeg(target.options.ffmpeg)

    # -- validation ---------------------------------------------------------

    def check(self, data: Mapping[str, Any], *, base_dir: Path | None = None) -> VideoPlan:
        """Validate a request and resolve its geometry; nothing is rendered or written.

        :param base_dir: the media directory: relative request paths resolve against it
            and every request path must resolve inside it (default: cwd).
        """
        return plan_request(data, self.target, base_dir=base_dir)

    # -- generation -----------------------------------------------------------

    @contextlib.contextmanager
    def _workdir(self) -> Iterator[Path]:
        # Always a fresh directory, also under video_workdir: leftover frames from an
        # earlier run would otherwise be muxed into this one without a word.
        parent = Path(self.options.video_workdir).expanduser() if self.options.video_workdir else None
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="harness-video-", dir=parent))
        try:
            yield path
        except (VideoCancelledError, KeyboardInterrupt):
            shutil.rmtree(path, ignore_errors=True)  # the user asked to stop: nothing to inspect
            raise
        except BaseException as e:
            _keep_note(e, path)
            raise
        shutil.rmtree(path, ignore_errors=True)

    def generate(
        self,
        data: Mapping[str, Any],
        out: Path,
        *,
        base_dir: Path | None = None,
        progress: ProgressCallback | None = None,
        status: StatusCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> VideoResult:
        """Render ``data`` into ``out`` (an MP4), verified.

        :param progress: called as ``progress(step, total)`` while the engine renders.
        :param status: called with the name of each stage.
        :param cancel: set it (from any thread) to stop; the workdir is removed and
            :class:`VideoCancelledError` raised.
        :raises VideoError: invalid request, engine or mux failure (workdir kept and named).
        """
        started = time.monotonic()
        cancel = cancel or threading.Event()
        say = status or (lambda text: None)
        plan = self.check(data, base_dir=base_dir)
        render = _renderer(self.engine, self._pm or _default_manager())
        seed = (plan.seed if plan.seed is not None
                else secrets.randbelow(min(2**31, self.limits.max_seed + 1)))
        base = base_dir or Path.cwd()

        def check_cancel(where: str) -> None:
            if cancel.is_set():
                msg = f"cancelled {where}"
                raise VideoCancelledError(msg)

        def on_step(step: int, total: int) -> None:
            # Raising from the callback stops engines that report progress even if
            # they never look at the event themselves.
            check_cancel(f"at step {step}/{total}")
            if progress is not None:
                progress(step, total)

        with self._workdir() as workdir:
            check_cancel("before rendering")
            keyframes: dict[str, Path] = {}
            for key in ("start_image", "end_image"):
                value = getattr(plan.request, key)
                if value is not None:
                    say(f"converting {key} to {plan.canvas} PPM")
                    # Confined and bounded again: the file may have changed since check().
                    raw, _, _ = read_keyframe(value, key, base, self.limits)
                    keyframes[key] = convert_keyframe(self.ffmpeg, raw, plan.canvas,
                                                      workdir / "keyframes" / f"{key}.ppm",
                                                      self.limits)
            job = VideoJob(
                prompt=plan.request.prompt, family=plan.family, audio_track=plan.audio_track,
                partition=plan.partition,
                width=plan.canvas.width, height=plan.canvas.height,
                num_frames=plan.num_frames, fps=plan.fps, steps=plan.steps, seed=seed,
                crf=plan.crf, noise_aug=plan.request.noise_aug,
                start_image=keyframes.get("start_image"), end_image=keyframes.get("end_image"),
                ref_image=plan.inputs.get("ref_image"), ref_video=plan.inputs.get("ref_video"),
                audio=plan.inputs.get("audio"), device=self.options.video_device,
                ffmpeg=self.ffmpeg.path, checkpoints=plan.checkpoints, model=self.target.model)
            check_cancel("before rendering")
            say(f"rendering {plan.num_frames} frames at {plan.canvas}, {plan.steps} steps")
            output = self._render(render, job, workdir, on_step, cancel)
            check_cancel("after rendering")
            say("muxing")
            result = mux(self.ffmpeg, output, job, workdir, cancel)
            out = Path(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(result.path), str(out))
        return VideoResult(
            path=out, plan=plan, seed=seed, info=result.info, encoder=result.encoder,
            ffmpeg=self.ffmpeg.path, seconds=time.monotonic() - started,
            warnings=plan.warnings + result.notes)

    def _render(self, render: Any, job: VideoJob, workdir: Path, on_step: ProgressCallback,
                cancel: threading.Event) -> EngineOutput:
        try:
            output = render(job, workdir, on_step, cancel) if render is not None else None
        except HarnessError:
            raise
        except Exception as e:
            msg = f"the {self.engine} video engine failed: {type(e).__name__}: {e}"
            raise VideoError(msg) from e
        if cancel.is_set():
            msg = "cancelled during rendering"
            raise VideoCancelledError(msg)
        if output is None:
            msg = (f"no plugin rendered video for engine {self.engine!r}: none implements "
                   "video_generate for it (is the engine plugin installed?)")
            raise VideoError(msg)
        if not isinstance(output, EngineOutput):
            msg = f"the {self.engine} video plugin returned {type(output).__name__}, not EngineOutput"
            raise VideoError(msg)
        return output
