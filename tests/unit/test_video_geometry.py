"""Canvas and frame grids per video family: the rules each engine's shape planner applies, pinned by tables."""

from __future__ import annotations

import pytest

from harness.core.errors import VideoError
from harness.families.table import get_family
from harness.video.geometry import (
    align_even,
    align_frame_count,
    derive_from_aspect,
    resolve_canvas,
    resolve_frames,
)

MH3 = get_family("minimax-h3")
WAN = get_family("wan")


@pytest.mark.parametrize(("size", "expected"), [
    ((1344, 768), (1344, 768)),
    ((1350, 770), (1344, 768)),
    ((1376, 800), (1376, 800)),
    ((1919, 1081), (1888, 1056)),
    ((32, 32), (32, 32)),
    ((63, 95), (32, 64)),
])
def test_canvas_truncates_to_the_32_grid(size: tuple[int, int], expected: tuple[int, int]) -> None:
    canvas, warnings = resolve_canvas(width=size[0], height=size[1], keyframe_size=None, family=MH3)
    assert (canvas.width, canvas.height) == expected
    assert canvas.source == "request"
    assert bool(warnings) == (size != expected)


@pytest.mark.parametrize(("value", "expected"), [
    (1344, 1344), (1375, 1344), (1376, 1376), (767, 736), (32, 32),
])
def test_truncate_never_rounds_up(value: int, expected: int) -> None:
    assert MH3.fit_side(value) == expected


def test_truncate_refuses_below_the_grid() -> None:
    with pytest.raises(VideoError, match="below the 32-pixel grid"):
        MH3.fit_side(31)


@pytest.mark.parametrize(("size", "expected"), [
    ((64, 64), (64, 64)), ((60, 70), (64, 80)), ((1, 17), (16, 32)), ((832, 480), (832, 480)),
])
def test_wan_pads_the_canvas_to_the_16_grid(size: tuple[int, int], expected: tuple[int, int]) -> None:
    canvas, warnings = resolve_canvas(width=size[0], height=size[1], keyframe_size=None, family=WAN)
    assert (canvas.width, canvas.height) == expected
    assert bool(warnings) == (size != expected)
    if warnings:
        assert "padded" in warnings[0] and "16-pixel grid" in warnings[0]


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
    assert derive_from_aspect(*image, MH3) == canvas
    resolved, _ = resolve_canvas(width=None, height=None, keyframe_size=image, family=MH3)
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
    canvas, _ = resolve_canvas(**kwargs, family=MH3)  # type: ignore[arg-type]
    assert (canvas.width, canvas.height, canvas.source) == expected


@pytest.mark.parametrize(("requested", "expected"), [
    (124, 124), (100, 107), (107, 107), (108, 124), (1, 5), (5, 5), (6, 22), (22, 22), (125, 141),
])
def test_frame_counts_round_up_to_17n_plus_5(requested: int, expected: int) -> None:
    assert align_frame_count(requested, MH3) == expected
    frames, warnings = resolve_frames(requested, 124, MH3)
    assert frames == expected
    assert bool(warnings) == (requested != expected)
    if warnings:
        assert f"num_frames {requested}" in warnings[0] and str(expected) in warnings[0]


@pytest.mark.parametrize(("requested", "expected"), [
    (1, 1), (2, 5), (5, 5), (22, 25), (81, 81), (82, 85), (124, 125), (1025, 1025),
])
def test_wan_frame_counts_round_up_to_4n_plus_1(requested: int, expected: int) -> None:
    frames, warnings = resolve_frames(requested, 81, WAN)
    assert frames == expected == align_frame_count(requested, WAN)
    assert bool(warnings) == (requested != expected)
    if warnings:
        assert "4n+1" in warnings[0] and "(wan)" in warnings[0]


def test_wan_keyframe_canvas_has_its_default_short_side() -> None:
    # 480 * 16/9 = 853.3 -> even 854 -> padded to the 16 grid: 864 (the engine pads, never truncates)
    assert derive_from_aspect(1920, 1080, WAN) == (864, 480)
    assert derive_from_aspect(1080, 1920, WAN) == (480, 864)


def test_frame_default_and_zero() -> None:
    assert resolve_frames(None, 124, MH3) == (124, [])
    assert resolve_frames(None, 81, WAN) == (81, [])
    with pytest.raises(VideoError):
        align_frame_count(0, MH3)
