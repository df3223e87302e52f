"""Files a request names: confined to one directory, regular files only, read in bounded pieces.

A request is data from a client, so a path in it must not reach anything the
operator did not put in the media directory (the request file's directory by
default, ``--media-dir`` otherwise). A path outside it gets one message whatever
is there, so ``video check`` cannot be used to learn which files exist. Inside
it, only regular files are opened (a FIFO would block, a device never ends),
and they are opened non-blocking, without following a final symlink, and checked
to be the file that was vetted.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from harness.core.errors import HarnessError, VideoError
from harness.core.inputs import open_input
from harness.families.limits import DEFAULT_LIMITS, VideoLimits, show

_KIND = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
         stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True, kw_only=True)
class Scope:
    """Whose paths are confined, and what a refusal says: request paths or a config's checkpoints."""

    label: str
    """What names the path: ``request key``, ``option``."""
    root: str
    """The directory's name: ``media directory``, ``models directory``."""
    paths: str
    """Whose paths they are, for the message: ``request``, ``checkpoint``."""
    hint: str
    """How to allow another directory."""
    error: type[HarnessError] = VideoError


#: Request paths (keyframes, references, audio): inside the media directory.
REQUEST = Scope(label="request key", root="media directory", paths="request",
                hint="Pass --media-dir DIR to allow another directory.")


def outside_error(key: str, value: str, root: Path, scope: Scope = REQUEST) -> HarnessError:
    """The one error for a path outside the confining directory, whether or not it exists."""
    msg = (f"{scope.label} {key!r}: {show(value)} is outside the {scope.root} {root}; "
           f"{scope.paths} paths must resolve inside it (symlinks are followed first). {scope.hint}")
    return scope.error(msg)


def confine(value: str, key: str, root: Path, limits: VideoLimits = DEFAULT_LIMITS, *,
            scope: Scope = REQUEST) -> Path:
    """Resolve a path against ``root`` and refuse it unless it stays inside.

    Relative paths resolve against ``root``; ``..`` and absolute paths may only name
    something inside it. The lexical check runs first, so a path that climbs out is
    refused without touching the file system; the resolved check then catches
    symlinks that lead out. Nothing is said about whether the path exists.

    :param scope: whose paths these are (request paths by default; a config's checkpoints).
    :raises HarnessError: ``scope.error``: the one outside-the-root message, or an unusable string.
    """
    if "\x00" in value or len(value) > limits.max_path_chars:
        msg = (f"{scope.label} {key!r}: expected a file path of at most {limits.max_path_chars} "
               f"characters without NUL bytes, found {show(value)}")
        raise scope.error(msg)
    root_abs = os.path.normpath(os.path.abspath(root))
    root_real = os.path.realpath(root_abs)
    lexical = os.path.normpath(os.path.join(root_abs, value))
    if not (_inside(lexical, root_abs) or _inside(lexical, root_real)):
        raise outside_error(key, value, Path(root_abs), scope)
    try:
        real = os.path.realpath(lexical)
    except (OSError, ValueError):  # a symlink loop, an unencodable name
        raise outside_error(key, value, Path(root_abs), scope) from None
    if not _inside(real, root_real):
        raise outside_error(key, value, Path(root_abs), scope)
    return Path(real)


def regular_file(path: Path, key: str) -> os.stat_result:
    """``stat`` a confined path and refuse anything but a regular file, before opening it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        msg = f"request key {key!r}: file not found: {path}"
        raise VideoError(msg) from None
    except (OSError, ValueError) as e:
        msg = f"request key {key!r}: cannot read {path}: {getattr(e, 'strerror', None) or e}"
        raise VideoError(msg) from None
    if not stat.S_ISREG(st.st_mode):
        kind = _KIND.get(stat.S_IFMT(st.st_mode), "not a regular file")
        msg = f"request key {key!r}: {path} is {kind}; expected a regular file"
        raise VideoError(msg)
    return st


@contextlib.contextmanager
def open_regular(path: Path, key: str, *, max_bytes: int) -> Iterator[tuple[BinaryIO, int]]:
    """Open a vetted regular file of at most ``max_bytes``; yields (file, size).

    Opened by :func:`harness.core.inputs.open_input` without following a final symlink, so a file
    swapped for a FIFO or a symlink after the check fails instead of blocking or escaping; the
    descriptor is then checked to be the file that was ``stat``-ed.
    """
    st = regular_file(path, key)
    if st.st_size > max_bytes:
        msg = (f"request key {key!r}: {path} is {st.st_size} bytes, above the "
               f"{max_bytes}-byte limit for this input")
        raise VideoError(msg)
    with open_input(path, kind="keyframe", error=VideoError, nofollow=True, max_bytes=max_bytes) as f:
        now = os.fstat(f.fileno())
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            msg = f"request key {key!r}: {path} changed while it was being opened; try again"
            raise VideoError(msg)
        yield f, now.st_size


def read_bounded(f: BinaryIO, size: int, max_bytes: int, what: str) -> bytes:
    """Read a file whose ``fstat`` size was ``size``: at most that and ``max_bytes``.

    One byte more is asked for, so a file that grew after it was checked is refused
    instead of read without end; the buffer is sized by the file, not by the limit.
    """
    want = min(size, max_bytes)
    data = f.read(want + 1)
    if len(data) > want:
        msg = f"{what}: the file grew while it was being read (limit {max_bytes} bytes); try again"
        raise VideoError(msg)
    return data
