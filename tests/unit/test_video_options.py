"""VideoOptions.from_mapping: the options: spelling, field names, coercion and typos."""

from __future__ import annotations

from typing import Any

import pytest

from harness.errors import ConfigError
from harness.video.options import VideoOptions


def test_defaults() -> None:
    o = VideoOptions.from_mapping({})
    assert (o.partition, o.width, o.height, o.num_frames, o.steps, o.fps, o.crf) == (
        None, None, None, 124, 50, 24.0, 18)


def test_options_list_spelling_with_string_values() -> None:
    o = VideoOptions.from_mapping({
        "video_partition": "fl2va", "video_device": "cuda", "video_width": "1344",
        "video_height": "768", "video_num_frames": "124", "video_steps": "30",
        "video_fps": "25", "video_crf": "20", "ffmpeg": "/usr/bin/ffmpeg",
        "video_workdir": "/tmp/w", "video_encoder": "enc.gguf", "max_num_seqs": "8",
    })
    assert o.to_dict() == {
        "family": None, "partition": "fl2va", "device": "cuda", "width": 1344, "height": 768, "num_frames": 124,
        "steps": 30, "fps": 25.0, "crf": 20, "ffmpeg": "/usr/bin/ffmpeg", "workdir": "/tmp/w"}


def test_family_is_declared_by_name() -> None:
    assert VideoOptions.from_mapping({"video_family": "wan"}).family == "wan"
    with pytest.raises(ConfigError, match="expected one of minimax-h3, wan, found 'wann'"):
        VideoOptions.from_mapping({"video_family": "wann"})


@pytest.mark.parametrize(("value", "size"), [
    ("1344x768", (1344, 768)), ("640X480", (640, 480)), ([800, 600], (800, 600)),
    ({"width": 64, "height": 32}, (64, 32)),
])
def test_canvas_forms(value: Any, size: tuple[int, int]) -> None:
    o = VideoOptions.from_mapping({"canvas": value, "frames": 22})
    assert (o.width, o.height, o.num_frames) == (*size, 22)


@pytest.mark.parametrize(("data", "match"), [
    ({"video_widht": 1}, "did you mean 'video_width'"),
    ({"video_partition": "ref2v"}, "did you mean 'ref2va'"),
    ({"video_device": "auto"}, "cpu, cuda, gpu"),
    ({"video_width": "wide"}, "expected an integer"),
    ({"video_width": True}, "expected an integer"),
    ({"video_crf": 60}, "0..51"),
    ({"video_fps": 0}, "positive number"),
    ({"video_width": 640, "width": 640}, "set the same thing"),
    ({"canvas": "1344x768", "video_width": 1344}, "both set the canvas"),
    ({"canvas": "big"}, "WIDTHxHEIGHT"),
])
def test_bad_options(data: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        VideoOptions.from_mapping(data)


def test_frozen() -> None:
    o = VideoOptions.from_mapping({})
    with pytest.raises(AttributeError):
        o.crf = 1  # type: ignore[misc]
