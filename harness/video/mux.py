"""Mux the engine's frames and WAV into an MP4 (H.264 + AAC) and verify the result.

Verification is the point: a mux that "succeeds" with a missing audio track, a
dropped frame or the wrong size is only noticed by whoever watches the video.
With ffprobe the checks read its JSON; without it (the imageio-ffmpeg wheel has
none) they parse ``ffmpeg -i`` and decode-count the frames with ``-f null``.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import wave
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import SubprocessError, VideoError
from harness.core.inputs import open_input
from harness.video.ffmpeg import Ffmpeg
from harness.video.job import EngineOutput, VideoJob
from harness.video.keyframes import read_ppm_header

FRAME_SUFFIXES = (".ppm", ".png")


class VideoCancelledError(VideoError):
    """The render or mux was cancelled; its workdir is removed."""


@dataclass(frozen=True, kw_only=True)
class FrameSource:
    kind: str
    """ppm, png or rgb."""
    count: int
    input_args: tuple[str, ...]
    """ffmpeg input options and ``-i``, without the frame rate."""


@dataclass(frozen=True, kw_only=True)
class MediaInfo:
    """What the MP4 holds, by ffprobe or by parsing ffmpeg."""

    video_codecs: tuple[str, ...]
    audio_codecs: tuple[str, ...]
    width: int
    height: int
    frames: int
    duration: float
    probe: str
    """ffprobe or ffmpeg: which tool answered."""


@dataclass(frozen=True, kw_only=True)
class MuxResult:
    path: Path
    info: MediaInfo
    encoder: str
    argv: tuple[str, ...]
    notes: tuple[str, ...] = ()


def _png_size(path: Path) -> tuple[int, int]:
    with open_input(path, kind="media-header", error=VideoError, head=True) as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        msg = f"{path}: not a PNG"
        raise VideoError(msg)
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _glob_escape(path: str) -> str:
    # ffmpeg's glob pattern_type uses glob(3): escape its metacharacters in the directory.
    return re.sub(r"([\\*?\[\]{}])", r"\\\1", path)


def collect_frames(frames: Path, width: int, height: int) -> FrameSource:
    """Check the engine's frames (all one kind, all at the canvas) and say how to read them."""
    if frames.is_file():
        size = frames.stat().st_size
        per = width * height * 3
        if size == 0 or size % per:
            msg = (f"raw RGB frames {frames}: {size} bytes is not a whole number of "
                   f"{width}x{height} RGB24 frames ({per} bytes each)")
            raise VideoError(msg)
        raw = ("-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-i", str(frames))
        return FrameSource(kind="rgb", count=size // per, input_args=raw)
    if not frames.is_dir():
        msg = f"the engine returned frames at {frames}, which does not exist"
        raise VideoError(msg)
    files = sorted(p for p in frames.iterdir() if p.suffix.lower() in FRAME_SUFFIXES)
    if not files:
        msg = f"no .ppm or .png frames in {frames}"
        raise VideoError(msg)
    kinds = {p.suffix for p in files}
    if len(kinds) > 1:
        msg = f"mixed frame files in {frames} ({', '.join(sorted(kinds))}); expected one kind"
        raise VideoError(msg)
    suffix = kinds.pop()
    for p in files:
        if suffix.lower() == ".ppm":
            w, h, maxval, header = read_ppm_header(p)
            complete = p.stat().st_size == header + w * h * 3 and maxval == 255
        else:
            (w, h), complete = _png_size(p), True
        if (w, h) != (width, height) or not complete:
            msg = (f"frame {p.name}: expected a complete 8-bit {width}x{height} image, "
                   f"found {w}x{h}{'' if complete else ' (truncated or not 8-bit)'}")
            raise VideoError(msg)
    pattern = _glob_escape(str(frames)) + "/*" + _glob_escape(suffix)
    args = ("-f", "image2", "-pattern_type", "glob", "-i", pattern)
    return FrameSource(kind=suffix.lower()[1:], count=len(files), input_args=args)


def check_wav(path: Path) -> float:
    """Duration in seconds of a PCM WAV; raises when it is not one."""
    try:
        # the header only: wave skips the chunks before the samples and never reads them
        with open_input(path, kind="media-header", error=VideoError, head=True) as f, wave.open(f, "rb") as w:
            rate, n = w.getframerate(), w.getnframes()
    except (OSError, EOFError, wave.Error) as e:
        msg = f"audio {path}: not a readable PCM WAV ({e})"
        raise VideoError(msg) from e
    if rate <= 0:
        msg = f"audio {path}: sample rate {rate}"
        raise VideoError(msg)
    return n / rate


def _mpeg4_quality(crf: int) -> int:
    # mpeg4 has no CRF; qscale 1 (best) .. 31. This keeps CRF 18-23 at a good q 4.
    return max(1, min(31, 1 + crf // 6))


def build_argv(ff: Ffmpeg, src: FrameSource, audio: Path | None, fps: float, crf: int,
               out: Path) -> tuple[list[str], str]:
    """The mux argv and the video encoder it uses."""
    encoder = ff.video_encoder
    argv = [ff.path, "-hide_banner", "-nostdin", "-loglevel", "error", "-y",
            "-framerate", f"{fps:g}", *src.input_args]
    if audio is not None:
        argv += ["-i", str(audio)]
    argv += ["-map", "0:v:0"] + (["-map", "1:a:0"] if audio is not None else [])
    if encoder == "libx264":
        argv += ["-c:v", "libx264", "-preset", "medium", "-crf", str(crf)]
    else:
        argv += ["-c:v", "mpeg4", "-q:v", str(_mpeg4_quality(crf))]
    argv += ["-pix_fmt", "yuv420p"]
    if audio is not None:
        argv += ["-c:a", ff.aac_encoder or "aac", "-b:a", "192k"]
    # -t trims a longer WAV so the container's duration is the video's.
    argv += ["-t", f"{src.count / fps:.6f}", "-movflags", "+faststart", str(out)]
    return argv, encoder


def _codec_of(encoder: str) -> str:
    return "h264" if "264" in encoder else encoder


def adapt_engine_argv(ff: Ffmpeg, argv: tuple[str, ...]) -> tuple[list[str] | None, str]:
    """Replace argv[0] with our ffmpeg; (None, why) when this ffmpeg cannot run it."""
    if not argv:
        return None, "the engine proposed an empty argv"
    args = list(argv[1:])
    for i, a in enumerate(args[:-1]):
        if a in ("-c:v", "-vcodec", "-codec:v") and args[i + 1] not in ff.encoders:
            return None, f"the engine's argv asks for {args[i + 1]}, which {ff.path} lacks"
        if a in ("-c:a", "-acodec", "-codec:a") and args[i + 1] not in ff.encoders:
            return None, f"the engine's argv asks for {args[i + 1]}, which {ff.path} lacks"
    return [ff.path, *args], ""


def _argv_encoder(ff: Ffmpeg, argv: list[str]) -> str:
    for i, a in enumerate(argv[:-1]):
        if a in ("-c:v", "-vcodec", "-codec:v"):
            return argv[i + 1]
    return ff.video_encoder  # ffmpeg's own default for .mp4


def run_ffmpeg(argv: list[str], cancel: threading.Event | None, cwd: Path | None = None,
               hint: str = "") -> str:
    """Run ffmpeg, polling ``cancel``; returns its combined output."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=cwd)
    output = ""
    while True:
        try:
            output, _ = proc.communicate(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                proc.terminate()
                try:
                    proc.communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
                msg = "cancelled while running ffmpeg"
                raise VideoCancelledError(msg) from None
    if proc.returncode != 0:
        raise SubprocessError(argv, proc.returncode, output or "", hint=hint)
    return output or ""


def _probe_ffprobe(ffprobe: str, path: Path) -> tuple[list[dict[str, object]], float]:
    argv = [ffprobe, "-v", "error", "-show_entries",
            "stream=codec_type,codec_name,width,height,nb_frames:format=duration",
            "-of", "json", str(path)]
    data = json.loads(run_ffmpeg(argv, None))
    return list(data.get("streams", [])), float(data.get("format", {}).get("duration", "nan"))


_DURATION = re.compile(r"Duration: (\d+):(\d\d):(\d\d(?:\.\d+)?)")
_STREAM = re.compile(r"Stream #\d+:\d+\S*: (Video|Audio|Data|Subtitle): (\w+)(.*)")


def parse_ffmpeg_info(text: str) -> tuple[list[dict[str, object]], float]:
    """Streams and duration from the banner ``ffmpeg -i FILE`` prints."""
    m = _DURATION.search(text)
    duration = (int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3])) if m else float("nan")
    streams: list[dict[str, object]] = []
    for kind, codec, rest in _STREAM.findall(text):
        stream: dict[str, object] = {"codec_type": kind.lower(), "codec_name": codec}
        for part in rest.split(", "):
            size = re.match(r"\s*(\d+)x(\d+)(\s|$)", part)
            if kind == "Video" and size:
                stream["width"], stream["height"] = int(size[1]), int(size[2])
                break
        streams.append(stream)
    return streams, duration


def _count_frames(ff: Ffmpeg, path: Path) -> int:
    # Decoding every frame is the honest count (and proves the stream decodes).
    argv = [ff.path, "-hide_banner", "-nostdin", "-v", "error", "-i", str(path),
            "-map", "0:v:0", "-f", "null", "-progress", "pipe:1", "-nostats", "-"]
    counts = re.findall(r"^frame=(\d+)", run_ffmpeg(argv, None), re.MULTILINE)
    if not counts:
        msg = f"could not count the frames of {path}"
        raise VideoError(msg)
    return int(counts[-1])


def probe(ff: Ffmpeg, path: Path, *, use_ffprobe: bool = True) -> MediaInfo:
    """Streams, size, frame count and duration of ``path``."""
    if use_ffprobe and ff.ffprobe:
        streams, duration = _probe_ffprobe(ff.ffprobe, path)
        tool = "ffprobe"
    else:
        # ffmpeg -i with no output exits 1 by design; the banner on stderr is what we want.
        proc = subprocess.run([ff.path, "-hide_banner", "-nostdin", "-i", str(path)],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              check=False)
        streams, duration = parse_ffmpeg_info(proc.stderr)
        tool = "ffmpeg"
        if not streams:
            raise SubprocessError([ff.path, "-i", str(path)], proc.returncode, proc.stderr,
                                  hint="ffmpeg could not read the muxed file")
    video = [s for s in streams if s.get("codec_type") == "video"]
    audio = [s for s in streams if s.get("codec_type") == "audio"]
    first = video[0] if video else {}
    nb = first.get("nb_frames")
    frames = int(str(nb)) if str(nb).isdigit() else (_count_frames(ff, path) if video else 0)
    return MediaInfo(
        video_codecs=tuple(str(s.get("codec_name")) for s in video),
        audio_codecs=tuple(str(s.get("codec_name")) for s in audio),
        width=int(str(first.get("width", 0))), height=int(str(first.get("height", 0))),
        frames=frames, duration=duration, probe=tool)


def verify(info: MediaInfo, *, video_codec: str, audio: bool, width: int, height: int,
           frames: int, fps: float) -> None:
    """Raise listing every way ``info`` differs from what the mux should have written."""
    problems: list[str] = []
    if info.video_codecs != (video_codec,):
        problems.append(f"video streams: expected one {video_codec}, found {list(info.video_codecs)}")
    want_audio = ("aac",) if audio else ()
    if info.audio_codecs != want_audio:
        problems.append(f"audio streams: expected {list(want_audio)}, found {list(info.audio_codecs)}")
    if (info.width, info.height) != (width, height):
        problems.append(f"resolution: expected {width}x{height}, found {info.width}x{info.height}")
    if info.frames != frames:
        problems.append(f"frames: expected {frames}, found {info.frames}")
    expected = frames / fps
    if not abs(info.duration - expected) <= 1 / fps:  # also catches NaN
        problems.append(f"duration: expected {expected:.3f}s (+-1 frame), found {info.duration:.3f}s")
    if problems:
        msg = "the muxed MP4 is not what was rendered (" + info.probe + "):\n  " + "\n  ".join(problems)
        raise VideoError(msg)


def mux(ff: Ffmpeg, output: EngineOutput, job: VideoJob, workdir: Path,
        cancel: threading.Event | None = None) -> MuxResult:
    """Mux and verify into ``workdir``; the caller moves the file to its destination.

    The file is checked against the plan in ``job``: frame count, size, fps and duration read
    back (ffprobe when there is one), and an AAC track exactly when the family has audio.
    """
    size = output.raw_size or (job.width, job.height)
    if size != (job.width, job.height):
        msg = f"the engine rendered {size[0]}x{size[1]}, the plan is {job.width}x{job.height}"
        raise VideoError(msg)
    if (output.audio is not None) != job.audio_track:
        msg = (f"the {job.family} family renders {'an audio track' if job.audio_track else 'no audio'}, "
               f"but the engine returned {'a WAV' if output.audio is not None else 'none'}; "
               "refusing to mux a file the family does not make")
        raise VideoError(msg)
    src = collect_frames(output.frames, job.width, job.height)
    if src.count != job.num_frames:
        msg = (f"the engine returned {src.count} frames, the plan is {job.num_frames}; "
               "refusing to mux a clip of another length")
        raise VideoError(msg)
    notes: list[str] = []
    if output.audio is not None:
        seconds = check_wav(output.audio)
        if seconds + 1 / job.fps < job.num_frames / job.fps:
            notes.append(f"audio is {seconds:.2f}s, shorter than the {job.num_frames / job.fps:.2f}s video")
    argv: list[str] | None = None
    out = workdir / "video.mp4"
    if output.argv is not None:
        argv, why = adapt_engine_argv(ff, output.argv)
        if argv is None:
            notes.append(f"{why}; muxing with the harness's own argv instead")
        else:
            out = output.output or Path(argv[-1])
            out = out if out.is_absolute() else workdir / out
    if argv is None:
        argv, encoder = build_argv(ff, src, output.audio, job.fps, job.crf, out)
    else:
        encoder = _argv_encoder(ff, argv)
    if encoder != "libx264":
        notes.append(f"encoded with {encoder}: this ffmpeg has no libx264")
    with contextlib.suppress(FileNotFoundError):
        out.unlink()  # a fresh workdir has none; an engine argv without -y would stop on it
    run_ffmpeg(argv, cancel, cwd=workdir, hint=f"muxing {src.count} {src.kind} frames failed")
    if not out.is_file():
        msg = f"ffmpeg exited 0 but wrote no {out}"
        raise VideoError(msg)
    info = probe(ff, out)
    verify(info, video_codec=_codec_of(encoder), audio=job.audio_track,
           width=job.width, height=job.height, frames=job.num_frames, fps=job.fps)
    return MuxResult(path=out, info=info, encoder=encoder, argv=tuple(argv), notes=tuple(notes))
