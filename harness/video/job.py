"""The dataclasses the video path passes around: the plan, the engine's job, its output."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.video.geometry import Canvas
from harness.video.request import VideoRequest


@dataclass(frozen=True, kw_only=True)
class VideoPlan:
    """A validated request with its geometry resolved: what ``video check`` reports."""

    request: VideoRequest
    family: str
    """The video family whose grids, defaults and audio rule the plan follows."""
    audio_track: bool
    """The family renders an audio track: the MP4 has AAC exactly when this is true."""
    partition: str
    canvas: Canvas
    num_frames: int
    fps: float
    steps: int
    crf: int
    seed: int | None
    """None until generate picks one (and reports it, so the render can be repeated)."""
    inputs: Mapping[str, Path] = field(default_factory=dict)
    """File-valued request keys resolved to existing paths (data: URLs are not here)."""
    checkpoints: Mapping[str, Path] = field(default_factory=dict)
    """The config's checkpoint paths (``parameters.model``, ``video_vae``, ...) resolved inside
    the models directory."""
    warnings: tuple[str, ...] = ()

    @property
    def duration(self) -> float:
        return self.num_frames / self.fps

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "audio_track": self.audio_track,
            "partition": self.partition,
            "width": self.canvas.width,
            "height": self.canvas.height,
            "canvas_source": self.canvas.source,
            "num_frames": self.num_frames,
            "fps": self.fps,
            "duration_s": round(self.duration, 6),
            "steps": self.steps,
            "crf": self.crf,
            "seed": self.seed,
            "inputs": {k: str(v) for k, v in self.inputs.items()},
            "checkpoints": {k: str(v) for k, v in self.checkpoints.items()},
            "request": self.request.given(),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True, kw_only=True)
class VideoJob:
    """What the engine receives (the ``request`` argument of the engine's ``video_generate``).

    Geometry is final: keyframes are binary PPMs at exactly ``width`` x ``height``.
    """

    prompt: str
    family: str
    """The video family planned for (the engine renders exactly its grids)."""
    audio_track: bool
    """The family renders audio: return a WAV exactly when this is true."""
    partition: str
    width: int
    height: int
    num_frames: int
    fps: float
    steps: int
    seed: int
    crf: int
    noise_aug: float | None = None
    start_image: Path | None = None
    end_image: Path | None = None
    ref_image: Path | None = None
    ref_video: Path | None = None
    audio: Path | None = None
    device: str | None = None
    ffmpeg: str = "ffmpeg"
    """The resolved ffmpeg, for engines that assemble a mux argv."""
    checkpoints: Mapping[str, Path] = field(default_factory=dict)
    """The checkpoint set, resolved and confined to the models directory: ``parameters.model``
    (the DiT), ``video_vae``, ``video_encoder``, ``audio_vae``, ... as the config names them."""
    model: Any = None
    """The model config as the config layer loaded it; opaque here."""


@dataclass(frozen=True, kw_only=True)
class EngineOutput:
    """What the engine hands back: frames, optionally a WAV and a proposed mux argv."""

    frames: Path
    """A directory of PPM or PNG frames (sorted by name), or a raw RGB24 file."""
    audio: Path | None = None
    """A WAV to mux as AAC, exactly when the job's ``audio_track`` says the family has audio."""
    argv: tuple[str, ...] | None = None
    """A proposed ffmpeg argv; argv[0] is replaced with the resolved ffmpeg."""
    output: Path | None = None
    """The file ``argv`` writes; default its last element (relative to the workdir)."""
    raw_size: tuple[int, int] | None = None
    """Width and height of raw RGB frames; default the planned canvas."""
