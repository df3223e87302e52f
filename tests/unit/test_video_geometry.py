"""Canvas and frame grids: the rules the engine's shape planner applies, pinned by tables."""

from __future__ import annotations

import pytest

from harness.core.errors import VideoError
from harness.video.geometry import (
    align_even,
    align_frame_count,
    derive_from_aspect,
    resolve_canvas,
    resolve_frames,
    truncate_to_grid,
)


@pytest.mark.parametrize(("size", "expected"), [
    ((1344, 768), (1344, 768)),
    ((1350, 770), (1344, 768)),
    ((1376, 800), (1376, 800)),
    ((1919, 1081), (1888, 1056)),
    ((32, 32), (32, 32)),
    ((63, 95), (32, 64)),
])
def test_canvas_truncates_to_the_32_grid(size: tuple[int, int], expected: tuple[int, int]) -> None:
    canvas, warnings = resolve_canvas(width=size[0], height=size[1], keyframe_size=None)
    assert (canvas.width, canvas.height) == expected
    assert canvas.source == "request"
    assert bool(warnings) == (size != expected)


@pytest.mark.parametrize(("value", "expected"), [
    (1344, 1344), (1375, 1344), (1376, 1376), (767, 736), (32, 32),
])
def test_truncate_never_rounds_up(value: int, expected: int) -> None:
    assert truncate_to_grid(value) == expected


def test_truncate_refuses_below_the_grid() -> None:
    with pytest.raises(VideoError, match="below the 32-pixel grid"):
        truncate_to_grid(31)


@pytest.mark.parametrize(("value", "expected"), [
    (0.4, 2), (2.0, 2), (2.9, 2), (3.0, 4), (4.99, 4), (5.0, 6), (1365.33, 1366), (1364.9, 1364),
    (1365.0, 1366),
])
def test_align_even(value: float, expected: int) -> None:
    assert align_even(value) == expected


@pytest.mark.parametrize(("image", "canvas"), [
    ((1920, 1080), (1344, 768)),   # 16:9 -> long side 1365.3 -> even 1366 -> grid 1344
    ((1080, 1920), (768, 1344)),   # portrait keeps the 768 short side horizontal
    ((1000, 1000), (768, 768)),
    ((640, 480), (1024, 768)),
    ((4000, 1000), (3072, 768)),
    ((200, 100), (1536, 768)),     # small keyframes are scaled up to the 768 short side
])
def test_canvas_from_keyframe_aspect(image: tuple[int, int], canvas: tuple[int, int]) -> None:
    assert derive_from_aspect(*image) == canvas
    resolved, _ = resolve_canvas(width=None, height=None, keyframe_size=image)
    assert (resolved.width, resolved.height, resolved.source) == (*canvas, "keyframe")


@pytest.mark.parametrize(("kwargs", "expected"), [
    # precedence: request > keyframe aspect > options > built-in default
    ({"width": 640, "height": 480, "keyframe_size": (1080, 1920)}, (640, 480, "request")),
    ({"width": None, "height": None, "keyframe_size": (1080, 1920),
      "default_width": 1344, "default_height": 768}, (768, 1344, "keyframe")),
    ({"width": None, "height": None, "keyframe_size": None,
      "default_width": 1000, "default_height": 600}, (992, 576, "options")),
    ({"width": None, "height": None, "keyframe_size": None}, (1344, 768, "default")),
    # one side given: the other from the keyframe's aspect, else the defaults
    ({"width": 1024, "height": None, "keyframe_size": (1600, 900)}, (1024, 576, "request")),
    ({"width": None, "height": 768, "keyframe_size": (1600, 900)}, (1344, 768, "request")),
    ({"width": 640, "height": None, "keyframe_size": None}, (640, 768, "request")),
])
def test_canvas_precedence(kwargs: dict[str, object], expected: tuple[int, int, str]) -> None:
    canvas, _ = resolve_canvas(**kwargs)  # type: ignore[arg-type]
    assert (canvas.width, canvas.height, canvas.source) == expected


@pytest.mark.parametrize(("requested", "expected"), [
    (124, 124), (100, 107), (107, 107), (108, 124), (1, 5), (5, 5), (6, 22), (22, 22), (125, 141),
])
def test_frame_counts_round_up_to_17n_plus_5(requested: int, expected: int) -> None:
    assert align_frame_count(requested) == expected
    frames, warnings = resolve_frames(requested, default=124)
    assert frames == expected
    assert bool(warnings) == (requested != expected)
    if warnings:
        assert f"num_frames {requested}" in warnings[0] and str(expected) in warnings[0]


def test_frame_default_and_zero() -> None:
    assert resolve_frames(None, default=124) == (124, [])
    with pytest.raises(VideoError):
        align_frame_count(0)
