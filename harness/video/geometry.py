"""Canvas and frame-count grids, mirroring the engine's shape planner, per video family.

Each family's engine fits the canvas to its pixel grid (MiniMax-H3 truncates to 32 pixels,
Wan pads to 16) and renders a frame count on its frame grid (the video VAE's temporal
packing: 17n+5, 4n+1); ``harness/families/families.yaml`` holds the rules. Resolving both here,
with the family's rules, means the keyframe PPMs we hand over are exactly the resolution the
engine will render, the frame count planned is the count rendered, and the user is told
about any change before the render.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.core.errors import VideoError
from harness.families.table import VideoFamily


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

    Used for the long side of a derived canvas, before grid fitting, like the
    engine's ``alignMultiple``.
    """
    return max(2, 2 * math.floor(value / 2 + 0.5))


def derive_from_aspect(image_width: int, image_height: int, family: VideoFamily) -> tuple[int, int]:
    """A canvas with the image's aspect ratio and the family's keyframe short side, on its grid."""
    if image_width <= 0 or image_height <= 0:
        msg = f"keyframe has no size ({image_width}x{image_height})"
        raise VideoError(msg)
    short_side = family.keyframe_short_side
    if image_width >= image_height:
        long_side = align_even(short_side * image_width / image_height)
        return family.fit_side(long_side), family.fit_side(short_side)
    long_side = align_even(short_side * image_height / image_width)
    return family.fit_side(short_side), family.fit_side(long_side)


def resolve_canvas(
    *,
    width: int | None,
    height: int | None,
    keyframe_size: tuple[int, int] | None,
    family: VideoFamily,
    default_width: int | None = None,
    default_height: int | None = None,
) -> tuple[Canvas, list[str]]:
    """Decide the canvas; precedence: request, keyframe aspect, options, the family's default.

    A keyframe beats the configured default canvas because stretching a portrait
    keyframe onto a landscape default distorts the first frame; a request that
    wants a fixed canvas with a keyframe says so with width/height.

    :param width: request width (may be None).
    :param height: request height (may be None).
    :param keyframe_size: the keyframe's pixel size, probed before any scaling.
    :param family: whose pixel grid and default canvas apply.
    :return: the canvas (on the family's grid) and warnings for every adjustment.
    """
    warnings: list[str] = []
    if width is not None or height is not None:
        source = "request"
        # One side given: take the other from the keyframe aspect, else the defaults.
        if width is None and height is not None:
            width = (align_even(height * keyframe_size[0] / keyframe_size[1]) if keyframe_size
                     else default_width or family.width)
        elif height is None and width is not None:
            height = (align_even(width * keyframe_size[1] / keyframe_size[0]) if keyframe_size
                      else default_height or family.height)
        assert width is not None and height is not None
        w, h = family.fit_side(width, what="width"), family.fit_side(height, what="height")
    elif keyframe_size is not None:
        w, h = derive_from_aspect(*keyframe_size, family)
        return Canvas(width=w, height=h, source="keyframe"), warnings
    elif default_width is not None or default_height is not None:
        source = "options"
        width = default_width or family.width
        height = default_height or family.height
        w, h = (family.fit_side(width, what="video_width"),
                family.fit_side(height, what="video_height"))
    else:
        return Canvas(width=family.width, height=family.height, source="default"), warnings
    if (w, h) != (width, height):
        how = "padded" if family.pixel_rounding == "up" else "truncated"
        warnings.append(f"canvas {width}x{height} {how} to {w}x{h} "
                        f"(the {family.name} family renders on a {family.pixel_grid}-pixel grid)")
    return Canvas(width=w, height=h, source=source), warnings


def align_frame_count(frames: int, family: VideoFamily) -> int:
    """The smallest count on the family's frame grid >= ``frames`` (the engine rounds up, never down)."""
    if frames < 1:
        msg = f"frame count must be positive, found {frames}"
        raise VideoError(msg)
    return family.align_frames(frames)


def resolve_frames(requested: int | None, default: int, family: VideoFamily) -> tuple[int, list[str]]:
    """The frame count the engine will render, with a warning when it differs."""
    frames = requested if requested is not None else default
    aligned = align_frame_count(frames, family)
    if aligned != frames:
        return aligned, [f"num_frames {frames} is not on the {family.frame_grid_name} grid "
                         f"({family.name}): rendering {aligned}"]
    return aligned, []
