"""Keyframes: PNG/JPEG (path or data: URL) -> binary PPM (P6) at exactly the canvas.

The engine embeds no image codec and no scaler, so it takes raw RGB at the
resolution it will render. The image's size is read here without decoding
(PNG IHDR, JPEG SOF) so the canvas can be resolved from the keyframe's aspect
ratio before anything is scaled. Paths are confined to the media directory
(:mod:`harness.video.media`); sizes are read with a few small reads and bounded
(:class:`~harness.families.limits.VideoLimits`) before anything decodes the image.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct
import subprocess
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote_to_bytes

from harness.core.errors import SubprocessError, VideoError
from harness.core.inputs import open_input
from harness.families.limits import DEFAULT_LIMITS, VideoLimits
from harness.video.ffmpeg import Ffmpeg
from harness.video.geometry import Canvas
from harness.video.media import confine, open_regular, read_bounded

_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?),(?P<data>.*)$",
                       re.DOTALL)
_MIME_KIND = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg"}
#: JPEG start-of-frame markers that carry the size (C4, C8 and CC are not frames).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: Segment headers read while looking for a JPEG's frame header (real files need a few).
_JPEG_STEPS = 512


def decode_data_url(url: str, what: str, limits: VideoLimits = DEFAULT_LIMITS) -> tuple[str, bytes]:
    """(kind, bytes) of a ``data:image/png|jpeg[;base64],...`` URL, at most ``max_image_bytes``."""
    # base64 is 4 characters per 3 bytes; the slack covers the header and line breaks.
    if len(url) > limits.max_image_bytes * 4 // 3 + 4096:
        msg = f"{what}: data URL of {len(url)} characters, above the {limits.max_image_bytes}-byte image limit"
        raise VideoError(msg)
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
    if len(data) > limits.max_image_bytes:
        msg = f"{what}: data URL image of {len(data)} bytes, above the {limits.max_image_bytes}-byte limit"
        raise VideoError(msg)
    return _MIME_KIND[mime], data


def probe_image(f: BinaryIO, what: str) -> tuple[str, int, int]:
    """(kind, width, height) of an open PNG or JPEG, by its magic, from bounded header reads.

    PNG: the IHDR at byte 16. JPEG: segment headers are read and skipped by seeking
    until a start-of-frame, at most ``_JPEG_STEPS`` of them, so a large or hostile
    file costs a few small reads, never the whole file.
    """
    head = f.read(24)
    if head[:8] == _PNG_MAGIC and head[12:16] == b"IHDR" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return "png", w, h
    if head[:3] == b"\xff\xd8\xff":
        pos = 2
        for _ in range(_JPEG_STEPS):
            f.seek(pos)
            seg = f.read(4)
            if len(seg) < 2 or seg[0] != 0xFF:
                break
            marker = seg[1]
            if marker == 0xFF:  # fill byte
                pos += 1
                continue
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                pos += 2
                continue
            if len(seg) < 4:
                break
            (length,) = struct.unpack(">H", seg[2:4])
            if marker in _SOF:
                sof = f.read(5)  # precision, height, width
                if len(sof) == 5:
                    h, w = struct.unpack(">HH", sof[1:5])
                    return "jpeg", w, h
                break
            if length < 2:
                break
            pos += 2 + length
        msg = f"{what}: JPEG without a readable frame header"
        raise VideoError(msg)
    msg = f"{what}: not a PNG or JPEG image (keyframes must be PNG or JPEG)"
    raise VideoError(msg)


def image_size(data: bytes, what: str) -> tuple[str, int, int]:
    """(kind, width, height) from PNG or JPEG bytes, by their magic, not their name."""
    return probe_image(io.BytesIO(data), what)


def check_image_size(width: int, height: int, what: str,
                     limits: VideoLimits = DEFAULT_LIMITS) -> None:
    """Refuse an image whose header claims a size nothing should decode."""
    side = limits.max_image_side
    if not (1 <= width <= side and 1 <= height <= side) or width * height > limits.max_image_pixels:
        msg = (f"{what}: the image header claims {width}x{height}; keyframes must be 1..{side} "
               f"pixels a side and at most {limits.max_image_pixels} pixels in all")
        raise VideoError(msg)


def _from_path(value: str, what: str, root: Path, limits: VideoLimits,
               whole: bool) -> tuple[bytes | None, int, int]:
    path = confine(value, what, root, limits)
    with open_regular(path, what, max_bytes=limits.max_image_bytes) as (f, size):
        try:
            _, w, h = probe_image(f, what)
            check_image_size(w, h, what, limits)
            if not whole:
                return None, w, h
            f.seek(0)
            data = read_bounded(f, size, limits.max_image_bytes, what)
        except OSError as e:
            msg = f"{what}: cannot read {path}: {e.strerror}"
            raise VideoError(msg) from e
    return data, w, h


def probe_keyframe(value: str, what: str, root: Path,
                   limits: VideoLimits = DEFAULT_LIMITS) -> tuple[int, int]:
    """The keyframe's size from its header (path or data URL); the file is not read whole.

    :param root: the media directory; a path must resolve inside it.
    """
    if value.startswith("data:"):
        _, data = decode_data_url(value, what, limits)
        _, w, h = image_size(data, what)
        check_image_size(w, h, what, limits)
        return w, h
    _, w, h = _from_path(value, what, root, limits, whole=False)
    return w, h


def read_keyframe(value: str, what: str, root: Path,
                  limits: VideoLimits = DEFAULT_LIMITS) -> tuple[bytes, int, int]:
    """The keyframe's bytes and size, from a path (confined to ``root``) or a data URL."""
    if value.startswith("data:"):
        _, data = decode_data_url(value, what, limits)
        _, w, h = image_size(data, what)
        check_image_size(w, h, what, limits)
        return data, w, h
    raw, w, h = _from_path(value, what, root, limits, whole=True)
    assert raw is not None
    return raw, w, h


def read_ppm_header(path: Path) -> tuple[int, int, int, int]:
    """(width, height, maxval, header length) of a binary PPM; raises on anything else."""
    with open_input(path, kind="media-header", error=VideoError, head=True) as f:
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


def convert_keyframe(ffmpeg: Ffmpeg, data: bytes, canvas: Canvas, dest: Path,
                     limits: VideoLimits = DEFAULT_LIMITS) -> Path:
    """Write ``data`` (PNG/JPEG) as a P6 PPM at exactly the canvas, covering and centre-cropping.

    Cover-and-crop keeps the image undistorted when its aspect ratio differs
    slightly from the grid-truncated canvas. The size in the header is bounded
    before ffmpeg decodes anything.
    """
    kind, w, h = image_size(data, str(dest))
    check_image_size(w, h, str(dest), limits)
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
