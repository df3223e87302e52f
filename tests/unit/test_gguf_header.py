"""GGUF headers are read within limits: counts and lengths are checked before anything is allocated.

The crafted files follow the format's documentation (ggml's docs/gguf.md): ``GGUF``, version u32,
tensor count u64, key count u64, then per key a string (u64 length + bytes), a value type u32
and the value (an array: element type u32, count u64, elements).
"""

from __future__ import annotations

import os
import signal
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gguf
import numpy as np
import pytest

from harness.config.facts import gguf_facts, gguf_header
from harness.config.gguf_header import MAX_ARRAY, MAX_KEYS, read_header
from harness.core.errors import ModelError

U8, U32, STRING, ARRAY = 0, 4, 8, 9


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the body takes longer than ``seconds``."""
    def expired(*_: object) -> None:
        raise TimeoutError(f"took longer than {seconds}s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def header(*kvs: bytes, tensors: int = 0, kv_count: int | None = None, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, len(kvs) if kv_count is None else kv_count) + b"".join(kvs)


def kv(key: bytes, vtype: int, value: bytes) -> bytes:
    return s(key) + struct.pack("<I", vtype) + value


def crafted(tmp_path: Path, data: bytes, name: str = "x.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def refused(path: Path, match: str) -> None:
    """read_header refuses ``path`` fast, naming why; the config layer reports it as unreadable."""
    with deadline(5):
        t0 = time.perf_counter()
        with pytest.raises(ModelError, match=match):
            read_header(path)
        assert time.perf_counter() - t0 < 1
        facts = gguf_facts(path)
    assert facts["readable"] is False and facts["error"]


def test_an_array_of_2_to_the_40_elements_is_refused_before_it_is_walked(tmp_path: Path) -> None:
    # a few dozen bytes, as in the issue (57 s and a MemoryError through the gguf package's reader)
    data = header(kv(b"general.architecture", STRING, s(b"llama")),
                  kv(b"x", ARRAY, struct.pack("<IQ", U8, 2**40)))
    refused(crafted(tmp_path, data), rf"length of array 'x' is {2**40}, above the limit of {MAX_ARRAY}")


def test_an_array_within_the_count_limit_but_past_the_file_end(tmp_path: Path) -> None:
    refused(crafted(tmp_path, header(kv(b"x", ARRAY, struct.pack("<IQ", STRING, MAX_ARRAY)))),
            r"the length of array 'x' .* the file ends at")


def test_a_string_of_2_to_the_62_bytes_is_refused(tmp_path: Path) -> None:
    data = header(kv(b"general.architecture", STRING, struct.pack("<Q", 2**62) + b"llama"))
    refused(crafted(tmp_path, data), r"needs 4611686018427387904 bytes at offset .* the file ends at")


def test_a_key_count_of_2_to_the_40_is_refused(tmp_path: Path) -> None:
    refused(crafted(tmp_path, header(kv_count=2**40)), rf"key count is {2**40}, above the limit of {MAX_KEYS}")


def test_a_tensor_count_past_the_file_is_refused(tmp_path: Path) -> None:
    refused(crafted(tmp_path, header(tensors=2**20)), r"tensor count 1048576 \(at least 24 bytes each\)")


def test_a_key_longer_than_the_format_allows(tmp_path: Path) -> None:
    refused(crafted(tmp_path, header(struct.pack("<Q", 2**20) + b"k" * 2**20)), r"key #0 is 1048576 bytes long")


def test_arrays_of_arrays_nest_only_so_deep(tmp_path: Path) -> None:
    nested = struct.pack("<IQ", ARRAY, 1) * 6 + struct.pack("<IQ", U8, 0)
    refused(crafted(tmp_path, header(kv(b"x", ARRAY, nested))), r"nests arrays deeper than")


def test_unknown_types_duplicates_and_versions(tmp_path: Path) -> None:
    refused(crafted(tmp_path, header(kv(b"x", 99, b""))), r"unknown value type 99")
    refused(crafted(tmp_path, header(kv(b"x", U32, b"\1\0\0\0"), kv(b"x", U32, b"\2\0\0\0"))), r"'x' is given twice")
    refused(crafted(tmp_path, header(version=1)), r"GGUF version 1")
    refused(crafted(tmp_path, b"NOPE" + bytes(64)), r"not a GGUF file \(it starts with b'NOPE'")


def test_a_header_larger_than_its_limit_is_refused_without_reading_on(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.core import inputs
    monkeypatch.setitem(inputs.LIMITS, "gguf-header", 4096)
    path = crafted(tmp_path, header(kv(b"x", STRING, s(b"y" * 8192))))
    refused(path, r"reaches past the limit of 4096 bytes for a GGUF header")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_device_named_gguf_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "x.gguf"
    os.mkfifo(fifo)
    with deadline(5):
        assert gguf_header(fifo) == (None, f"gguf-header file {fifo} is a FIFO (named pipe), not a regular file")
    link = tmp_path / "zero.gguf"
    link.symlink_to("/dev/zero")
    with deadline(5):
        header_, why = gguf_header(link)
    assert header_ is None and "a character device" in why


def _written(path: Path, endianess: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE) -> Path:
    w = gguf.GGUFWriter(str(path), "llama", endianess=endianess)
    w.add_context_length(4096)
    w.add_name("tiny")
    w.add_float32("x.f32", 0.5)
    w.add_float64("x.f64", -2.25)
    w.add_bool("x.bool", True)
    w.add_int8("x.i8", -3)
    w.add_uint64("x.u64", 2**63)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "ü"])
    w.add_array("x.ints", [1, 2, 3])
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.add_tensor("output.weight", np.ones((8,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("endianess", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_a_real_header_reads_as_the_gguf_package_reads_it(tmp_path: Path, endianess: gguf.GGUFEndian) -> None:
    path = _written(tmp_path / "m.gguf", endianess)
    reader = gguf.GGUFReader(path)
    expected = {k: f.contents() for k, f in reader.fields.items()
                if isinstance(f.contents(), str | int | float | bool)}
    got = read_header(path)
    assert got.as_dict() == expected
    assert got.tensor_count == len(reader.tensors) == 2
    assert got.data_offset == reader.data_offset


def test_tensor_data_cut_short_is_unreadable(tmp_path: Path) -> None:
    path = _written(tmp_path / "m.gguf")
    full = path.read_bytes()
    path.write_bytes(full[:-40])  # into the last tensor's data, whatever padding follows it
    refused(path, r"its tensors reach to byte \d+, but the file ends at \d+ \(truncated\)")
    for cut in (5, 30, len(full) // 3):
        path.write_bytes(full[:cut])
        refused(path, r"the file ends at")
