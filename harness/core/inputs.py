"""One way to open a file a user (or a descriptor, a download, a report) names.

Every input is opened the same way, wherever the harness reads it (configs, requests, media
headers, GGUF headers, reports, archives, partial downloads):

- ``O_NONBLOCK`` on open, so a FIFO never blocks, then ``fstat`` of the *opened* descriptor: a
  regular file or a typed error naming what it is (directory, FIFO, character device, socket);
  no check-then-open race;
- ``nofollow=True`` refuses a symlink as the final component (``O_NOFOLLOW``) where a link must
  not redirect the read;
- nothing that resolves (every symlink followed) into the kernel's pseudo-file systems
  (``/proc``, ``/sys``, ``/dev``) is read: ``/proc`` files look regular (``/proc/self/environ``,
  ``/proc/self/mem``); the path is refused before it is opened and named, never its bytes, and the
  opened file's device is checked against ``/proc``'s and ``/sys``'s too (a bind mount, a race);
- a size limit per kind (:data:`LIMITS`), checked against the size before anything is read and
  enforced while reading (a file that grows after the check is not read on);
- OS errors (missing, permission, name too long, a directory) become the caller's error class with
  the path and what to do, never a traceback.

Use :func:`read_bytes` / :func:`read_text` for whole files and :func:`open_input` for streaming
(archives, hashing, GGUF headers: read what you need, within the limit).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from harness.core.errors import HarnessError, UsageError

MiB = 1 << 20
GiB = 1 << 30

#: The most bytes read from an input of each kind. A kind not listed here must be added here,
#: not passed as a number at a call site, so the limits stay in one place.
LIMITS: dict[str, int] = {
    "config": 64 * MiB,  # model config YAML (LocalAI's largest gallery files are < 1 MiB)
    "request": 16 * MiB,  # video request JSON
    "keyframe": 64 * MiB,  # an image a video request names
    "report": 256 * MiB,  # results.json / qualify.json
    "descriptor": 4 * MiB,  # engine.yaml, matrix rows, fixtures
    "manifest": 256 * MiB,  # a source tree's .harness-source.json, an artifact's manifest.json
    "gguf-header": 64 * MiB,  # the metadata part of a GGUF model (the tensors are not read)
    "safetensors-header": 100 * MiB,  # a safetensors file's JSON header (the format caps it at 100 MB)
    "archive": 8 * GiB,  # a pinned source archive or a partial download
    "model": 256 * GiB,  # a model file hashed whole
    "patch": 64 * MiB,  # a patch of an engine's series (llama.cpp's are a few KiB)
    "surface": 16 * MiB,  # an engine's committed ABI surface (engines/<engine>/abi/surface.json, ~30 KiB)
    "text": 64 * MiB,  # anything else read as text (templates, prompts from files)
    "model-metadata": 16 * MiB,  # a model directory's config.json (Hugging Face layout)
    "media-header": 1 * MiB,  # the head of a frame or WAV the engine wrote (head=True reads)
    "source": 64 * MiB,  # a C/C++ source, or a built module's magic, that `abi --used-from` names
    "session": 64 * GiB,  # a saved sequence state (KV cells: ~23 KB a token for a 135M model, MBs for large ones)
}

_KIND_OF_MODE = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def limit(kind: str) -> int:
    try:
        return LIMITS[kind]
    except KeyError:
        msg = f"no input limit for kind {kind!r}: add it to harness.core.inputs.LIMITS"
        raise KeyError(msg) from None


def _what(mode: int) -> str:
    for test, name in _KIND_OF_MODE:
        if test(mode):
            return name
    return "not a regular file"


def _size_text(n: int) -> str:
    # Exact unless a whole unit: "16 MiB" for a limit, "16777229 bytes" for a file just over it.
    return f"{n // GiB} GiB" if n and n % GiB == 0 else f"{n // MiB} MiB" if n and n % MiB == 0 else f"{n} bytes"


class _Bounded(io.RawIOBase):
    """A reader of the first ``limit`` bytes of ``raw``: past them it fails (typed) when the file
    goes on, or, with ``fail=None`` (a head read), ends there as if the file did."""

    def __init__(self, raw: BinaryIO, limit: int, fail: Exception | None) -> None:
        self._raw, self._cap, self._left, self._fail = raw, limit, limit, fail

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._raw.seekable()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        # The limit is on positions, not on bytes transferred: seeking back rereads, never extends.
        pos = self._raw.seek(offset, whence)
        self._left = self._cap - pos
        return pos

    def tell(self) -> int:
        return self._raw.tell()

    def fileno(self) -> int:
        return self._raw.fileno()

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(b)
        if self._left <= 0:
            # one byte more than allowed tells a file that grew from one that ends here
            if self._fail is not None and self._raw.read(1):
                raise self._fail
            return 0
        n = self._raw.readinto(view[: min(len(view), self._left)])  # type: ignore[attr-defined]
        if n:
            self._left -= n
        return int(n or 0)

    def close(self) -> None:
        self._raw.close()
        super().close()


#: The kernel's pseudo-file systems: no input is read from them.
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


def _pseudo_root(real: str) -> str:
    """The pseudo-file system ``real`` (a resolved path) lies in, or ``""``."""
    return next((r for r in PSEUDO_ROOTS if real == r or real.startswith(r + "/")), "")


@functools.cache
def _pseudo_devices() -> frozenset[int]:
    """``st_dev`` of ``/proc`` and ``/sys`` (not ``/dev``: a devtmpfs holds devices, refused by kind)."""
    devs = set()
    for root in ("/proc", "/sys"):
        with contextlib.suppress(OSError):
            devs.add(os.stat(root).st_dev)
    return frozenset(devs)


def _pseudo_error(path: Path, real: str, root: str, kind: str, error: type[HarnessError]) -> HarnessError:
    return error(f"{kind} file {path} resolves to {real}, in {root}: a pseudo-file system of the kernel, not a "
                 f"{kind} file; nothing there is read. Give the path of a {kind} file on a disk")


def _os_error(path: Path, kind: str, e: OSError, error: type[HarnessError]) -> HarnessError:
    if e.errno == errno.ENOENT:
        return error(f"{kind} file {path} does not exist")
    if e.errno == errno.ELOOP:
        return error(f"{kind} file {path} is a symlink that is not followed here, or a symlink loop; "
                     "give the file it points to")
    if e.errno == errno.ENAMETOOLONG:
        return error(f"{kind} path is too long for this file system ({len(str(path))} characters): {str(path)[:80]}...")
    if e.errno == errno.EISDIR:
        return error(f"{kind} file {path} is a directory; give a file")
    if e.errno in (errno.EACCES, errno.EPERM):
        return error(f"{kind} file {path} cannot be read: permission denied")
    return error(f"{kind} file {path} cannot be opened: {e.strerror or e}")


@contextmanager
def open_input(path: str | os.PathLike[str], *, kind: str, error: type[HarnessError] = UsageError,
               nofollow: bool = False, max_bytes: int | None = None, head: bool = False,
               missing: type[HarnessError] | None = None) -> Iterator[BinaryIO]:
    """A binary reader of the regular file at ``path``, bounded by ``LIMITS[kind]`` (or a smaller
    ``max_bytes``); raises ``error`` for anything else.

    :param head: read only the head of a file of any size (a GGUF header, a frame header): the
        reader ends at the limit as if the file did, and the caller tells a truncated header from
        one over the limit by where it stopped (``f.tell() == limit``).
    :param missing: the error for a path that does not exist, when that is a usage mistake rather
        than a bad input (default ``error``).
    """
    p = Path(path)
    cap = min(limit(kind), max_bytes) if max_bytes is not None else limit(kind)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (os.O_NOFOLLOW if nofollow else 0)
    try:
        real = os.path.realpath(p)
    except (OSError, ValueError):
        real = ""  # a NUL in the name, a loop: os.open says what it is
    pseudo = _pseudo_root(real)
    if pseudo and pseudo != "/dev":  # /dev's devices are refused by what they are, below
        raise _pseudo_error(p, real, pseudo, kind, error)
    try:
        # What the path is, before it is opened: opening a device does something (a watchdog
        # is armed, a tape rewinds); the fstat below still checks what was opened.
        before = os.lstat(p) if nofollow else os.stat(p)
    except (OSError, ValueError):
        before = None  # os.open below names the problem
    if before is not None and any(test(before.st_mode) for test in (stat.S_ISCHR, stat.S_ISBLK, stat.S_ISFIFO,
                                                                    stat.S_ISSOCK)):
        raise error(f"{kind} file {p} is {_what(before.st_mode)}, not a regular file")
    try:
        fd = os.open(p, flags)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the name
        if isinstance(e, ValueError):
            raise error(f"{kind} file name {str(p)[:80]!r} holds a NUL byte") from None
        raise _os_error(p, kind, e, missing if missing is not None and e.errno == errno.ENOENT
                        else error) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{kind} file {p} is {_what(st.st_mode)}, not a regular file")
        if pseudo or st.st_dev in _pseudo_devices():
            raise _pseudo_error(p, real, pseudo or "/proc or /sys", kind, error)
        if st.st_size > cap and not head:
            raise error(f"{kind} file {p} is {_size_text(st.st_size)}, over the {_size_text(cap)} limit for a {kind} file")
        os.set_blocking(fd, True)
        raw = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    grew = None if head else error(f"{kind} file {p} grew past the {_size_text(cap)} limit while it was read")
    with io.BufferedReader(_Bounded(raw, cap, grew)) as f:
        yield f


def read_bytes(path: str | os.PathLike[str], *, kind: str, error: type[HarnessError] = UsageError,
               nofollow: bool = False, max_bytes: int | None = None,
               missing: type[HarnessError] | None = None) -> bytes:
    """The whole regular file, within the kind's limit."""
    with open_input(path, kind=kind, error=error, nofollow=nofollow, max_bytes=max_bytes, missing=missing) as f:
        return f.read()


