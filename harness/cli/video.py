"""``harness video generate`` and ``harness video check``."""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli import add_json_flag, print_json
from harness.core.errors import UsageError

if TYPE_CHECKING:
    from harness.config.effective import ConfigFile
    from harness.families.limits import VideoLimits
    from harness.video.pipeline import VideoResult
    from harness.video.target import VideoTarget



def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    video = sub.add_parser("video", help="generate or check video requests (video and audio DiT checkpoint sets)")
    vsub = video.add_subparsers(dest="video_command", metavar="ACTION")

    p = vsub.add_parser("generate", help="render a request into a verified MP4 (H.264 + AAC)",
                        description="Validate, render through the engine plugin, mux with "
                        "ffmpeg and verify the MP4. ffmpeg is found before rendering starts.")
    p.add_argument("config", type=Path, metavar="CONFIG.yaml", help="model config")
    p.add_argument("--prompt", help="text prompt (required unless --request gives one)")
    p.add_argument("--start-image", help="first keyframe: PNG/JPEG path or data: URL")
    p.add_argument("--end-image", help="last keyframe: PNG/JPEG path or data: URL")
    p.add_argument("--width", type=int, help="canvas width (fitted to the family's pixel grid)")
    p.add_argument("--height", type=int, help="canvas height (fitted to the family's pixel grid)")
    p.add_argument("--frames", type=int, dest="num_frames",
                   help="frame count (rounded up to the family's frame grid: 17n+5, 4n+1)")
    p.add_argument("--steps", type=int, help="denoising steps")
    p.add_argument("--seed", type=int, help="seed (default: random, reported)")
    p.add_argument("--crf", type=int, help="H.264 CRF 0..51")
    p.add_argument("--request", type=Path, metavar="REQUEST.json",
                   help="request keys from a JSON file; flags override them")
    _add_media_dir(p, "the request file's directory, else the current directory")
    _add_models_dir(p)
    p.add_argument("-o", "--output", type=Path, help="output MP4 (default: <config>-<time>.mp4)")
    add_json_flag(p)
    p.set_defaults(func=cmd_generate)

    p = vsub.add_parser("check", help="validate a request against a model config (no rendering)")
    p.add_argument("config", type=Path, metavar="CONFIG.yaml", help="model config")
    p.add_argument("request", type=Path, metavar="REQUEST.json",
                   help="request JSON; relative paths in it resolve against its directory "
                        "(or --media-dir)")
    _add_media_dir(p, "the request file's directory")
    _add_models_dir(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_check)

    def usage(args: argparse.Namespace) -> int:
        video.print_help()
        return 2

    video.set_defaults(func=usage)


def _add_media_dir(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--media-dir", type=Path, metavar="DIR",
                   help="the only directory request paths (keyframes, references, audio) may "
                        f"name: relative paths resolve against it, symlinks are followed and "
                        f"anything outside is refused (default: {default})")


def _add_models_dir(p: argparse.ArgumentParser) -> None:
    from harness.config import MODELS_DIR_ENV
    p.add_argument("--models-dir", type=Path, metavar="DIR",
                   help="the only directory the config's checkpoint paths (parameters.model, "
                        "video_vae, video_encoder, audio_vae, ...) may name: relative paths resolve "
                        f"against it, symlinks are followed and anything outside is refused "
                        f"(default: ${MODELS_DIR_ENV}, else the config file's directory)")


def _media_dir(args: argparse.Namespace) -> Path:
    """Where request paths resolve and must stay: --media-dir, else the request's directory."""
    media: Path | None = args.media_dir
    if media is not None:
        if not os.path.isdir(media):  # a name too long for the file system is not one, not an OSError
            msg = f"--media-dir {media}: not a directory"
            raise UsageError(msg)
        return media.resolve()
    request: Path | None = args.request
    return request.resolve().parent if request is not None else Path.cwd()


def _load(args: argparse.Namespace) -> tuple[ConfigFile, VideoTarget | None]:
    """The config through ``harness validate``'s path; its diagnostics printed (text mode)."""
    from harness.core import progress
    from harness.video.target import load_target
    loaded, target = load_target(args.config, models_dir=args.models_dir)
    if not args.json:
        for d in loaded.diagnostics:
            print(d)
    if target is None:
        if args.json:
            print_json({"ok": False, "diagnostics": [d.to_json() for d in loaded.diagnostics]})
        else:
            progress.info(f"{args.config}: {len(loaded.refusals)} refusal(s) of the model config; nothing is "
                          "planned or rendered from it (harness validate reports each in the same words)")
    return loaded, target


def _print_warnings(warnings: tuple[str, ...] | list[str]) -> None:
    from harness.core import progress
    for w in warnings:
        progress.console.print(f"[yellow]warning:[/] {w}", highlight=False)


