"""Request whitelist, types, warnings, and partition-vs-conditioning rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.errors import VideoError
from harness.video.partition import check_partition, resolve_partition
from harness.video.request import ALLOWED_KEYS, VideoRequest, parse_request, resolve_paths


def parse(**data: Any) -> tuple[VideoRequest, list[str]]:
    data.setdefault("prompt", "a cat")
    return parse_request(data, native_fps=24.0)


def test_every_allowed_key_is_accepted() -> None:
    req, warnings = parse(start_image="a.png", end_image="b.png", audio="a.wav", width=640,
                          height=480, num_frames=22, steps=4, seed=7, noise_aug=0.1,
                          ref_image="r.png", ref_video="r.mp4", crf=20)
    assert warnings == []
    assert set(req.given()) == set(ALLOWED_KEYS)
    assert req.noise_aug == 0.1 and isinstance(req.noise_aug, float)


def test_noise_aug_accepts_an_int() -> None:
    req, _ = parse(noise_aug=1)
    assert req.noise_aug == 1.0


def test_unknown_key_is_a_hard_error_with_did_you_mean() -> None:
    with pytest.raises(VideoError) as e:
        parse(start_imgae="a.png", bogus=1)
    text = str(e.value)
    assert "'start_imgae' (did you mean 'start_image'?)" in text
    assert "'bogus'" in text
    assert "allowed keys: prompt, start_image" in text


@pytest.mark.parametrize(("key", "value", "warning"), [
    ("negative_prompt", "blurry", "negative_prompt is ignored"),
    ("cfg_scale", 7.5, "cfg_scale is ignored"),
    ("fps", 30, "fps=30 is ignored"),
])
def test_unsupported_knobs_warn(key: str, value: Any, warning: str) -> None:
    req, warnings = parse(**{key: value})
    assert len(warnings) == 1 and warning in warnings[0]
    assert key not in req.given()


def test_native_fps_is_silent() -> None:
    assert parse(fps=24)[1] == []
    assert parse(fps=24.0)[1] == []


@pytest.mark.parametrize(("key", "value"), [
    ("prompt", ""), ("prompt", 3), ("prompt", None),
    ("width", 0), ("width", "640"), ("width", True), ("height", 1.5), ("num_frames", -1),
    ("steps", 0), ("seed", -1), ("seed", "1"), ("noise_aug", "0.1"), ("noise_aug", True),
    ("noise_aug", -0.5), ("noise_aug", float("nan")), ("crf", 52), ("crf", 18.0), ("crf", -1),
    ("start_image", 5), ("ref_video", ""), ("fps", "fast"), ("fps", 0),
])
def test_wrong_types_are_refused(key: str, value: Any) -> None:
    with pytest.raises(VideoError, match=f"'{key}'"):
        parse_request({"prompt": "x", key: value}, native_fps=24.0)


def test_request_must_be_an_object() -> None:
    with pytest.raises(VideoError, match="JSON object"):
        parse_request(["prompt"], native_fps=24.0)  # type: ignore[arg-type]


def test_paths_resolve_and_must_exist(tmp_path: Path) -> None:
    (tmp_path / "ref.png").write_bytes(b"x")
    req, _ = parse(ref_image="ref.png", start_image="data:image/png;base64,AAAA")
    assert resolve_paths(req, tmp_path) == {"ref_image": tmp_path / "ref.png"}
    req, _ = parse(audio="missing.wav")
    with pytest.raises(VideoError, match="'audio': file not found"):
        resolve_paths(req, tmp_path)


# -- partition vs conditioning -------------------------------------------------


def test_undeclared_partition_assumes_fl2va_and_warns() -> None:
    partition, warnings = resolve_partition(None)
    assert partition == "fl2va"
    assert "assuming fl2va" in warnings[0]


@pytest.mark.parametrize(("declared", "effective"), [
    ("fl2va", "fl2va"), ("t2va", "fl2va"), ("ref2va", "ref2va"), ("FL2VA", "fl2va"),
])
def test_declared_partitions(declared: str, effective: str) -> None:
    assert resolve_partition(declared) == (effective, [])


def test_unknown_partition() -> None:
    with pytest.raises(VideoError, match="did you mean 'ref2va'"):
        resolve_partition("ref2v")


@pytest.mark.parametrize("declared", ["fl2va", "t2va", None])
@pytest.mark.parametrize("key", ["ref_image", "ref_video", "audio"])
def test_fl2va_refuses_reference_conditioning(declared: str | None, key: str) -> None:
    req, _ = parse(**{key: "x"})
    with pytest.raises(VideoError) as e:
        check_partition(declared, req)
    assert key in str(e.value)
    assert "use start_image" in str(e.value).lower()


@pytest.mark.parametrize("key", ["start_image", "end_image"])
def test_ref2va_refuses_keyframes(key: str) -> None:
    req, _ = parse(**{key: "k.png"})
    with pytest.raises(VideoError, match=f"cannot take keyframes \\({key}\\)"):
        check_partition("ref2va", req)


@pytest.mark.parametrize(("declared", "data", "warned"), [
    ("fl2va", {"start_image": "a.png", "end_image": "b.png"}, False),
    (None, {"start_image": "a.png"}, True),
    ("t2va", {}, False),
    ("ref2va", {"ref_image": "r.png", "ref_video": "r.mp4", "audio": "a.wav"}, False),
])
def test_allowed_combinations(declared: str | None, data: dict[str, Any], warned: bool) -> None:
    req, _ = parse(**data)
    _, warnings = check_partition(declared, req)
    assert bool(warnings) == warned
