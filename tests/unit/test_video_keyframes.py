"""Keyframes: PNG/JPEG (path or data: URL) -> P6 PPM at exactly the canvas, with real ffmpeg."""

from __future__ import annotations

import base64
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from harness.core.errors import SubprocessError, VideoError
from harness.video.ffmpeg import Ffmpeg, resolve_ffmpeg
from harness.video.geometry import Canvas
from harness.video.keyframes import (
    convert_keyframe,
    decode_data_url,
    image_size,
    read_keyframe,
    read_ppm_header,
    verify_ppm,
)


def png_bytes(width: int, height: int, rgb: tuple[int, int, int] = (200, 40, 40)) -> bytes:
    """A valid 8-bit RGB PNG, written with the stdlib only."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    row = b"\x00" + bytes(rgb) * width
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * height))
            + chunk(b"IEND", b""))


def available_ffmpegs() -> list[str]:
    found = []
    if shutil.which("ffmpeg"):
        found.append("PATH")
    try:
        import imageio_ffmpeg  # noqa: F401
        found.append("wheel")
    except ImportError:
        pass
    return found


FFMPEG_PARAMS: list[object] = [*available_ffmpegs()] or [pytest.param("none", marks=pytest.mark.skip)]


@pytest.fixture(params=FFMPEG_PARAMS)
def ff(request: pytest.FixtureRequest) -> Ffmpeg:
    if request.param == "PATH":
        return resolve_ffmpeg(None, env={})
    return resolve_ffmpeg(None, env={}, search_path="/nonexistent")


def test_png_size_without_decoding() -> None:
    assert image_size(png_bytes(300, 200), "x") == ("png", 300, 200)


def test_jpeg_size(ff: Ffmpeg, tmp_path: Path) -> None:
    jpg = tmp_path / "k.jpg"
    subprocess.run([ff.path, "-v", "error", "-f", "lavfi", "-i", "testsrc=size=320x180",
                    "-frames:v", "1", str(jpg)], check=True)
    assert image_size(jpg.read_bytes(), "k") == ("jpeg", 320, 180)


def test_not_an_image() -> None:
    with pytest.raises(VideoError, match="not a PNG or JPEG"):
        image_size(b"GIF89a....", "start_image")


def test_data_url_base64_and_errors() -> None:
    data = png_bytes(4, 2)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    assert decode_data_url(url, "k") == ("png", data)
    with pytest.raises(VideoError, match="image/png or image/jpeg"):
        decode_data_url("data:image/gif;base64,AAAA", "k")
    with pytest.raises(VideoError, match="malformed"):
        decode_data_url("data:nothing", "k")


def test_read_keyframe_from_relative_path(tmp_path: Path) -> None:
    (tmp_path / "k.png").write_bytes(png_bytes(64, 48))
    _, w, h = read_keyframe("k.png", "start_image", tmp_path)
    assert (w, h) == (64, 48)
    with pytest.raises(VideoError, match="file not found"):  # inside the root: may say so
        read_keyframe("missing.png", "start_image", tmp_path)


@pytest.mark.parametrize("as_url", [False, True])
def test_convert_to_ppm_at_exact_canvas(ff: Ffmpeg, tmp_path: Path, as_url: bool) -> None:
    data = png_bytes(200, 100, (10, 200, 30))
    if as_url:
        _, data = decode_data_url("data:image/png;base64," + base64.b64encode(data).decode(), "k")
    canvas = Canvas(width=96, height=64, source="request")  # another aspect: cover + crop
    out = convert_keyframe(ff, data, canvas, tmp_path / "kf" / "start_image.ppm")
    w, h, maxval, header = read_ppm_header(out)
    assert (w, h, maxval) == (96, 64, 255)
    assert out.stat().st_size == header + 96 * 64 * 3
    pixels = out.read_bytes()[header:]
    r, g, b = pixels[0], pixels[1], pixels[2]
    assert g > 150 and r < 60 and b < 80  # the colour survived (no letterbox bars)


def test_convert_jpeg(ff: Ffmpeg, tmp_path: Path) -> None:
    jpg = tmp_path / "k.jpg"
    subprocess.run([ff.path, "-v", "error", "-f", "lavfi", "-i", "testsrc=size=320x180",
                    "-frames:v", "1", str(jpg)], check=True)
    out = convert_keyframe(ff, jpg.read_bytes(), Canvas(width=128, height=64, source="k"),
                           tmp_path / "end_image.ppm")
    verify_ppm(out, 128, 64)


def test_corrupt_image_is_a_subprocess_error(ff: Ffmpeg, tmp_path: Path) -> None:
    bad = png_bytes(8, 8)[:40]  # header intact, pixel data cut off
    with pytest.raises(SubprocessError, match="convert the keyframe"):
        convert_keyframe(ff, bad, Canvas(width=32, height=32, source="k"), tmp_path / "s.ppm")


def test_verify_ppm_rejects_wrong_size_and_truncation(tmp_path: Path) -> None:
    good = tmp_path / "a.ppm"
    good.write_bytes(b"P6\n# comment\n4 2\n255\n" + bytes(4 * 2 * 3))
    verify_ppm(good, 4, 2)
    with pytest.raises(VideoError, match="expected an 8-bit 8x2 PPM, found 4x2"):
        verify_ppm(good, 8, 2)
    short = tmp_path / "b.ppm"
    short.write_bytes(b"P6 4 2 255\n" + bytes(10))
    with pytest.raises(VideoError, match="bytes"):
        verify_ppm(short, 4, 2)
    ascii_ppm = tmp_path / "c.ppm"
    ascii_ppm.write_bytes(b"P3\n1 1\n255\n0 0 0\n")
    with pytest.raises(VideoError, match="not a binary PPM"):
        verify_ppm(ascii_ppm, 1, 1)