def cmd_check(args: argparse.Namespace) -> int:
    from harness.core import progress
    from harness.video.pipeline import VideoPipeline, plan_request
    from harness.video.request import load_request
    loaded, target = _load(args)
    if target is None:
        return 1
    data = load_request(args.request, target.limits)
    # The request is judged before ffmpeg is probed: a refusal costs no subprocess.
    plan = plan_request(data, target, base_dir=_media_dir(args))
    pipe = VideoPipeline(target)
    if args.json:
        print_json({"ok": True, "engine": pipe.engine, "ffmpeg": pipe.ffmpeg.path,
                    "ffmpeg_source": pipe.ffmpeg.source, "video_encoder": pipe.ffmpeg.video_encoder,
                    "plan": plan.to_dict(),
                    "diagnostics": [d.to_json() for d in loaded.diagnostics]})
        return 0
    _print_warnings(plan.warnings)
    seed = plan.seed if plan.seed is not None else "random"
    progress.console.print(
        f"ok: {plan.family} {plan.partition} {plan.canvas} ({plan.canvas.source}), "
        f"{plan.num_frames} frames at {plan.fps:g} fps ({plan.duration:.2f}s), {plan.steps} steps, "
        f"{'with' if plan.audio_track else 'no'} audio, crf {plan.crf}, seed {seed}; "
        f"ffmpeg {pipe.ffmpeg.path} ({pipe.ffmpeg.source}, {pipe.ffmpeg.video_encoder})",
        highlight=False)
    return 0


def _request_from_args(args: argparse.Namespace, limits: VideoLimits) -> dict[str, Any]:
    from harness.video.request import load_request
    data: dict[str, Any] = {}
    if args.request is not None:
        data.update(load_request(args.request, limits))
    for key in ("prompt", "start_image", "end_image", "width", "height", "num_frames",
                "steps", "seed", "crf"):
        value = getattr(args, key)
        if value is not None:
            data[key] = value
    if "prompt" not in data:
        msg = "video generate needs --prompt (or a request file with a prompt)"
        raise UsageError(msg)
    return data


@contextmanager
def _step_display() -> Iterator[tuple[Callable[[int, int], None], Callable[[str], None]]]:
    """(progress, status) callbacks: a rich bar on a terminal, plain lines otherwise."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from harness.core import progress
    if not progress.enabled():
        last = [0.0]

        def step_line(step: int, total: int) -> None:
            # Steps can take minutes each; one line per step, but never a flood.
            now = time.monotonic()
            if step == total or now - last[0] >= 5:
                last[0] = now
                progress.info(f"step {step}/{total}")

        yield step_line, progress.info
        return
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn())
    with Progress(*cols, console=progress.console, transient=True) as bar:
        task = bar.add_task("preparing", total=None)
        yield (lambda step, total: bar.update(task, completed=step, total=total),
               lambda text: bar.update(task, description=text))


def cmd_generate(args: argparse.Namespace) -> int:
    from harness.core import crash, progress
    from harness.video.mux import VideoCancelledError
    from harness.video.pipeline import VideoPipeline, plan_request

    code = crash.supervise(getattr(args, "argv", None), "harness video generate")
    if code is not None:
        return code
    _, target = _load(args)
    if target is None:
        return 1
    data = _request_from_args(args, target.limits)
    base_dir = _media_dir(args)
    plan_request(data, target, base_dir=base_dir)  # refused before ffmpeg
    pipe = VideoPipeline(target)  # ffmpeg: before anything renders
    out = args.output or Path(f"{args.config.stem}-{time.strftime('%Y%m%d-%H%M%S')}.mp4")
    cancel = threading.Event()
    box: dict[str, Any] = {}
    with _step_display() as (on_step, on_status):
        def work() -> None:
            try:
                box["result"] = pipe.generate(data, out, base_dir=base_dir, progress=on_step,
                                              status=on_status, cancel=cancel)
            except BaseException as e:  # re-raised on the main thread
                box["error"] = e

        # The render runs in a worker so Ctrl-C becomes a clean cancel (workdir removed)
        # instead of an exception landing somewhere inside the engine call.
        worker = threading.Thread(target=work, name="video-render", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.2)
        except KeyboardInterrupt:
            cancel.set()
            progress.info("cancelling: waiting for the engine to stop ...")
            worker.join()
    if "error" in box:
        if cancel.is_set() and isinstance(box["error"], VideoCancelledError):
            progress.info("cancelled; the work directory was removed")
            return 130
        raise box["error"]
    result: VideoResult = box["result"]
    if args.json:
        print_json(result.to_dict())
        return 0
    _print_warnings(result.warnings)
    info = result.info
    progress.console.print(
        f"wrote {result.path}: {info.width}x{info.height}, {info.frames} frames, "
        f"{info.duration:.2f}s, {'+'.join(info.video_codecs + info.audio_codecs)} "
        f"(encoder {result.encoder}, seed {result.seed}, {result.seconds:.1f}s)", highlight=False)
    return 0
