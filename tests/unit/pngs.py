"""Small PNG files for the video tests: a header alone (what probes read) or a whole image."""

from __future__ import annotations

import struct
import zlib


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header(width: int, height: int) -> bytes:
    """The signature and IHDR of an 8-bit RGB PNG: enough for a header probe, nothing to decode."""
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))


def png(width: int, height: int, rgb: bytes = b"\x20\xc0\x40") -> bytes:
    """A whole ``width`` x ``height`` PNG of one colour."""
    raw = (b"\x00" + rgb * width) * height
    return png_header(width, height) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")
