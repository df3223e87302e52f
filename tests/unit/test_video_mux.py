"""Mux synthetic frames and a synthetic WAV into MP4 with real ffmpeg, and verify it."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import struct
import subprocess
import threading
import time
import wave
import zlib
from pathlib import Path

import pytest

from harness.core.errors import VideoError
from harness.video.ffmpeg import Ffmpeg, resolve_ffmpeg
from harness.video.job import EngineOutput, VideoJob
from harness.video.mux import (
    MediaInfo,
    VideoCancelledError,
    collect_frames,
    mux,
    parse_ffmpeg_info,
    probe,
    run_ffmpeg,
    verify,
)

W, H, FRAMES, FPS = 64, 32, 22, 24.0


def available() -> list[str]:
    found = ["PATH"] if shutil.which("ffmpeg") else []
    try:
        import imageio_ffmpeg  # noqa: F401
        found.append("wheel")
    except ImportError:
        pass
    return found


FFMPEG_PARAMS: list[object] = [*available()] or [pytest.param("none", marks=pytest.mark.skip)]


@pytest.fixture(params=FFMPEG_PARAMS)
def ff(request: pytest.FixtureRequest) -> Ffmpeg:
    if request.param == "PATH":
        return resolve_ffmpeg(None, env={})
    return resolve_ffmpeg(None, env={}, search_path="/nonexistent")


def job(**over: object) -> VideoJob:
    base: dict[str, object] = dict(prompt="p", family="minimax-h3", audio_track=True, partition="fl2va",
                                   width=W, height=H, num_frames=FRAMES, fps=FPS, steps=1, seed=1, crf=23)
    base.update(over)
    return VideoJob(**base)  # type: ignore[arg-type]


#: A job of a family without audio (Wan): the engine returns no WAV.
SILENT = {"family": "wan", "audio_track": False}


def write_ppm_frames(d: Path, n: int = FRAMES, w: int = W, h: int = H) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        pixel = bytes((i * 11 % 256, 255 - i * 11 % 256, 128))
        (d / f"frame_{i:05d}.ppm").write_bytes(f"P6\n{w} {h}\n255\n".encode() + pixel * (w * h))
    return d


def write_png_frames(d: Path, n: int = FRAMES) -> Path:
    d.mkdir(parents=True, exist_ok=True)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    for i in range(n):
        row = b"\x00" + bytes((i * 9 % 256, 60, 200)) * W
        data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(row * H)) + chunk(b"IEND", b""))
        (d / f"{i:04d}.png").write_bytes(data)
    return d


def write_wav(path: Path, seconds: float, rate: int = 48000, channels: int = 2) -> Path:
    """A 440 Hz sine, written with the stdlib wave module."""
    n = int(seconds * rate)
    frames = b"".join(
        struct.pack("<h", int(12000 * math.sin(2 * math.pi * 440 * i / rate))) * channels
        for i in range(n))
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames)
    return path


def ffprobe_json(ff: Ffmpeg, path: Path) -> dict[str, object] | None:
    """An independent look at the file when an ffprobe exists."""
    ffprobe = ff.ffprobe or shutil.which("ffprobe")
    if not ffprobe:
        return None
    out = subprocess.run([ffprobe, "-v", "error", "-count_frames", "-show_streams",
                          "-show_format", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.parametrize("audio_seconds", [1.5, 0.8])
def test_ppm_frames_and_wav_make_a_verified_mp4(ff: Ffmpeg, tmp_path: Path,
                                                audio_seconds: float) -> None:
    frames = write_ppm_frames(tmp_path / "frames")
    wav = write_wav(tmp_path / "audio.wav", audio_seconds)
    result = mux(ff, EngineOutput(frames=frames, audio=wav), job(), tmp_path)
    assert result.path.is_file() and result.encoder == ff.video_encoder
    info = result.info
    assert info.audio_codecs == ("aac",)
    assert info.video_codecs == ("h264" if ff.video_encoder == "libx264" else "mpeg4",)
    assert (info.width, info.height, info.frames) == (W, H, FRAMES)
    assert abs(info.duration - FRAMES / FPS) <= 1 / FPS
    # The same answers without ffprobe: parse ffmpeg -i and decode-count.
    plain = probe(ff, result.path, use_ffprobe=False)
    assert (plain.video_codecs, plain.audio_codecs, plain.width, plain.height, plain.frames) == (
        info.video_codecs, ("aac",), W, H, FRAMES)
    assert abs(plain.duration - FRAMES / FPS) <= 1 / FPS
    if audio_seconds < FRAMES / FPS:
        assert any("shorter" in n for n in result.notes)
    independent = ffprobe_json(ff, result.path)
    if independent is not None:
        streams = independent["streams"]
        assert isinstance(streams, list)
        audio = [s for s in streams if s["codec_type"] == "audio"]
        video = [s for s in streams if s["codec_type"] == "video"]
        assert len(audio) == 1 and audio[0]["codec_name"] == "aac"
        assert int(audio[0]["sample_rate"]) == 48000 and audio[0]["channels"] == 2
        assert int(video[0]["nb_read_frames"]) == FRAMES


def test_png_frames_without_audio(ff: Ffmpeg, tmp_path: Path) -> None:
    result = mux(ff, EngineOutput(frames=write_png_frames(tmp_path / "f")), job(**SILENT), tmp_path)
    assert result.info.audio_codecs == ()
    assert result.info.frames == FRAMES


def test_raw_rgb_frames(ff: Ffmpeg, tmp_path: Path) -> None:
    raw = tmp_path / "frames.rgb"
    raw.write_bytes(bytes(i % 256 for i in range(W * H * 3)) * FRAMES)
    wav = write_wav(tmp_path / "a.wav", 1.0, rate=44100, channels=1)
    result = mux(ff, EngineOutput(frames=raw, audio=wav), job(), tmp_path)
    assert (result.info.frames, result.info.audio_codecs) == (FRAMES, ("aac",))


def test_engine_argv_gets_the_resolved_ffmpeg(ff: Ffmpeg, tmp_path: Path) -> None:
    frames = write_ppm_frames(tmp_path / "frames")
    wav = write_wav(tmp_path / "a.wav", 1.0)
    argv = ("/engine/does/not/have/ffmpeg", "-v", "error", "-framerate", "24",
            "-i", "frames/frame_%05d.ppm", "-i", "a.wav", "-c:v", ff.video_encoder,
            "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", "engine.mp4")
    result = mux(ff, EngineOutput(frames=frames, audio=wav, argv=argv), job(), tmp_path)
    assert result.argv[0] == ff.path and result.argv[1:] == argv[1:]
    assert result.path == tmp_path / "engine.mp4"
    assert result.info.audio_codecs == ("aac",) and result.info.frames == FRAMES


def test_engine_argv_with_a_missing_encoder_is_replaced(ff: Ffmpeg, tmp_path: Path) -> None:
    frames = write_ppm_frames(tmp_path / "frames")
    argv = ("ffmpeg", "-i", "x", "-c:v", "h264_imaginary", "out.mp4")
    result = mux(ff, EngineOutput(frames=frames, argv=argv), job(**SILENT), tmp_path)
    assert any("h264_imaginary" in n and "own argv" in n for n in result.notes)
    assert result.path == tmp_path / "video.mp4"


def test_mpeg4_fallback_is_announced(ff: Ffmpeg, tmp_path: Path) -> None:
    no_x264 = dataclasses.replace(ff, encoders=ff.encoders - {"libx264"})
    frames = write_ppm_frames(tmp_path / "frames")
    result = mux(no_x264, EngineOutput(frames=frames, audio=write_wav(tmp_path / "a.wav", 1)),
                 job(), tmp_path)
    assert result.encoder == "mpeg4" and result.info.video_codecs == ("mpeg4",)
    assert any("no libx264" in n for n in result.notes)


def test_frame_count_mismatch_is_refused(tmp_path: Path, ff: Ffmpeg) -> None:
    frames = write_ppm_frames(tmp_path / "frames", n=FRAMES - 1)
    with pytest.raises(VideoError, match=f"returned {FRAMES - 1} frames, the plan is {FRAMES}"):
        mux(ff, EngineOutput(frames=frames), job(**SILENT), tmp_path)


@pytest.mark.parametrize(("setup", "match"), [
    (lambda d: write_ppm_frames(d, w=W + 32), "frame frame_00000.ppm: expected a complete 8-bit 64x32"),
    (lambda d: d.mkdir(), "no .ppm or .png frames"),
    (lambda d: (write_ppm_frames(d, n=2), write_png_frames(d, n=1)), "mixed frame files"),
])
def test_bad_frames(tmp_path: Path, setup: object, match: str) -> None:
    d = tmp_path / "frames"
    setup(d)  # type: ignore[operator]
    with pytest.raises(VideoError, match=match):
        collect_frames(d, W, H)


def test_raw_size_not_whole_frames(tmp_path: Path) -> None:
    raw = tmp_path / "f.rgb"
    raw.write_bytes(bytes(W * H * 3 + 1))
    with pytest.raises(VideoError, match="not a whole number"):
        collect_frames(raw, W, H)


def test_bad_wav(ff: Ffmpeg, tmp_path: Path) -> None:
    bad = tmp_path / "a.wav"
    bad.write_bytes(b"RIFF....WAVEjunk")
    with pytest.raises(VideoError, match="not a readable PCM WAV"):
        mux(ff, EngineOutput(frames=write_ppm_frames(tmp_path / "f"), audio=bad), job(), tmp_path)


def good_info(**over: object) -> MediaInfo:
    base: dict[str, object] = dict(video_codecs=("h264",), audio_codecs=("aac",), width=W,
                                   height=H, frames=FRAMES, duration=FRAMES / FPS, probe="test")
    base.update(over)
    return MediaInfo(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("over", "match"), [
    ({}, None),
    ({"duration": FRAMES / FPS + 0.9 / FPS}, None),
    ({"audio_codecs": ()}, "audio streams: expected \\['aac'\\], found \\[\\]"),
    ({"audio_codecs": ("mp3",)}, "audio streams"),
    ({"video_codecs": ("h264", "h264")}, "video streams"),
    ({"video_codecs": ("hevc",)}, "video streams"),
    ({"width": 32}, "resolution: expected 64x32"),
    ({"frames": FRAMES - 1}, "frames: expected 22, found 21"),
    ({"duration": FRAMES / FPS + 1.5 / FPS}, "duration"),
    ({"duration": float("nan")}, "duration"),
])
def test_verify(over: dict[str, object], match: str | None) -> None:
    kwargs = dict(video_codec="h264", audio=True, width=W, height=H, frames=FRAMES, fps=FPS)
    if match is None:
        verify(good_info(**over), **kwargs)  # type: ignore[arg-type]
    else:
        with pytest.raises(VideoError, match=match):
            verify(good_info(**over), **kwargs)  # type: ignore[arg-type]


def test_parse_ffmpeg_banner() -> None:
    text = """Input #0, mov,mp4,m4a,3gp,3g2,mj2, from 'x.mp4':
  Duration: 00:01:05.17, start: 0.000000, bitrate: 150 kb/s
  Stream #0:0[0x1](und): Video: h264 (High) (avc1 / 0x31637661), yuv420p(tv, bt709, progressive), 1344x768 [SAR 1:1 DAR 7:4], 11 kb/s, 24 fps, 24 tbr, 12288 tbn (default)
  Stream #0:1[0x2](und): Audio: aac (LC) (mp4a / 0x6134706D), 48000 Hz, stereo, fltp, 130 kb/s (default)
