"""Fake video engines for the video tests, registered like a plugin registers a real one.

Each renders like the engine of its family would: frames on the family's grids (a job off them
is refused, as the real engine would render another count than planned), and a WAV exactly
when the family has audio.
"""

from __future__ import annotations

import math
import struct
import threading
import wave
from collections.abc import Callable
from pathlib import Path

import pluggy
import pytest

import harness.engine.plugin
from harness.core.errors import VideoError
from harness.engine import hookspec
from harness.engine.registry import EngineImpl
from harness.families.table import get_family
from harness.video.job import EngineOutput, VideoJob

hookimpl = pluggy.HookimplMarker("harness")


class FamilyEngine:
    """An engine that renders one video family (``video_family``), raw RGB frames plus a WAV for audio."""

    def __init__(self, name: str, family: str, *, audio: bool | None = None) -> None:
        self.name, self.family = name, family
        self.audio = audio
        """Return a WAV: None follows the job's family (what a correct engine does)."""
        self.jobs: list[VideoJob] = []

    @hookimpl
    def harness_engine_register(self) -> list[EngineImpl]:
        return [EngineImpl(name=self.name, serves=("video",), video_family=self.family,
                           video_generate=self.generate)]

    def generate(self, request: VideoJob, workdir: Path, progress: Callable[[int, int], None],
                 cancel: threading.Event) -> EngineOutput:
        self.jobs.append(request)
        family = get_family(self.family)
        if family.align_frames(request.num_frames) != request.num_frames:
            msg = f"{self.name}: {request.num_frames} frames is off the {family.frame_grid_name} grid"
            raise VideoError(msg)
        for step in range(1, request.steps + 1):
            progress(step, request.steps)
        raw = workdir / "frames.rgb"
        raw.write_bytes(bytes(request.width * request.height * 3) * request.num_frames)
        audio = self.audio if self.audio is not None else request.audio_track
        return EngineOutput(frames=raw, audio=write_wav(workdir / "a.wav", request) if audio else None)


def write_wav(path: Path, job: VideoJob) -> Path:
    """A sine WAV as long as the job's clip."""
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(8000)
        n = int(8000 * job.num_frames / job.fps) + 400
        f.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i / 7))) for i in range(n)))
    return path


def manager(*plugins: object) -> pluggy.PluginManager:
    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    for p in plugins:
        pm.register(p)
    return pm


def install(monkeypatch: pytest.MonkeyPatch, *plugins: object) -> pluggy.PluginManager:
    """Make ``plugins`` the process-wide plugin manager's (validation, the registry, the render)."""
    pm = manager(*plugins)
    monkeypatch.setattr(harness.engine.plugin, "get_manager", lambda: pm)
    return pm
