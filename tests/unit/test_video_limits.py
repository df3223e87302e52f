"""Every number in a video request or plan is bounded, every refusal names its field.

Regression tests for issue 15, finding 6 (video half): ``video check`` accepted
``num_frames`` 1e9 and 1e30, width 100000, 100000x100000 at 100016 frames and 1e6
steps, a PNG header claiming width 2^31-1 and seed 2^80.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pluggy
import pytest

import harness.cli
from harness.core.errors import ConfigError, VideoError
from harness.families.limits import (
    DEFAULT_LIMITS,
    VideoLimits,
    show,
)
from harness.video.ffmpeg import Ffmpeg
from harness.video.job import VideoPlan
from harness.video.pipeline import VideoPipeline, engine_limits
from harness.video.target import resolve_target

from .pngs import png_header

FF = Ffmpeg(path="ffmpeg", source="test", version="test", encoders=frozenset())
OPTIONS = {"video_partition": "fl2va", "video_width": "64", "video_height": "32",
           "video_num_frames": "5", "video_steps": "2"}


def check(data: dict[str, Any], root: Path | None = None, *, limits: VideoLimits | None = None,
          **options: str) -> VideoPlan:
    target = resolve_target("fake", {**OPTIONS, **options})
    if limits is not None:
        target = dataclasses.replace(target, limits=limits)
    return VideoPipeline(target, ffmpeg=FF).check({"prompt": "p", **data}, base_dir=root)


@pytest.mark.parametrize(("data", "field"), [
    ({"num_frames": 10**9}, "num_frames"),
    ({"num_frames": 10**30}, "num_frames"),
    ({"num_frames": 1e9}, "num_frames"),
    ({"width": 100_000}, "width"),
    ({"height": 100_000}, "height"),
    ({"width": 100_000, "height": 100_000, "num_frames": 100_016, "steps": 10**6}, "width"),
    ({"steps": 10**6}, "steps"),
    ({"seed": 2**80}, "seed"),
    ({"seed": 2**32}, "seed"),
])
def test_issue_numbers_are_refused_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(VideoError, match=f"'{field}'"):
        check(data)


def test_png_header_claiming_2_31_wide_is_refused(tmp_path: Path) -> None:
    (tmp_path / "wide.png").write_bytes(png_header(2**31 - 1, 768))
    with pytest.raises(VideoError, match=r"start_image: the image header claims 2147483647x768"):
        check({"start_image": "wide.png"}, tmp_path)


def test_a_keyframe_aspect_cannot_derive_a_huge_canvas(tmp_path: Path) -> None:
    # Within the image limits, but its aspect ratio derives a 12582912-pixel-wide canvas.
    (tmp_path / "strip.png").write_bytes(png_header(16_384, 1))
    with pytest.raises(VideoError, match=r"width: the canvas 12582912x768 .*aspect ratio"):
        check({"start_image": "strip.png"}, tmp_path)


def test_total_pixels_times_frames_is_bounded() -> None:
    # Each value is inside its own limit; together they are 17 G pixels.
    with pytest.raises(VideoError, match="num_frames: 4096x4096 at 1025 frames"):
        check({"width": 4096, "height": 4096, "num_frames": 1025})
    plan = check({"width": 1920, "height": 1088, "num_frames": 1025})
    assert plan.num_frames == 1025


@pytest.mark.parametrize(("option", "value", "match"), [
    ("video_num_frames", "1000000000", "option video_num_frames must be <= 1025, found 1000000000"),
    ("video_width", "100000", "option video_width must be <= 4096, found 100000"),
    ("video_steps", "1000000", "option video_steps must be <= 1000, found 1000000"),
    ("video_fps", "1e9", "option video_fps must be <= 240, found 1000000000.0"),
])
def test_config_values_are_bounded_too(option: str, value: str, match: str) -> None:
    # The config's own bounds (the schema's, the default limits) refuse them as options are read.
    with pytest.raises(ConfigError, match=match):
        check({}, **{option: value})


@pytest.mark.parametrize(("limits", "option", "value", "match"), [
    (VideoLimits(max_frames=100), "video_num_frames", "124", "num_frames: 124 frames .*video_num_frames"),
    (VideoLimits(max_side=512), "video_width", "1024", "width: the canvas 1024x32 .*video_width"),
    (VideoLimits(max_steps=10), "video_steps", "20", "steps: 20 .*video_steps"),
    (VideoLimits(max_fps=30.0), "video_fps", "60", "fps: 60 .*video_fps"),
])
def test_config_values_are_bounded_by_the_engine_limits(limits: VideoLimits, option: str, value: str,
                                                         match: str) -> None:
    with pytest.raises(VideoError, match=match):
        check({}, limits=limits, **{option: value})


# -- types: NaN, infinities, non-integers, bools ----------------------------------------


@pytest.mark.parametrize("key", ["width", "height", "num_frames", "steps", "seed", "crf"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 64.0, 1.5, True, "64",
                                   [64], {"v": 64}, -1, 2**200])
def test_integer_keys_refuse_everything_else(key: str, value: Any) -> None:
    with pytest.raises(VideoError, match=f"request key '{key}': expected"):
        check({key: value})


@pytest.mark.parametrize(("key", "value"), [
    ("noise_aug", math.nan), ("noise_aug", math.inf), ("noise_aug", 1.5), ("noise_aug", -0.1),
    ("fps", math.nan), ("fps", math.inf), ("fps", 1e9), ("fps", 0), ("fps", True),
    ("noise_aug", 10**400), ("fps", 10**400),  # was an OverflowError in math.isfinite
])
def test_float_keys_refuse_nan_inf_and_out_of_range(key: str, value: Any) -> None:
    with pytest.raises(VideoError, match=f"request key '{key}'"):
        check({key: value})


@pytest.mark.parametrize(("data", "match"), [
    ({"prompt": "x" * 20_001}, "'prompt': expected at most 20000 characters"),
    ({"prompt": "a \ud800 b"}, "'prompt': expected .* valid Unicode"),
    ({"prompt": "a\x00b"}, "'prompt': expected .* without NUL"),
    ({"start_image": "k\x00.png"}, "'start_image': expected .* without NUL"),
    ({"start_image": "x/" * 3000}, "'start_image': expected a path of at most 4096"),
])
def test_strings_are_bounded(data: dict[str, Any], match: str) -> None:
    with pytest.raises(VideoError, match=match):
        check(data)


def test_the_limits_themselves_are_accepted() -> None:
    plan = check({"width": 4096, "height": 480, "num_frames": 1025, "steps": 1000,
                  "seed": 2**32 - 1, "noise_aug": 1.0, "fps": 240, "crf": 51})
    assert (plan.canvas.width, plan.num_frames, plan.steps, plan.seed) == (4096, 1025, 1000,
                                                                           2**32 - 1)


def test_error_messages_stay_short_for_huge_values() -> None:
    with pytest.raises(VideoError) as e:
        check({"width": 2**20000})
    assert len(str(e.value)) < 200 and "20001 bits" in str(e.value)
    with pytest.raises(VideoError) as e:
        check({"width": ["x" * 10**6] * 1000})
    assert len(str(e.value)) < 400
    with pytest.raises(VideoError) as e:
        check({f"k{i}" * 1000: 1 for i in range(5000)})
    assert str(e.value).count("\n") < 30 and "and 4980 more" in str(e.value)


def test_show_never_raises() -> None:
    class Bad:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert "Bad" in show(Bad())
    assert show(10**5000).startswith("<an integer of")


# -- one place, engine overrides ---------------------------------------------------------


def test_overrides_are_checked() -> None:
    tight = DEFAULT_LIMITS.with_overrides({"max_frames": 21, "max_fps": 30}, source="t")
    assert (tight.max_frames, tight.max_fps) == (21, 30.0)
    with pytest.raises(VideoError, match="num_frames: 22 frames"):
        check({"num_frames": 20}, limits=tight)
    with pytest.raises(VideoError, match="did you mean 'max_frames'"):
        DEFAULT_LIMITS.with_overrides({"max_frame": 3}, source="t")
    for bad in (0, -1, 1.5, math.nan, True, "3"):
        with pytest.raises(VideoError, match="max_steps must be a positive integer"):
            DEFAULT_LIMITS.with_overrides({"max_steps": bad}, source="t")
    with pytest.raises(VideoError, match="max_fps must be a positive number"):
        DEFAULT_LIMITS.with_overrides({"max_fps": math.inf}, source="t")


def test_engine_limits_come_from_the_registered_engine() -> None:
    from harness.engine import hookspec
    from harness.engine.registry import EngineImpl

    impl = pluggy.HookimplMarker("harness")

    class Plugin:
        @impl
        def harness_engine_register(self) -> list[EngineImpl]:
            return [EngineImpl(name="wide-seeds", video_limits={"max_seed": 2**63 - 1}), EngineImpl(name="other")]

    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    pm.register(Plugin())
    assert engine_limits("wide-seeds", pm).max_seed == 2**63 - 1
    assert engine_limits("other", pm) == DEFAULT_LIMITS
    # the built-in stable-diffusion.cpp plugin takes int64 seeds
    assert engine_limits("sdcpp").max_seed == 2**63 - 1
    assert engine_limits("no-such-engine") == DEFAULT_LIMITS


# -- through the CLI ------------------------------------------------------------------------


@pytest.mark.parametrize("data", [
    {"num_frames": 10**9}, {"num_frames": 10**30}, {"width": 100_000}, {"seed": 2**80},
    {"width": 100_000, "height": 100_000, "num_frames": 100_016, "steps": 10**6},
])
@pytest.mark.usefixtures("fake_video_engine")
def test_cli_check_refuses(tmp_path: Path, data: dict[str, Any],
                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text(
        "backend: fake\noptions:\n" + "".join(f"  - {k}:{v}\n" for k, v in OPTIONS.items()))
    (tmp_path / "r.json").write_text(json.dumps({"prompt": "p", **data}))
    code = harness.cli.main(["video", "check", str(tmp_path / "c.yaml"), str(tmp_path / "r.json")])
    assert code == VideoError.exit_code
    assert "VideoError" in capsys.readouterr().err
