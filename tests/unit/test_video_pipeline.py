"""The request pipeline end to end with a fake engine plugin and real ffmpeg."""

from __future__ import annotations

import math
import re
import struct
import threading
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pluggy
import pytest

from harness.core.errors import SubprocessError, VideoError
from harness.engine import hookspec
from harness.engine.registry import EngineImpl
from harness.video.ffmpeg import Ffmpeg, resolve_ffmpeg
from harness.video.job import EngineOutput, VideoJob
from harness.video.mux import VideoCancelledError
from harness.video.pipeline import VideoPipeline
from harness.video.target import resolve_target

hookimpl = pluggy.HookimplMarker("harness")


@pytest.fixture(scope="module")
def ff() -> Ffmpeg:
    try:
        return resolve_ffmpeg(None)
    except Exception as e:  # no ffmpeg anywhere: nothing here can run
        pytest.skip(f"no ffmpeg: {e}")


class FakeEngine:
    """Renders solid-colour PPM frames and, when the job's family has audio, a sine WAV, like the engine would."""

    def __init__(self, name: str = "fake", *, family: str = "minimax-h3", audio: bool | None = None,
                 on_step: Callable[[int, threading.Event], None] | None = None,
                 frames_delta: int = 0) -> None:
        self.name, self.family, self.audio = name, family, audio
        self.on_step, self.frames_delta = on_step, frames_delta
        self.jobs: list[VideoJob] = []
        self.workdirs: list[Path] = []

    @hookimpl
    def harness_engine_register(self) -> list[EngineImpl]:
        return [EngineImpl(name=self.name, video_family=self.family, video_generate=self.generate)]

    def generate(self, request: VideoJob, workdir: Path, progress: Callable[[int, int], None],
                 cancel: threading.Event) -> EngineOutput | None:
        self.jobs.append(request)
        self.workdirs.append(workdir)
        frames = workdir / "frames"
        frames.mkdir()
        for step in range(1, request.steps + 1):
            if self.on_step:
                self.on_step(step, cancel)
            if cancel.is_set():
                return None
            progress(step, request.steps)
        w, h = request.width, request.height
        for i in range(request.num_frames + self.frames_delta):
            (frames / f"{i:05d}.ppm").write_bytes(
                f"P6\n{w} {h}\n255\n".encode() + bytes((i * 10 % 256, 80, 160)) * (w * h))
        wav = None
        if self.audio if self.audio is not None else request.audio_track:
            wav = workdir / "audio.wav"
            with wave.open(str(wav), "wb") as f:
                f.setnchannels(1)
                f.setsampwidth(2)
                f.setframerate(16000)
                n = int(16000 * request.num_frames / request.fps) + 800
                f.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i / 7)))
                                       for i in range(n)))
        return EngineOutput(frames=frames, audio=wav)


def manager(*plugins: object) -> pluggy.PluginManager:
    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    for p in plugins:
        pm.register(p)
    return pm


def pipeline(ff: Ffmpeg, engine: FakeEngine | None, tmp_path: Path, **options: Any) -> VideoPipeline:
    options.setdefault("video_partition", "fl2va")
    options.setdefault("video_workdir", str(tmp_path / "work"))
    pm = manager(*([engine] if engine else []))
    return VideoPipeline(resolve_target("fake", options, pm=pm), pm=pm, ffmpeg=ff)


def png(path: Path, w: int, h: int) -> Path:
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    row = b"\x00" + b"\x20\xc0\x40" * w
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(row * h)) + chunk(b"IEND", b""))
    return path


REQ = {"prompt": "a red kite", "width": 64, "height": 32, "num_frames": 20, "steps": 3}


