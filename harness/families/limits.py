"""Every bound the video path enforces, in one place.

A request that asks for 10^30 frames, a 100000-pixel canvas or a keyframe whose
header claims 2^31-1 pixels is refused here, before anything is read, decoded or
rendered: a render is hours long and an engine handed an unbounded number either
overflows a C ``int`` or allocates until the host falls over.

The defaults suit every engine the harness drives; a registered engine narrows or
widens them with its ``video_limits`` (:func:`harness.video.target.engine_limits`).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from harness.core.errors import VideoError, did_you_mean
from harness.core.inputs import LIMITS


@dataclass(frozen=True, kw_only=True)
class VideoLimits:
    """Bounds on a video request, its files and the plan resolved from it."""

    max_side: int = 4096
    """Largest canvas width or height, in pixels (request, options or derived from a keyframe)."""

    max_frames: int = 1025
    """Most frames one render may produce (on the 17n+5 and 4n+1 grids, about 43 s at 24 fps)."""

    max_pixel_frames: int = 2**31 - 1
    """Largest width * height * frames: about 1920x1088 at 1025 frames, and inside a C int."""

    max_steps: int = 1000
    """Most denoising steps."""

    max_seed: int = 2**32 - 1
    """Largest seed (seeds are 0..max_seed): a uint32 every engine can take."""

    max_fps: float = 240.0
    """Highest frame rate, requested or configured."""

    max_noise_aug: float = 1.0
    """Largest keyframe noise augmentation (a strength, 0..1)."""

    max_prompt_chars: int = 20_000
    """Longest prompt, in characters (text encoders truncate far below this)."""

    max_path_chars: int = 4096
    """Longest file path in a request (PATH_MAX on Linux)."""

    max_image_side: int = 16_384
    """Largest keyframe width or height, from its header, before anything decodes it."""

    max_image_pixels: int = 2**26
    """Largest keyframe width * height (8192x8192): what the converter may decode."""

    max_image_bytes: int = LIMITS["keyframe"]
    """Largest keyframe file or data: URL payload, in bytes (``harness.core.inputs.LIMITS``'s; an
    engine may lower it)."""

    max_request_bytes: int = LIMITS["request"]
    """Largest request file (a data: URL keyframe is most of it; ``harness.core.inputs.LIMITS``'s, an
    engine may lower it)."""

    max_json_depth: int = 8
    """Deepest nesting of a request file (a valid request is one flat object)."""

    max_json_containers: int = 256
    """Most arrays and objects in a request file."""

    def with_overrides(self, overrides: Mapping[str, Any], *, source: str) -> VideoLimits:
        """A copy with ``overrides`` applied; each name and value is checked.

        :param source: who asked for the overrides, for the error message.
        :raises VideoError: an unknown limit (with did-you-mean) or a value that is not
            a positive finite number of the field's type.
        """
        known = {f.name: f.type for f in fields(self)}
        values: dict[str, Any] = {}
        for name, value in overrides.items():
            if name not in known:
                msg = (f"{source}: unknown video limit {show(name)}"
                       f"{did_you_mean(str(name)[:64], known)}; known: {', '.join(known)}")
                raise VideoError(msg)
            wants_float = known[name] == "float"
            ok = (is_number(value) and value > 0) if wants_float else (is_int(value) and value > 0)
            if not ok:
                kind = "a positive number" if wants_float else "a positive integer"
                msg = f"{source}: video limit {name} must be {kind}, found {show(value)}"
                raise VideoError(msg)
            values[name] = float(value) if wants_float else value
        return replace(self, **values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_LIMITS = VideoLimits()


# -- value checks shared by the request, the plan and the keyframes ----------------


def is_int(value: Any) -> bool:
    """An int that is not a bool (JSON ``true`` is never a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float that is not a bool: NaN and infinities are refused."""
    if is_int(value):
        return True  # math.isfinite(10**400) would raise OverflowError
    return isinstance(value, float) and math.isfinite(value)


class _Shown(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int over 4300 digits raises ValueError: say how big it is instead.
        if x.bit_length() > 128:
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_shown = _Shown()
_shown.maxstring = 80
_shown.maxother = 80
_shown.maxlevel = 3


def show(value: Any, limit: int = 120) -> str:
    """A short, always-printable repr of a client value for an error message."""
    try:
        text = _shown.repr(value)
    except Exception:  # a caller's object whose __repr__ fails: still a VideoError
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_plan(*, width: int, height: int, canvas_source: str, frames: int, frames_source: str,
               steps: int, steps_source: str, fps: float, limits: VideoLimits) -> None:
    """Bound the resolved plan: values from the model config and a keyframe's aspect too.

    The request's own numbers were bounded when it was parsed; this catches what the
    options and a keyframe add (a 2^31-pixel-wide header derives a 2^40-pixel canvas).

    :raises VideoError: naming the field and where its value came from.
    """
    side = limits.max_side
    if width > side or height > side:
        key = "width" if width > side else "height"
        msg = (f"{key}: the canvas {width}x{height} ({_SOURCES.get(canvas_source, canvas_source)}) "
               f"is above the {side}-pixel limit per side; give width and height in the request")
        raise VideoError(msg)
    if frames > limits.max_frames:
        msg = (f"num_frames: {frames} frames ({frames_source}) is above the limit of "
               f"{limits.max_frames}")
        raise VideoError(msg)
    if width * height * frames > limits.max_pixel_frames:
        msg = (f"num_frames: {width}x{height} at {frames} frames is {width * height * frames} "
               f"pixels, above the limit of {limits.max_pixel_frames}; lower the canvas or "
               "the frame count")
        raise VideoError(msg)
    if steps > limits.max_steps:
        msg = f"steps: {steps} ({steps_source}) is above the limit of {limits.max_steps}"
        raise VideoError(msg)
    if not (math.isfinite(fps) and 0 < fps <= limits.max_fps):
        msg = f"fps: {fps:g} (video_fps in the model config) is outside 0..{limits.max_fps:g}"
        raise VideoError(msg)


_SOURCES = {"request": "from the request", "keyframe": "derived from the keyframe's aspect ratio",
            "options": "from the model config's video_width/video_height", "default": "the default"}