"""
    streams, duration = parse_ffmpeg_info(text)
    assert duration == pytest.approx(65.17)
    assert streams == [
        {"codec_type": "video", "codec_name": "h264", "width": 1344, "height": 768},
        {"codec_type": "audio", "codec_name": "aac"},
    ]


def test_cancel_stops_a_running_ffmpeg(ff: Ffmpeg) -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(VideoCancelledError):
        run_ffmpeg([ff.path, "-v", "error", "-re", "-f", "lavfi", "-i", "testsrc=size=64x32",
                    "-f", "null", "-"], cancel)
    assert time.monotonic() - started < 10


# -- the audio track exactly when the family has audio ----------------------------------------


def test_an_audio_family_without_a_wav_is_refused(ff: Ffmpeg, tmp_path: Path) -> None:
    frames = write_ppm_frames(tmp_path / "frames")
    with pytest.raises(VideoError, match="minimax-h3 family renders an audio track, but the engine returned none"):
        mux(ff, EngineOutput(frames=frames), job(), tmp_path)
    assert not (tmp_path / "video.mp4").exists()


def test_a_silent_family_with_a_wav_is_refused(ff: Ffmpeg, tmp_path: Path) -> None:
    frames = write_ppm_frames(tmp_path / "frames")
    wav = write_wav(tmp_path / "a.wav", 1.0)
    with pytest.raises(VideoError, match="wan family renders no audio, but the engine returned a WAV"):
        mux(ff, EngineOutput(frames=frames, audio=wav), job(**SILENT), tmp_path)
    assert not (tmp_path / "video.mp4").exists()


def test_an_engine_argv_that_drops_the_audio_fails_the_probe(ff: Ffmpeg, tmp_path: Path) -> None:
    frames = write_ppm_frames(tmp_path / "frames")
    wav = write_wav(tmp_path / "a.wav", 1.0)
    argv = ("ffmpeg", "-v", "error", "-framerate", f"{FPS:g}", "-i", "frames/frame_%05d.ppm",
            "-c:v", ff.video_encoder, "-pix_fmt", "yuv420p", "silent.mp4")
    with pytest.raises(VideoError, match=r"audio streams: expected \['aac'\], found \[\]"):
        mux(ff, EngineOutput(frames=frames, audio=wav, argv=argv), job(), tmp_path)