def test_generate_renders_muxes_verifies_and_cleans_up(ff: Ffmpeg, tmp_path: Path) -> None:
    engine = FakeEngine()
    steps: list[tuple[int, int]] = []
    stages: list[str] = []
    result = pipeline(ff, engine, tmp_path).generate(
        {**REQ, "fps": 30, "negative_prompt": "x"}, tmp_path / "out" / "v.mp4",
        progress=lambda s, t: steps.append((s, t)), status=stages.append)
    assert result.path == tmp_path / "out" / "v.mp4" and result.path.is_file()
    assert (result.info.frames, result.info.width, result.info.height) == (22, 64, 32)
    assert result.info.audio_codecs == ("aac",)
    assert steps == [(1, 3), (2, 3), (3, 3)]
    assert any("muxing" in s for s in stages)
    job = engine.jobs[0]
    assert (job.num_frames, job.fps, job.crf, job.partition) == (22, 24.0, 18, "fl2va")
    assert result.seed == job.seed  # a random seed is picked and reported
    assert any("17n+5" in w for w in result.warnings)
    assert any("fps=30 is ignored" in w for w in result.warnings)
    assert not engine.workdirs[0].exists()
    assert list((tmp_path / "work").iterdir()) == []


def test_keyframes_reach_the_engine_as_ppm_at_the_derived_canvas(ff: Ffmpeg, tmp_path: Path) -> None:
    engine = FakeEngine()
    # 2:1 keyframe, no canvas in the request: 1536x768 from the aspect, despite option defaults.
    start = png(tmp_path / "start.png", 40, 20)
    seen: dict[str, bytes] = {}

    def grab(step: int, cancel: threading.Event) -> None:
        job = engine.jobs[-1]
        assert job.start_image is not None
        seen["head"] = job.start_image.read_bytes()[:20]

    engine.on_step = grab
    pipe = pipeline(ff, engine, tmp_path, video_width=1344, video_height=768)
    plan = pipe.check({"prompt": "p", "start_image": "start.png", "num_frames": 5, "steps": 1},
                      base_dir=tmp_path)
    assert (plan.canvas.width, plan.canvas.height, plan.canvas.source) == (1536, 768, "keyframe")
    # An absolute path is fine inside the media directory (base_dir).
    pipe.generate({"prompt": "p", "start_image": str(start), "width": 64, "height": 32,
                   "num_frames": 5, "steps": 1, "seed": 3}, tmp_path / "k.mp4", base_dir=tmp_path)
    assert seen["head"].startswith(b"P6\n64 32\n255\n")


def test_partition_refusal_happens_before_the_engine(ff: Ffmpeg, tmp_path: Path) -> None:
    engine = FakeEngine()
    (tmp_path / "r.png").write_bytes(b"x")
    with pytest.raises(VideoError, match="cannot take ref_image"):
        pipeline(ff, engine, tmp_path).generate({**REQ, "ref_image": str(tmp_path / "r.png")},
                                                tmp_path / "o.mp4")
    assert engine.jobs == []
    assert not (tmp_path / "work").exists() or list((tmp_path / "work").iterdir()) == []


def test_unknown_key_happens_before_the_engine(ff: Ffmpeg, tmp_path: Path) -> None:
    engine = FakeEngine()
    with pytest.raises(VideoError, match="did you mean 'noise_aug'"):
        pipeline(ff, engine, tmp_path).generate({**REQ, "noise_agu": 0.1}, tmp_path / "o.mp4")
    assert engine.jobs == []


def test_failure_keeps_the_workdir_and_names_it(ff: Ffmpeg, tmp_path: Path) -> None:
    engine = FakeEngine(frames_delta=-1)  # one frame short: the mux must refuse it
    with pytest.raises(VideoError) as e:
        pipeline(ff, engine, tmp_path).generate(REQ, tmp_path / "o.mp4")
    kept = engine.workdirs[0]
    assert f"workdir kept for inspection: {kept}" in str(e.value)
    assert kept.is_dir() and len(list((kept / "frames").iterdir())) == 21
    assert not (tmp_path / "o.mp4").exists()


