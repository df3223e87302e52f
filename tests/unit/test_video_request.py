"""Request whitelist, types, warnings, and partition-vs-conditioning rules."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import UsageError, VideoError
from harness.video.partition import check_partition, resolve_partition
from harness.video.request import (
    ALLOWED_KEYS,
    VideoRequest,
    load_request,
    parse_request,
    resolve_paths,
)


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


# -- request files: size, depth, encoding (issue 15, finding 8) ---------------------


CONFIG = "backend: fake\noptions:\n  - video_partition:fl2va\n  - video_width:64\n  - video_height:32\n"


def _cli_check(tmp_path: Path, text: str | bytes) -> int:
    import harness.cli

    (tmp_path / "c.yaml").write_text(CONFIG)
    req = tmp_path / "r.json"
    if isinstance(text, bytes):
        req.write_bytes(text)
    else:
        req.write_text(text, encoding="utf-8")
    return harness.cli.main(["video", "check", str(tmp_path / "c.yaml"), str(req)])


@pytest.mark.parametrize(("text", "match"), [
    ('{"prompt": "p", "cfg_scale": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 8"),
    ("[" * 100_000, "nested deeper than 8"),
    ('{"prompt": "p", "cfg_scale": ' + "[" * 9 + "]" * 9 + "}", "nested deeper than 8"),
    ('{"prompt": "p", "cfg_scale": [' + "[]," * 300 + "[]]}", "303 JSON arrays/objects, above"),
    ('{"prompt": "p", "seed": ' + "9" * 5000 + "}", "not valid JSON: Exceeds the limit"),
    ('{"prompt": "p", "prompt": "q"}', "'prompt' is given twice"),
    ('["prompt"]', "a video request is a JSON object, found list"),
    ("{", "not valid JSON"),
    ('{"prompt": "p", "width": NaN}', "request key 'width': expected an integer 1..4096, found nan"),
    ('{"prompt": "p", "noise_aug": Infinity}', "'noise_aug': expected a number 0..1, found inf"),
    ('{"prompt": "p", "noise_aug": 1e400}', "'noise_aug': expected a number 0..1, found inf"),
    ('{"prompt": "\\ud800"}', "'prompt': expected .* valid Unicode"),
])
@pytest.mark.usefixtures("fake_video_engine")
def test_bad_request_files_are_video_errors(tmp_path: Path, text: str, match: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(VideoError, match=match):
        parse_request(load_request(_write(tmp_path / "r.json", text)), native_fps=24.0)
    assert _cli_check(tmp_path, text) == VideoError.exit_code
    err = capsys.readouterr().err
    assert "error: VideoError" in err and "Traceback" not in err


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_brackets_inside_strings_do_not_count(tmp_path: Path) -> None:
    data = load_request(_write(tmp_path / "r.json", json.dumps({"prompt": "[[[[[[[[[[{{{{{{{{{{"})))
    assert data == {"prompt": "[[[[[[[[[[{{{{{{{{{{"}
    text = json.dumps({"prompt": 'a \\" [[[[[[[[[[[ "'})
    assert load_request(_write(tmp_path / "r.json", text))["prompt"] == 'a \\" [[[[[[[[[[[ "'


@pytest.mark.usefixtures("fake_video_engine")
def test_a_too_large_request_file_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "r.json"
    big.write_text('{"prompt": "' + "x" * (16 * 2**20) + '"}')
    with pytest.raises(VideoError, match=r"is 16777230 bytes, over the 16 MiB limit for a request file"):
        load_request(big)
    assert _cli_check(tmp_path, big.read_text()) == VideoError.exit_code


@pytest.mark.usefixtures("fake_video_engine")
def test_a_request_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli_check(tmp_path, b'{"prompt": "\xff"}') == VideoError.exit_code
    assert "not UTF-8" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_request_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    box: dict[str, BaseException] = {}

    def go() -> None:
        try:
            load_request(fifo)
        except BaseException as e:
            box["e"] = e

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_request blocked on a FIFO")
    assert isinstance(box.get("e"), VideoError) and "not a regular file" in str(box["e"])


def test_a_missing_request_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"request file .* does not exist"):
        load_request(tmp_path / "nope.json")