def read_text(path: str | os.PathLike[str], *, kind: str, error: type[HarnessError] = UsageError,
              nofollow: bool = False, max_bytes: int | None = None, encoding: str = "utf-8",
              missing: type[HarnessError] | None = None) -> str:
    """The whole regular file decoded, within the kind's limit; bad encoding is ``error`` too."""
    data = read_bytes(path, kind=kind, error=error, nofollow=nofollow, max_bytes=max_bytes, missing=missing)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        msg = f"{kind} file {path} is not valid {encoding.upper()} (byte {e.start}: {e.reason}); save it as {encoding.upper()}"
        raise error(msg) from None


def refuse_pseudo(path: str | os.PathLike[str], *, kind: str, error: type[HarnessError] = UsageError) -> None:
    """``error`` naming ``path`` when it resolves (every symlink followed) into ``/proc``, ``/sys``
    or ``/dev``: for a path the harness hands on unopened (a model file or directory a native
    engine opens itself), which :func:`open_input` never sees."""
    p = Path(path)
    real, dev = "", -1
    with contextlib.suppress(OSError, ValueError):  # a loop, a NUL in the name: the opener says so
        real = os.path.realpath(p)
        dev = os.stat(p).st_dev  # absent: nothing to open
    pseudo = _pseudo_root(real)
    if pseudo or dev in _pseudo_devices():
        raise _pseudo_error(p, real, pseudo or "/proc or /sys", kind, error)


def regular_file(path: str | os.PathLike[str], *, kind: str, error: type[HarnessError] = UsageError) -> os.stat_result:
    """``stat`` of ``path`` when it is a regular file (for listings: a FIFO named ``x.yaml`` in a
    directory is refused, never opened); ``error`` otherwise."""
    p = Path(path)
    try:
        st = p.stat()
    except ValueError:  # a NUL in the name
        raise error(f"{kind} file name {str(p)[:80]!r} holds a NUL byte") from None
    except OSError as e:
        raise _os_error(p, kind, e, error) from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{kind} file {p} is {_what(st.st_mode)}, not a regular file")
    real = os.path.realpath(p)
    pseudo = _pseudo_root(real)
    if pseudo or st.st_dev in _pseudo_devices():
        raise _pseudo_error(p, real, pseudo or "/proc or /sys", kind, error)
    return st
