"""Canvas and frame-count grids, mirroring the engine's shape planner.

The engine truncates the canvas to a pixel grid and rounds frame counts up to its
frame grid (the video VAE's temporal packing): the default video family's, 32 pixels
and 17n+5 (``harness/video/families.yaml``). Resolving both here, with the
same rules, means the keyframe PPMs we hand over are exactly the resolution the
engine will render, and the user is told about any change before the render.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.core.errors import VideoError
from harness.video.families import default_family

GRID = default_family().pixel_grid
#: The built-in canvas: the default video family's.
DEFAULT_WIDTH = default_family().width
DEFAULT_HEIGHT = default_family().height
#: Short side of a canvas derived from a keyframe's aspect ratio.
KEYFRAME_SHORT_SIDE = 768


@dataclass(frozen=True, kw_only=True)
class Canvas:
    width: int
    height: int
    source: str
    """Where it came from: request, keyframe, options or default."""

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"


def align_even(value: float) -> int:
    """Round to the nearest even integer (halves go up), never below 2.

    Used for the long side of a derived canvas, before grid truncation, like the
    engine's ``alignMultiple``.
    """
    return max(2, 2 * math.floor(value / 2 + 0.5))


def truncate_to_grid(value: int, grid: int = GRID, *, what: str = "canvas side") -> int:
    """Truncate (not round) to a multiple of ``grid``: the engine never upsizes a canvas.

    :param what: the field the value is for, named in the error.
    """
    if value < grid:
        msg = f"{what}: canvas side {value} is below the {grid}-pixel grid; use at least {grid}"
        raise VideoError(msg)
    return value // grid * grid


def derive_from_aspect(image_width: int, image_height: int,
                       short_side: int = KEYFRAME_SHORT_SIDE) -> tuple[int, int]:
    """A canvas with the image's aspect ratio and ``short_side``, on the grid."""
    if image_width <= 0 or image_height <= 0:
        msg = f"keyframe has no size ({image_width}x{image_height})"
        raise VideoError(msg)
    if image_width >= image_height:
        long_side = align_even(short_side * image_width / image_height)
        return truncate_to_grid(long_side), truncate_to_grid(short_side)
    long_side = align_even(short_side * image_height / image_width)
    return truncate_to_grid(short_side), truncate_to_grid(long_side)


def resolve_canvas(
    *,
    width: int | None,
    height: int | None,
    keyframe_size: tuple[int, int] | None,
    default_width: int | None = None,
    default_height: int | None = None,
) -> tuple[Canvas, list[str]]:
    """Decide the canvas; precedence: request, keyframe aspect, options, built-in default.

    A keyframe beats the configured default canvas because stretching a portrait
    keyframe onto a landscape default distorts the first frame; a request that
    wants a fixed canvas with a keyframe says so with width/height.

    :param width: request width (may be None).
    :param height: request height (may be None).
    :param keyframe_size: the keyframe's pixel size, probed before any scaling.
    :return: the canvas (on the grid) and warnings for every adjustment.
    """
    warnings: list[str] = []
    if width is not None or height is not None:
        source = "request"
        # One side given: take the other from the keyframe aspect, else the defaults.
        if width is None and height is not None:
            width = (align_even(height * keyframe_size[0] / keyframe_size[1]) if keyframe_size
                     else default_width or DEFAULT_WIDTH)
        elif height is None and width is not None:
            height = (align_even(width * keyframe_size[1] / keyframe_size[0]) if keyframe_size
                      else default_height or DEFAULT_HEIGHT)
        assert width is not None and height is not None
        w, h = truncate_to_grid(width, what="width"), truncate_to_grid(height, what="height")
    elif keyframe_size is not None:
        source = "keyframe"
        w, h = derive_from_aspect(*keyframe_size)
        return Canvas(width=w, height=h, source=source), warnings
    elif default_width is not None or default_height is not None:
        source = "options"
        width = default_width or DEFAULT_WIDTH
        height = default_height or DEFAULT_HEIGHT
        w, h = (truncate_to_grid(width, what="video_width"),
                truncate_to_grid(height, what="video_height"))
    else:
        return Canvas(width=DEFAULT_WIDTH, height=DEFAULT_HEIGHT, source="default"), warnings
    if (w, h) != (width, height):
        warnings.append(f"canvas {width}x{height} truncated to {w}x{h} "
                        f"(the engine renders on a {GRID}-pixel grid)")
    return Canvas(width=w, height=h, source=source), warnings


def align_frame_count(frames: int) -> int:
    """The smallest 17n+5 value >= ``frames`` (the engine rounds up, never down)."""
    if frames < 1:
        msg = f"frame count must be positive, found {frames}"
        raise VideoError(msg)
    return default_family().align_frames(frames)


def resolve_frames(requested: int | None, default: int) -> tuple[int, list[str]]:
    """The frame count the engine will render, with a warning when it differs."""
    frames = requested if requested is not None else default
    aligned = align_frame_count(frames)
    if aligned != frames:
        return aligned, [f"num_frames {frames} is not on the 17n+5 grid: rendering {aligned}"]
    return aligned, []
