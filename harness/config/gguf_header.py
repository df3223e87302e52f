"""A GGUF file's header (metadata and tensor table), read within limits before anything is allocated.

The ``gguf`` package's reader maps the whole file and builds one numpy array per element of
every array it meets: a 68-byte file that claims a 2^40-element array costs it about a minute
and then a MemoryError, and a string length of 2^62 reads as an empty string. Here every count
and length is checked against the bytes the file has left (and :data:`harness.core.inputs.LIMITS`'s
``gguf-header``) before it is read or skipped, so a hostile header costs a few small reads and
ends in a :class:`~harness.core.errors.ModelError` naming the field and the limit.

The format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): ``GGUF``, version u32,
tensor count u64, key/value count u64; each key a string (u64 length + UTF-8 bytes), a value
type u32 and the value (an array is an element type u32, a count u64 and the elements); then
per tensor its name, n_dims u32, n_dims u64 dimensions, a ggml type u32 and a data offset u64,
relative to the aligned start of the data section. Versions 2 and 3, either byte order (a
big-endian file reads as a version with zero low bits), as the ``gguf`` reader takes them.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from harness.core.errors import ModelError
from harness.core.inputs import limit, open_input

MAGIC = b"GGUF"
VERSIONS = (2, 3)
#: Keys in one header (real models carry tens; a few hundred with per-layer arrays).
MAX_KEYS = 65_536
#: Tensors in one file (the largest models carry a few thousand).
MAX_TENSORS = 1 << 20
#: Elements in one array (vocabularies and merge lists are below 10^6).
MAX_ARRAY = 1 << 24
#: Bytes in a key or a tensor name (the format's own bound for keys).
MAX_NAME = 65_535
#: ggml's GGML_MAX_DIMS.
MAX_DIMS = 4
#: Arrays of arrays, nested (real files nest none).
MAX_NESTING = 4
DEFAULT_ALIGNMENT = 32

_STRING, _ARRAY = 8, 9
#: struct codes of the scalar value types, by GGUF type number.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


@dataclass(frozen=True, kw_only=True)
class GgufHeader:
    """What the header says: its version, counts, and the scalar and string metadata values."""

    version: int
    tensor_count: int
    kv_count: int
    metadata: Mapping[str, Any]
    """Scalars and strings by key (arrays are walked and left out; a value that is not UTF-8 too)."""
    data_offset: int
    """Where the tensor data starts (the header's end, aligned)."""
    data_bytes: int
    """How far the tensor table says the data section reaches."""

    def as_dict(self) -> dict[str, Any]:
        """The metadata with the ``GGUF.*`` counts, keyed as the ``gguf`` package names them."""
        return {"GGUF.version": self.version, "GGUF.tensor_count": self.tensor_count,
                "GGUF.kv_count": self.kv_count, **self.metadata}


class _Cursor:
    """Reads the header front to back; every read is checked against what the file has left."""

    def __init__(self, f: BinaryIO, path: Path, size: int, cap: int) -> None:
        self.f, self.path, self.size, self.cap = f, path, size, cap
        self.pos = 0
        self.order = "<"

    def fail(self, what: str) -> ModelError:
        return ModelError(f"{self.path.name} is not a readable GGUF file: {what}")

    def room(self, n: int, what: str) -> None:
        """Refuse to read ``n`` more bytes that the file (or the header limit) does not have."""
        if self.pos + n > self.size:
            msg = (f"{what} needs {n} bytes at offset {self.pos}, but the file ends at {self.size} "
                   "(truncated or corrupt)")
            raise self.fail(msg)
        if self.pos + n > self.cap:
            msg = (f"{what} at offset {self.pos} reaches past the limit of {self.cap} bytes for a "
                   "GGUF header (the metadata and tensor table)")
            raise self.fail(msg)

    def take(self, n: int, what: str) -> bytes:
        self.room(n, what)
        data = self.f.read(n)
        if len(data) != n:  # the file shrank under us
            raise self.fail(f"{what}: the file ends at offset {self.pos + len(data)}")
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        self.room(n, what)
        self.f.seek(n, io.SEEK_CUR)
        self.pos += n

    def scalar(self, code: str, what: str) -> Any:
        return struct.unpack(self.order + code, self.take(struct.calcsize(code), what))[0]

    def u32(self, what: str) -> int:
        return int(self.scalar("I", what))

    def u64(self, what: str) -> int:
        return int(self.scalar("Q", what))

    def string(self, what: str, max_bytes: int | None = None) -> bytes:
        n = self.u64(f"{what}'s length")
        if max_bytes is not None and n > max_bytes:
            raise self.fail(f"{what} is {n} bytes long, above the limit of {max_bytes}")
        return self.take(n, f"{what} ({n} bytes)")

    def skip_strings(self, n: int, what: str) -> None:
        """Walk ``n`` strings without keeping them (a vocabulary: this loop is the header's cost)."""
        unpack, read, seek = struct.Struct(self.order + "Q").unpack, self.f.read, self.f.seek
        end = min(self.size, self.cap)
        for _ in range(n):
            if self.pos + 8 > end:
                self.room(8, f"a string's length in {what}")
            head = read(8)
            if len(head) != 8:
                raise self.fail(f"{what}: the file ends at offset {self.pos + len(head)}")
            (length,) = unpack(head)
            self.pos += 8
            if self.pos + length > end:
                self.room(length, f"a string in {what}")
            seek(length, io.SEEK_CUR)
            self.pos += length

    def count(self, n: int, each: int, most: int, what: str) -> None:
        """A count of items at least ``each`` bytes apiece: within ``most`` and the bytes left."""
        if n > most:
            raise self.fail(f"{what} is {n}, above the limit of {most}")
        self.room(n * each, f"{what} {n} (at least {each} bytes each)")


def _value(c: _Cursor, vtype: int, key: str, depth: int = 0) -> Any:
    """The value of ``vtype`` at the cursor; arrays are walked or skipped and come back as None."""
    code = _SCALARS.get(vtype)
    if code is not None:
        return c.scalar(code, f"the value of {key!r}")
    if vtype == _STRING:
        raw = c.string(f"the value of {key!r}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if vtype == _ARRAY:
        if depth >= MAX_NESTING:
            raise c.fail(f"{key!r} nests arrays deeper than {MAX_NESTING} levels")
        etype = c.u32(f"the element type of {key!r}")
        n = c.u64(f"the length of {key!r}")
        ecode = _SCALARS.get(etype)
        if ecode is not None:
            size = struct.calcsize(ecode)
            c.count(n, size, MAX_ARRAY, f"the length of array {key!r}")
            c.skip(n * size, f"the elements of {key!r}")
            return None
        if etype not in (_STRING, _ARRAY):
            raise c.fail(f"{key!r} is an array of unknown type {etype}")
        c.count(n, 8 if etype == _STRING else 12, MAX_ARRAY, f"the length of array {key!r}")
        if etype == _STRING:
            c.skip_strings(n, repr(key))
        else:
            for _ in range(n):
                _value(c, etype, key, depth + 1)
        return None
    raise c.fail(f"{key!r} has unknown value type {vtype}")


def _metadata(c: _Cursor, kv_count: int) -> dict[str, Any]:
    # at least a length, an empty key, a type and a one-byte value
    c.count(kv_count, 13, MAX_KEYS, "the key count")
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for i in range(kv_count):
        raw = c.string(f"key #{i}", MAX_NAME)
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise c.fail(f"key #{i} is not UTF-8 ({raw[:40]!r})") from None
        if key in seen:
            raise c.fail(f"key {key!r} is given twice")
        seen.add(key)
        value = _value(c, c.u32(f"the type of {key!r}"), key)
        if value is not None:
            out[key] = value
    return out


def _quant_sizes() -> Mapping[int, tuple[int, int]]:
    from gguf.constants import GGML_QUANT_SIZES

    return {int(t): sizes for t, sizes in GGML_QUANT_SIZES.items()}


def _tensors(c: _Cursor, tensor_count: int) -> int:
    """Walk the tensor table; the end of the furthest tensor's data, from the data section's start."""
    c.count(tensor_count, 24, MAX_TENSORS, "the tensor count")
    sizes = _quant_sizes() if tensor_count else {}
    names: set[bytes] = set()
    end = 0
    for i in range(tensor_count):
        name = c.string(f"tensor #{i}'s name", MAX_NAME)
        label = name[:80].decode("utf-8", "replace")
        if name in names:
            raise c.fail(f"tensor {label!r} is given twice")
        names.add(name)
        n_dims = c.u32(f"tensor {label!r}'s dimension count")
        if n_dims > MAX_DIMS:
            raise c.fail(f"tensor {label!r} has {n_dims} dimensions, above ggml's {MAX_DIMS}")
        elements = 1
        for d in range(n_dims):
            elements *= c.u64(f"tensor {label!r}'s dimension {d}")
        ggml_type = c.u32(f"tensor {label!r}'s type")
        offset = c.u64(f"tensor {label!r}'s offset")
        if ggml_type not in sizes:
            raise c.fail(f"tensor {label!r} has unknown ggml type {ggml_type}")
        block, type_size = sizes[ggml_type]
        end = max(end, offset + elements // block * type_size)
    return end


def read_header(path: Path) -> GgufHeader:
    """The header of the GGUF file at ``path``, every count and length checked before it is used.

    :raises ModelError: not a regular file, not GGUF, an unsupported version, a count or length
        above its limit or past the file's end, unknown types, duplicated keys or tensors, tensor
        data reaching past the file's end.
    """
    cap = limit("gguf-header")
    with open_input(path, kind="gguf-header", error=ModelError, head=True) as f:
        size = os.fstat(f.fileno()).st_size
        c = _Cursor(f, Path(path), size, cap)
        magic = f.read(4)
        if magic != MAGIC:
            msg = f"{Path(path).name} is not a GGUF file (it starts with {magic!r}, not {MAGIC!r})"
            raise ModelError(msg)
        c.pos = 4
        version = c.u32("the version")
        if version & 0xFFFF == 0:  # written on a host of the other byte order
            c.order, version = ">", int.from_bytes(struct.pack("<I", version), "big")
        if version not in VERSIONS:
            raise c.fail(f"GGUF version {version}; versions {' and '.join(map(str, VERSIONS))} are read")
        tensor_count = c.u64("the tensor count")
        kv_count = c.u64("the key count")
        metadata = _metadata(c, kv_count)
        data_bytes = _tensors(c, tensor_count)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise c.fail(f"general.alignment {alignment!r} is not a power of two")
    data_offset = -(-c.pos // alignment) * alignment
    if data_offset + data_bytes > size:
        msg = (f"its tensors reach to byte {data_offset + data_bytes}, but the file ends at {size} "
               "(truncated)")
        raise c.fail(msg)
    return GgufHeader(version=version, tensor_count=tensor_count, kv_count=kv_count, metadata=metadata,
                      data_offset=data_offset, data_bytes=data_bytes)
