"""Request paths are confined to the media directory; files are vetted and read in bounded pieces.

Regression tests for issue 15, finding 5: ``start_image: ../../etc/passwd`` and
``/etc/shadow`` were opened, a PNG anywhere on disk was accepted through ``../``,
"file not found" vs "not a PNG" told a caller which paths exist, and a 3 GB
sparse ``big.png`` took 16 s and 3.2 GB to read a header.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import harness.cli
from harness.core.errors import VideoError
from harness.video.ffmpeg import Ffmpeg
from harness.video.job import VideoPlan
from harness.video.pipeline import VideoPipeline
from harness.video.target import resolve_target

from .pngs import png, png_header

#: Never run: VideoPipeline.check needs no ffmpeg, only the object.
FF = Ffmpeg(path="ffmpeg", source="test", version="test", encoders=frozenset())
OPTIONS = {"video_partition": "fl2va", "video_width": "64", "video_height": "32",
           "video_num_frames": "5", "video_steps": "2"}
CONFIG = "backend: fake\noptions:\n" + "".join(f"  - {k}:{v}\n" for k, v in OPTIONS.items())


def check(data: dict[str, Any], root: Path, **options: str) -> VideoPlan:
    target = resolve_target("fake", {**OPTIONS, **options})
    return VideoPipeline(target, ffmpeg=FF).check({"prompt": "p", **data}, base_dir=root)


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """media/ (the root, with a keyframe) beside outside/ (a PNG and a secret)."""
    media, outside = tmp_path / "media", tmp_path / "outside"
    media.mkdir()
    outside.mkdir()
    (media / "k.png").write_bytes(png(40, 20))
    (media / "sub").mkdir()
    (outside / "secret.png").write_bytes(png(40, 20))
    (outside / "secret.txt").write_text("not an image")
    return {"media": media, "outside": outside}


def _outside_text(e: pytest.ExceptionInfo[VideoError], value: str) -> str:
    return str(e.value).replace(repr(value), "VALUE")


# -- confinement ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    "../outside/secret.png",        # a valid PNG outside: was accepted
    "../outside/secret.txt",        # exists, not an image: was "not a PNG or JPEG"
    "../outside/missing.png",       # does not exist: was "file not found"
    "../../../../../../etc/passwd",
    "/etc/shadow",
    "/etc/no-such-file-here",
    "sub/../../outside/secret.png",
])
@pytest.mark.parametrize("key", ["start_image", "end_image"])
def test_paths_outside_the_media_dir_get_one_message(tree: dict[str, Path], key: str,
                                                     value: str) -> None:
    with pytest.raises(VideoError) as e:
        check({key: value}, tree["media"])
    assert _outside_text(e, value) == (
        f"request key {key!r}: VALUE is outside the media directory {tree['media']}; request "
        "paths must resolve inside it (symlinks are followed first). Pass --media-dir DIR to "
        "allow another directory.")


def test_outside_message_does_not_depend_on_existence(tree: dict[str, Path]) -> None:
    texts = set()
    for name in ("secret.png", "secret.txt", "missing.png"):
        value = f"../outside/{name}"
        with pytest.raises(VideoError) as e:
            check({"start_image": value}, tree["media"])
        texts.add(_outside_text(e, value))
    assert len(texts) == 1


@pytest.mark.parametrize("key", ["ref_image", "ref_video", "audio"])
def test_reference_paths_are_confined_too(tree: dict[str, Path], key: str) -> None:
    with pytest.raises(VideoError, match="outside the media directory"):
        check({key: "/etc/passwd"}, tree["media"], video_partition="ref2va")


def test_symlink_out_of_the_media_dir_is_refused(tree: dict[str, Path]) -> None:
    (tree["media"] / "link.png").symlink_to(tree["outside"] / "secret.png")
    (tree["media"] / "dangling.png").symlink_to(tree["outside"] / "missing.png")
    (tree["media"] / "linkdir").symlink_to(tree["outside"])
    for value in ("link.png", "dangling.png", "linkdir/secret.png"):
        with pytest.raises(VideoError) as e:
            check({"start_image": value}, tree["media"])
        assert "outside the media directory" in str(e.value)


def test_symlink_within_the_media_dir_and_absolute_paths_inside_are_fine(
        tree: dict[str, Path]) -> None:
    (tree["media"] / "sub" / "alias.png").symlink_to(tree["media"] / "k.png")
    plan = check({"start_image": "sub/alias.png"}, tree["media"])
    assert plan.inputs["start_image"] == tree["media"] / "k.png"
    plan = check({"start_image": str(tree["media"] / "k.png")}, tree["media"])
    assert (plan.canvas.width, plan.canvas.height) == (1536, 768)


def test_a_symlinked_media_dir_works(tree: dict[str, Path], tmp_path: Path) -> None:
    link = tmp_path / "media-link"
    link.symlink_to(tree["media"])
    assert check({"start_image": "k.png"}, link).inputs["start_image"] == tree["media"] / "k.png"


def test_missing_file_inside_may_say_so(tree: dict[str, Path]) -> None:
    with pytest.raises(VideoError, match="'start_image': file not found"):
        check({"start_image": "nope.png"}, tree["media"])


# -- regular files only ----------------------------------------------------------------


def test_a_directory_is_refused(tree: dict[str, Path]) -> None:
    with pytest.raises(VideoError, match=r"'start_image': .* is a directory; expected a regular file"):
        check({"start_image": "sub"}, tree["media"])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("key", ["start_image", "ref_video"])
def test_a_fifo_is_refused_without_blocking(tree: dict[str, Path], key: str) -> None:
    fifo = tree["media"] / "k.fifo"
    os.mkfifo(fifo)
    partition = "ref2va" if key == "ref_video" else "fl2va"
    box: dict[str, BaseException] = {}

    def go() -> None:
        try:
            check({key: "k.fifo"}, tree["media"], video_partition=partition)
        except BaseException as e:
            box["e"] = e

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():  # blocked in open(): release it before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("check blocked on a FIFO")
    assert isinstance(box.get("e"), VideoError)
    assert "is a FIFO; expected a regular file" in str(box["e"])


# -- bounded reads ----------------------------------------------------------------------


def test_a_large_keyframe_is_probed_by_its_header_only(tree: dict[str, Path]) -> None:
    # 48 MiB: under the file limit, so only the header read keeps memory flat.
    (tree["media"] / "big.png").write_bytes(png_header(320, 200) + bytes(48 * 2**20))
    tracemalloc.start()
    try:
        plan = check({"start_image": "big.png"}, tree["media"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (plan.canvas.width, plan.canvas.height) == (1216, 768)
    assert peak < 4 * 2**20, f"peak {peak} bytes while probing a header"


def test_a_3gb_sparse_png_is_refused_at_once(tree: dict[str, Path]) -> None:
    big = tree["media"] / "big.png"
    big.write_bytes(png_header(64, 64))
    os.truncate(big, 3 * 2**30)
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(VideoError, match=r"'start_image': .* is 3221225472 bytes, above the"):
            check({"start_image": "big.png"}, tree["media"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - t0 < 10  # a hang guard: refusing reads nothing (peak memory below)
    assert peak < 4 * 2**20


def test_jpeg_segments_are_skipped_by_seeking(tree: dict[str, Path]) -> None:
    from harness.video.keyframes import probe_image

    # Three 64 KiB APP segments before the frame header, then a 40 MiB tail.
    app = b"\xff\xe1\xff\xff" + bytes(0xFFFF - 2)
    sof = b"\xff\xc0\x00\x11\x08" + struct.pack(">HH", 180, 320) + b"\x03" + bytes(9)
    (tree["media"] / "k.jpg").write_bytes(b"\xff\xd8" + app * 3 + sof + bytes(40 * 2**20))
    with (tree["media"] / "k.jpg").open("rb") as f:
        assert probe_image(f, "k") == ("jpeg", 320, 180)
    tracemalloc.start()
    try:
        plan = check({"start_image": "k.jpg"}, tree["media"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (plan.canvas.width, plan.canvas.height) == (1344, 768)
    assert peak < 4 * 2**20


def test_a_jpeg_of_endless_segments_stops(tree: dict[str, Path]) -> None:
    (tree["media"] / "k.jpg").write_bytes(b"\xff\xd8" + b"\xff\xe1\x00\x02" * 100_000)
    with pytest.raises(VideoError, match="JPEG without a readable frame header"):
        check({"start_image": "k.jpg"}, tree["media"])


# -- through the CLI, with --media-dir -------------------------------------------------


@pytest.fixture
def cli(tmp_path: Path, tree: dict[str, Path], fake_video_engine: object) -> Path:
    (tmp_path / "h3.yaml").write_text(CONFIG)
    return tmp_path / "h3.yaml"


def _check_cli(config: Path, request: Path, data: dict[str, Any], *extra: str) -> int:
    request.write_text(json.dumps({"prompt": "p", **data}))
    return harness.cli.main(["video", "check", str(config), str(request), *extra])


@pytest.mark.parametrize("value", ["../../etc/passwd", "/etc/shadow", "../outside/secret.png"])
def test_cli_check_refuses_paths_outside(cli: Path, tree: dict[str, Path], value: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    code = _check_cli(cli, tree["media"] / "req.json", {"start_image": value})
    assert time.monotonic() - t0 < 10  # a hang guard: the path is refused before anything is read
    assert code == VideoError.exit_code
    assert "outside the media directory" in capsys.readouterr().err


def test_cli_media_dir_widens_and_narrows_the_root(cli: Path, tree: dict[str, Path],
                                                   tmp_path: Path) -> None:
    reqs = tmp_path / "reqs"
    reqs.mkdir()
    # Relative paths resolve against --media-dir, not the request's directory.
    assert _check_cli(cli, reqs / "r.json", {"start_image": "secret.png"},
                      "--media-dir", str(tree["outside"]), "--json") == 0
    assert _check_cli(cli, reqs / "r.json", {"start_image": str(tree["media"] / "k.png")},
                      "--media-dir", str(tree["outside"])) == VideoError.exit_code
    assert _check_cli(cli, reqs / "r.json", {"start_image": "k.png"},
                      "--media-dir", str(tmp_path / "nope")) == 2


def test_generate_refuses_outside_paths_before_rendering(cli: Path, tree: dict[str, Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.core import crash
    from harness.video import pipeline as video_pipeline

    monkeypatch.setattr(crash, "supervise", lambda *a, **k: None)
    monkeypatch.setattr(video_pipeline, "VideoPipeline",
                        lambda *a, **k: VideoPipeline(*a, **{**k, "ffmpeg": FF}))
    monkeypatch.chdir(tree["media"])
    code = harness.cli.main(["video", "generate", str(cli), "--prompt", "p",
                             "--start-image", "../outside/secret.png", "-o", "x.mp4"])
    assert code == VideoError.exit_code
    assert not (tree["media"] / "x.mp4").exists()


def test_a_file_that_grows_after_its_check_is_not_read_on() -> None:
    import io

    from harness.video.media import read_bounded

    assert read_bounded(io.BytesIO(b"abc"), 3, 10, "k") == b"abc"
    with pytest.raises(VideoError, match="grew while it was being read"):
        read_bounded(io.BytesIO(b"abcdef"), 3, 10, "k")
