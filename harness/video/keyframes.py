"""Keyframes: PNG/JPEG (path or data: URL) -> binary PPM (P6) at exactly the canvas.

The engine embeds no image codec and no scaler, so it takes raw RGB at the
resolution it will render. The image's size is read here without decoding
(PNG IHDR, JPEG SOF) so the canvas can be resolved from the keyframe's aspect
ratio before anything is scaled.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
import subprocess
from pathlib import Path
from urllib.parse import unquote_to_bytes

from harness.errors import SubprocessError, VideoError
from harness.video.ffmpeg import Ffmpeg
from harness.video.geometry import Canvas

_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?),(?P<data>.*)$",
                       re.DOTALL)
_MIME_KIND = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg"}
#: JPEG start-of-frame markers that carry the size (C4, C8 and CC are not frames).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def decode_data_url(url: str, what: str) -> tuple[str, bytes]:
    """(kind, bytes) of a ``data:image/png|jpeg[;base64],...`` URL."""
    m = _DATA_URL.match(url)
    if m is None:
        msg = f"{what}: malformed data: URL (expected data:image/png;base64,...)"
        raise VideoError(msg)
    mime = (m["mime"] or "").lower()
    if mime not in _MIME_KIND:
        msg = f"{what}: data URL type {mime or 'missing'!r}; expected image/png or image/jpeg"
        raise VideoError(msg)
    payload = m["data"]
    try:
        if ";base64" in m["params"].lower():
            data = base64.b64decode(payload, validate=False)
        else:
            data = unquote_to_bytes(payload)
    except (binascii.Error, ValueError) as e:
        msg = f"{what}: data URL payload does not decode: {e}"
        raise VideoError(msg) from e
    return _MIME_KIND[mime], data


def image_size(data: bytes, what: str) -> tuple[str, int, int]:
    """(kind, width, height) from PNG or JPEG bytes, by their magic, not their name."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return "png", w, h
    if data[:3] == b"\xff\xd8\xff":
        i = 2
        while i + 4 <= len(data):
            if data[i] != 0xFF:
                break
            marker = data[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            (length,) = struct.unpack(">H", data[i + 2:i + 4])
            if marker in _SOF and i + 9 <= len(data):
                h, w = struct.unpack(">HH", data[i + 5:i + 9])
                return "jpeg", w, h
            i += 2 + length
        msg = f"{what}: JPEG without a readable frame header"
        raise VideoError(msg)
    msg = f"{what}: not a PNG or JPEG image (keyframes must be PNG or JPEG)"
    raise VideoError(msg)


def read_keyframe(value: str, what: str, base_dir: Path) -> tuple[bytes, int, int]:
    """The keyframe's bytes and size, from a path or a data URL."""
    if value.startswith("data:"):
        _, data = decode_data_url(value, what)
    else:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            data = path.read_bytes()
        except OSError as e:
            msg = f"{what}: cannot read {path}: {e.strerror}"
            raise VideoError(msg) from e
    _, w, h = image_size(data, what)
    return data, w, h


def read_ppm_header(path: Path) -> tuple[int, int, int, int]:
    """(width, height, maxval, header length) of a binary PPM; raises on anything else."""
    with path.open("rb") as f:
        head = f.read(512)
    if head[:2] != b"P6":
        msg = f"{path}: not a binary PPM (P6); found magic {head[:2]!r}"
        raise VideoError(msg)
    values: list[int] = []
    i = 2
    while len(values) < 3:
        while i < len(head) and head[i:i + 1].isspace():
            i += 1
        if head[i:i + 1] == b"#":  # comment to end of line
            while i < len(head) and head[i:i + 1] not in (b"\n", b"\r"):
                i += 1
            continue
        start = i
        while i < len(head) and head[i:i + 1].isdigit():
            i += 1
        if start == i:
            msg = f"{path}: malformed PPM header"
            raise VideoError(msg)
        values.append(int(head[start:i]))
    if i >= len(head) or not head[i:i + 1].isspace():
        msg = f"{path}: malformed PPM header (no separator before the pixels)"
        raise VideoError(msg)
    return values[0], values[1], values[2], i + 1


def verify_ppm(path: Path, width: int, height: int) -> None:
    """Check a P6 PPM is 8-bit RGB at exactly ``width`` x ``height`` and complete."""
    w, h, maxval, header = read_ppm_header(path)
    if (w, h) != (width, height) or maxval != 255:
        msg = f"{path}: expected an 8-bit {width}x{height} PPM, found {w}x{h} maxval {maxval}"
        raise VideoError(msg)
    size = path.stat().st_size
    if size != header + width * height * 3:
        msg = f"{path}: expected {header + width * height * 3} bytes, found {size}"
        raise VideoError(msg)


def convert_keyframe(ffmpeg: Ffmpeg, data: bytes, canvas: Canvas, dest: Path) -> Path:
    """Write ``data`` (PNG/JPEG) as a P6 PPM at exactly the canvas, covering and centre-cropping.

    Cover-and-crop keeps the image undistorted when its aspect ratio differs
    slightly from the grid-truncated canvas.
    """
    kind, _, _ = image_size(data, str(dest))
    src = dest.with_suffix(".png" if kind == "png" else ".jpg")
    dest.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(data)
    w, h = canvas.width, canvas.height
    argv = [ffmpeg.path, "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-i", str(src),
            "-vf", f"scale={w}:{h}:force_original_aspect_ratio=increase:flags=lanczos,"
                   f"crop={w}:{h},setsar=1",
            "-frames:v", "1", "-pix_fmt", "rgb24", "-c:v", "ppm", "-f", "image2", str(dest)]
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          check=False)
    if proc.returncode != 0:
        raise SubprocessError(argv, proc.returncode, proc.stdout + proc.stderr,
                              hint="ffmpeg could not convert the keyframe; is the image valid?")
    verify_ppm(dest, w, h)
    return dest