def test_ffmpeg_failure_keeps_workdir_with_subprocess_error(ff: Ffmpeg, tmp_path: Path) -> None:
    class BadArgv(FakeEngine):
        def generate(self, request: VideoJob, workdir: Path, progress: Callable[[int, int], None],
                     cancel: threading.Event) -> EngineOutput | None:
            out = super().generate(request, workdir, progress, cancel)
            assert out is not None
            return EngineOutput(frames=out.frames, audio=out.audio,
                                argv=("ffmpeg", "-i", "does-not-exist.ppm", "x.mp4"))

    engine = BadArgv()
    with pytest.raises(SubprocessError) as e:
        pipeline(ff, engine, tmp_path).generate(REQ, tmp_path / "o.mp4")
    text = str(e.value)
    assert re.search(rf"command failed with exit code \d+: {re.escape(ff.path)} -i does-not-exist", text)
    assert "does-not-exist.ppm" in text.split("--- last output ---")[1]  # the output tail
    assert "workdir kept" in text and engine.workdirs[0].is_dir()


def test_engine_exception_is_wrapped(ff: Ffmpeg, tmp_path: Path) -> None:
    def boom(step: int, cancel: threading.Event) -> None:
        raise RuntimeError("CUDA out of memory")

    engine = FakeEngine(on_step=boom)
    with pytest.raises(VideoError, match="fake video engine failed: RuntimeError: CUDA out of memory"):
        pipeline(ff, engine, tmp_path).generate(REQ, tmp_path / "o.mp4")
    assert engine.workdirs[0].is_dir()


def test_no_plugin_for_the_engine(ff: Ffmpeg, tmp_path: Path) -> None:
    with pytest.raises(VideoError, match="no plugin rendered video for engine 'fake'"):
        pipeline(ff, FakeEngine(name="other"), tmp_path).generate(REQ, tmp_path / "o.mp4")


class DeafEngine(FakeEngine):
    """An engine that never looks at the cancel event: the progress callback stops it."""

    def generate(self, request: VideoJob, workdir: Path, progress: Callable[[int, int], None],
                 cancel: threading.Event) -> EngineOutput | None:
        return super().generate(request, workdir, progress, threading.Event())


@pytest.mark.parametrize("engine_polls", [True, False])
def test_cancel_stops_the_render_and_cleans_up(ff: Ffmpeg, tmp_path: Path,
                                               engine_polls: bool) -> None:
    cancel = threading.Event()

    def cancel_at_two(step: int, ev: threading.Event) -> None:
        if step == 2:
            cancel.set()

    engine = (FakeEngine if engine_polls else DeafEngine)(on_step=cancel_at_two)
    steps: list[int] = []
    with pytest.raises(VideoCancelledError):
        pipeline(ff, engine, tmp_path).generate({**REQ, "steps": 5}, tmp_path / "o.mp4",
                                                progress=lambda s, t: steps.append(s),
                                                cancel=cancel)
    assert steps == [1]
    assert not engine.workdirs[0].exists()
    assert not (tmp_path / "o.mp4").exists()


def test_workdir_option_gets_a_fresh_directory_per_request(ff: Ffmpeg, tmp_path: Path) -> None:
    stale = tmp_path / "work" / "frames"
    stale.mkdir(parents=True)
    (stale / "00000.ppm").write_bytes(b"P6\n64 32\n255\n" + bytes(64 * 32 * 3))
    engine = FakeEngine()
    pipe = pipeline(ff, engine, tmp_path)
    pipe.generate(REQ, tmp_path / "a.mp4")
    pipe.generate(REQ, tmp_path / "b.mp4")
    assert engine.workdirs[0] != engine.workdirs[1]
    assert all(w.parent == tmp_path / "work" for w in engine.workdirs)
    assert stale.is_dir()  # never touched, never picked up


def test_missing_ffmpeg_fails_at_load_not_after_render(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.core.errors import HostError
    from harness.video import ffmpeg as ffmod

    monkeypatch.setattr(ffmod, "_cache", {})
    engine = FakeEngine()
    pm = manager(engine)
    with pytest.raises(HostError, match="not an executable"):
        VideoPipeline(resolve_target("fake", {"ffmpeg": str(tmp_path / "nope")}, pm=pm), pm=pm)
    assert engine.jobs == []
