"""Model-config options the video path reads (``video_*`` keys of ``options:``).

The model-config schema owns the full checkpoint set; this module only takes the
options that shape a request and its mux, so the video path does not depend on
that schema. :meth:`VideoOptions.from_mapping` accepts the ``options:`` spelling
(``video_width``, values possibly still strings) and the field names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from harness.errors import ConfigError, did_you_mean
from harness.video.families import default_family, family_names

#: Partitions a video DiT can be declared as. ``t2va`` names the FL2VA checkpoint
#: used text-only: the same file serves t2va and fl2va, so it gets the FL2VA rules.
PARTITIONS: tuple[str, ...] = ("t2va", "fl2va", "ref2va")
DEVICES: tuple[str, ...] = ("cpu", "cuda", "gpu")

# The built-in defaults are the default video family's (harness/video/families.yaml).
DEFAULT_WIDTH = default_family().width
DEFAULT_HEIGHT = default_family().height
DEFAULT_FRAMES = default_family().frames
DEFAULT_STEPS = default_family().steps
#: The family renders at one fixed rate (video and audio jointly, when it has audio).
DEFAULT_FPS = default_family().fps
#: libx264's "visually lossless" point; the rendered frames are worth keeping.
DEFAULT_CRF = 18

#: ``video_*`` keys that name the checkpoint set; the config schema checks them,
#: we only need to know they are not typos of ours.
CHECKPOINT_KEYS: frozenset[str] = frozenset({
    "video_encoder", "video_tokenizer", "video_vae", "video_vae_config", "audio_vae",
    "audio_vae_config", "video_prompt_embeds", "video_dequant_bf16", "video_fp4_resident",
})


@dataclass(frozen=True, kw_only=True)
class VideoOptions:
    """Per-model video settings; every field has a default so an empty mapping works."""

    family: str | None = None
    """Declared video family (video_family); None: the backend's family (see families.yaml)."""

    partition: str | None = None
    """Declared DiT partition (t2va, fl2va, ref2va); None means undeclared (FL2VA assumed, with a warning)."""

    device: str | None = None
    """Device the engine renders on (cpu, cuda, gpu); None leaves it to the engine."""

    width: int | None = None
    """Default canvas width; None lets a keyframe's aspect ratio or the built-in 1344 decide."""

    height: int | None = None
    """Default canvas height; None lets a keyframe's aspect ratio or the built-in 768 decide."""

    num_frames: int = DEFAULT_FRAMES
    """Default frame count (on the family's frame grid)."""

    steps: int = DEFAULT_STEPS
    """Default denoising steps."""

    fps: float = DEFAULT_FPS
    """The engine's native frame rate; requests asking for another rate are warned and ignored."""

    crf: int = DEFAULT_CRF
    """Default H.264 CRF (0-51) for the mux."""

    ffmpeg: str | None = None
    """Explicit ffmpeg binary (path or name); beats HARNESS_FFMPEG, PATH and imageio-ffmpeg."""

    workdir: str | None = None
    """Parent of the per-request work directories; None uses the system temp dir."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> VideoOptions:
        """Build options from a mapping; other engines' keys are ignored, ``video_*`` typos are not."""
        return cls(**_parse(data))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: field -> accepted keys, the ``options:`` spelling first.
_KEYS: dict[str, tuple[str, ...]] = {
    "family": ("video_family", "family"),
    "partition": ("video_partition", "partition"),
    "device": ("video_device", "device"),
    "width": ("video_width", "width"),
    "height": ("video_height", "height"),
    "num_frames": ("video_num_frames", "num_frames", "frames"),
    "steps": ("video_steps", "steps"),
    "fps": ("video_fps", "fps"),
    "crf": ("video_crf", "crf"),
    "ffmpeg": ("ffmpeg", "video_ffmpeg"),
    "workdir": ("video_workdir", "workdir"),
}
_CANVAS_KEYS = ("video_canvas", "canvas")


def _as_int(key: str, value: Any, *, low: int, high: int | None = None) -> int:
    if isinstance(value, bool):
        value = None  # bool is an int subclass; "true" is never a size
    elif isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            value = None
    if not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        msg = f"video option {key}: expected an integer {bound}, found {value!r}"
        raise ConfigError(msg)
    return value


def _as_float(key: str, value: Any) -> float:
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number <= 0:
        msg = f"video option {key}: expected a positive number, found {value!r}"
        raise ConfigError(msg)
    return number


def _as_choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    text = str(value).strip().lower()
    if text not in choices:
        msg = (f"video option {key}: expected one of {', '.join(choices)}, found {value!r}"
               f"{did_you_mean(text, choices)}")
        raise ConfigError(msg)
    return text


def _parse_canvas(key: str, value: Any) -> tuple[int, int]:
    """``"1344x768"``, ``[1344, 768]`` or ``{"width": .., "height": ..}``."""
    if isinstance(value, str) and "x" in value.lower():
        w, _, h = value.lower().partition("x")
        return _as_int(key, w, low=1), _as_int(key, h, low=1)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return _as_int(key, value[0], low=1), _as_int(key, value[1], low=1)
    if isinstance(value, Mapping) and set(value) == {"width", "height"}:
        return _as_int(key, value["width"], low=1), _as_int(key, value["height"], low=1)
    msg = f"video option {key}: expected WIDTHxHEIGHT (e.g. 1344x768), found {value!r}"
    raise ConfigError(msg)


def _pick(data: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    given = [k for k in keys if k in data and data[k] is not None and data[k] != ""]
    if len(given) > 1:
        msg = f"video options {' and '.join(given)} set the same thing; keep one"
        raise ConfigError(msg)
    return (given[0], data[given[0]]) if given else None


def _parse(data: Mapping[str, Any]) -> dict[str, Any]:
    known = {k for keys in _KEYS.values() for k in keys} | set(_CANVAS_KEYS)
    for key in data:
        # A misspelled video_* key would silently fall back to a default and render
        # the wrong thing for hours; non-video keys belong to the text engine.
        if key.startswith("video_") and key not in known and key not in CHECKPOINT_KEYS:
            msg = f"unknown video option {key!r}{did_you_mean(key, known | CHECKPOINT_KEYS)}"
            raise ConfigError(msg)
    values: dict[str, Any] = {}
    for name, keys in _KEYS.items():
        hit = _pick(data, keys)
        if hit is None:
            continue
        key, raw = hit
        if name == "family":
            values[name] = _as_choice(key, raw, family_names())
        elif name == "partition":
            values[name] = _as_choice(key, raw, PARTITIONS)
        elif name == "device":
            values[name] = _as_choice(key, raw, DEVICES)
        elif name in ("width", "height", "num_frames", "steps"):
            values[name] = _as_int(key, raw, low=1)
        elif name == "crf":
            values[name] = _as_int(key, raw, low=0, high=51)
        elif name == "fps":
            values[name] = _as_float(key, raw)
        else:
            values[name] = str(raw)
    canvas = _pick(data, _CANVAS_KEYS)
    if canvas is not None:
        if "width" in values or "height" in values:
            msg = f"video option {canvas[0]} and video_width/video_height both set the canvas; keep one"
            raise ConfigError(msg)
        values["width"], values["height"] = _parse_canvas(*canvas)
    return values
