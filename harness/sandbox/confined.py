"""The one way the host reads a tree a sandbox could write (README "Trust model", the boundary).

A build dir, a binding's build dir, a recipe's folder: whatever code of a recipe ran in (or wrote)
may hold a symlink to ``~/.venv/lib/python3.11/site-packages/x.pth``, a FIFO, a hard link to a host
file, or a file of 3 GB. The host never opens such a tree by path. :class:`Tree` opens its root once
and then every component relative to the directory before it with ``O_NOFOLLOW`` (as Moby's
``docker cp`` fixes and libpathrs do: a link swapped in between two calls is never followed), reads
regular files only (a FIFO, a device or a socket is refused, and never waited on: ``O_NONBLOCK``),
and bounds every read. Links inside the tree are followed only by :meth:`Tree.resolve`, lexically,
and only while they stay inside it.

What the host writes for a build (its log, the init-cache script, passwd and group) lives outside
every tree a sandbox can write (:func:`host_dir`), is written by :func:`write_private` (a fresh file
renamed into place: a link there is replaced, never followed) and is shown to the sandbox read-only.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.core import paths
from harness.core.errors import BuildError

#: The most any one file of a sandbox-written tree is read whole (a CMake reply, a stats log, a stamp).
READ_LIMIT = 16 << 20
#: The most one file is copied or hashed (a library of the artifact; ggml-cuda's is ~500 MB).
COPY_LIMIT = 4 << 30
#: Links followed by :meth:`Tree.resolve` before it gives up (as the kernel's 40).
MAX_HOPS = 40

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class ConfinementError(BuildError):
    """What a sandbox left is not what the host reads: a link out, a special file, a file too large."""


@dataclass(frozen=True)
class Entry:
    """One directory entry, as :meth:`Tree.scandir` sees it (``kind``: file, dir, link or other)."""

    name: str
    kind: str
    size: int


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def parts_of(rel: str | os.PathLike[str]) -> list[str]:
    """The components of a relative path, refusing an absolute one and ``..`` (``.`` and empties dropped)."""
    text = os.fspath(rel)
    if os.path.isabs(text):
        msg = f"{text} is an absolute path; a path in a sandbox-written tree is relative to it"
        raise ConfinementError(msg)
    out = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in out:
        msg = f"{text} climbs out with '..'; a path in a sandbox-written tree stays inside it"
        raise ConfinementError(msg)
    return out


class Tree:
    """A directory tree a sandbox could write, read from the host without following anything in it.

    ``root`` itself is the host's own path (made by the host, e.g. a build dir under the cache): it is
    resolved once, when the tree is opened; nothing under it is ever resolved by the kernel."""

    def __init__(self, root: Path, *, what: str = "build tree") -> None:
        self.root = Path(os.path.realpath(root))
        self.what = what

    def __repr__(self) -> str:
        return f"Tree({self.root})"

    def _refuse(self, rel: str, why: str) -> ConfinementError:
        return ConfinementError(
            f"{self.root / rel} ({self.what}) {why}: the host reads what a sandbox wrote only as regular files and "
            "directories inside it, never through a link, a FIFO or a device. Remove it (the patch or build step "
            "that made it)")

    def _open_dir(self, parts: list[str], rel: str) -> int:
        """An fd of the directory ``parts`` (every component opened without following a link)."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for i, name in enumerate(parts):
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        sub = "/".join(parts[: i + 1])
                        raise self._refuse(sub, "is a link or not a directory") from None
                    raise
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_file(self, rel: str | os.PathLike[str], *, limit: int = READ_LIMIT) -> int:
        """An fd of the regular file ``rel``, opened read-only; ConfinementError for a link, a special
        file, a file with other hard links (it may be a host file under a second name) or one over ``limit``.
        FileNotFoundError when absent."""
        parts = parts_of(rel)
        if not parts:
            raise self._refuse(os.fspath(rel), "is the tree's root, not a file")
        text = "/".join(parts)
        dfd = self._open_dir(parts[:-1], text)
        try:
            try:
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise self._refuse(text, "is a symbolic link") from None
                if e.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket
                    raise self._refuse(text, "is not a regular file") from None
                raise
        finally:
            os.close(dfd)
        st = os.fstat(fd)
        problem = ("is not a regular file" if not stat.S_ISREG(st.st_mode)
                   else f"has {st.st_nlink} hard links (it may be a host file under a second name)"
                   if st.st_nlink > 1 else f"is {st.st_size} bytes, over the {limit}-byte limit"
                   if st.st_size > limit else "")
        if problem:
            os.close(fd)
            raise self._refuse(text, problem)
        return fd

    def read_bytes(self, rel: str | os.PathLike[str], *, limit: int = READ_LIMIT) -> bytes:
        fd = self.open_file(rel, limit=limit)
        try:
            chunks, total = [], 0
            while chunk := os.read(fd, 1 << 20):
                total += len(chunk)
                if total > limit:  # grew since fstat
                    raise self._refuse(os.fspath(rel), f"grew past the {limit}-byte limit while read")
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_text(self, rel: str | os.PathLike[str], *, limit: int = READ_LIMIT) -> str:
        return self.read_bytes(rel, limit=limit).decode(errors="replace")

    def lstat(self, rel: str | os.PathLike[str]) -> os.stat_result | None:
        """The entry's own stat (a link is a link), None when absent; ConfinementError when a directory
        on the way is a link."""
        parts = parts_of(rel)
        if not parts:
            return os.stat(self.root)
        try:
            dfd = self._open_dir(parts[:-1], "/".join(parts))
        except FileNotFoundError:
            return None
        try:
            return os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(dfd)

    def kind(self, rel: str | os.PathLike[str]) -> str | None:
        """``file``, ``dir``, ``link``, ``other``, or None when absent."""
        st = self.lstat(rel)
        return None if st is None else _kind(st.st_mode)

    def is_file(self, rel: str | os.PathLike[str]) -> bool:
        return self.kind(rel) == "file"

    def readlink(self, rel: str | os.PathLike[str]) -> str:
        parts = parts_of(rel)
        dfd = self._open_dir(parts[:-1], "/".join(parts))
        try:
            return os.readlink(parts[-1], dir_fd=dfd)
        finally:
            os.close(dfd)

    def scandir(self, rel: str | os.PathLike[str] = "") -> list[Entry]:
        """The entries of directory ``rel`` (sorted by name), each with its own kind; [] when absent."""
        parts = parts_of(rel)
        try:
            fd = self._open_dir(parts, "/".join(parts))
        except FileNotFoundError:
            return []
        try:
            out = []
            with os.scandir(fd) as it:
                for e in it:
                    st = e.stat(follow_symlinks=False)
                    out.append(Entry(e.name, _kind(st.st_mode), st.st_size))
            return sorted(out, key=lambda e: e.name)
        finally:
            os.close(fd)

    def walk(self, rel: str | os.PathLike[str] = "") -> Iterator[tuple[str, Entry]]:
        """Every entry under ``rel``, depth first, as ``(relative path, entry)``; never enters a link."""
        base = "/".join(parts_of(rel))
        for e in self.scandir(base):
            path = f"{base}/{e.name}" if base else e.name
            yield path, e
            if e.kind == "dir":
                yield from self.walk(path)

    def resolve(self, rel: str | os.PathLike[str]) -> str:
        """``rel`` with every link on its way followed, lexically and inside the tree: the relative path
        of what it names. A link that leads outside (absolute text, or ``..`` past the root) is
        ConfinementError, as is a chain longer than :data:`MAX_HOPS`."""
        todo = parts_of(rel)
        done: list[str] = []
        hops = 0
        while todo:
            name = todo.pop(0)
            if name == "..":
                if not done:
                    raise self._refuse(os.fspath(rel), "leads out of the tree through a link")
                done.pop()
                continue
            here = "/".join([*done, name])
            st = self.lstat(here)
            if st is not None and stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > MAX_HOPS:
                    raise self._refuse(os.fspath(rel), f"goes through more than {MAX_HOPS} links")
                text = self.readlink(here)
                if os.path.isabs(text):
                    raise self._refuse(here, f"is a link to {text}, an absolute path")
                todo = [p for p in text.split("/") if p not in ("", ".")] + todo
                continue
            done.append(name)
        return "/".join(done)

    def copy_to(self, rel: str | os.PathLike[str], dest: Path, *, limit: int = COPY_LIMIT) -> None:
        """Copy the regular file ``rel`` (no link followed, one hard link, at most ``limit``) to ``dest``,
        a new file of the host's (created exclusively: an existing entry there is an error), keeping its
        mode's permission bits (setuid and setgid dropped)."""
        fd = self.open_file(rel, limit=limit)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode) & 0o777
            out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode | 0o600)
            try:
                total = 0
                while chunk := os.read(fd, 1 << 20):
                    total += len(chunk)
                    if total > limit:
                        raise self._refuse(os.fspath(rel), f"grew past the {limit}-byte limit while copied")
                    os.write(out, chunk)
                os.fchmod(out, mode)
            finally:
                os.close(out)
            st = os.fstat(fd)
            os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(fd)

    def sha256(self, rel: str | os.PathLike[str], *, limit: int = COPY_LIMIT) -> str:
        fd = self.open_file(rel, limit=limit)
        h = hashlib.sha256()
        try:
            total = 0
            while chunk := os.read(fd, 1 << 20):
                total += len(chunk)
                if total > limit:
                    raise self._refuse(os.fspath(rel), f"grew past the {limit}-byte limit while hashed")
                h.update(chunk)
        finally:
            os.close(fd)
        return h.hexdigest()

    def touch(self, rel: str | os.PathLike[str]) -> None:
        """Make the empty file ``rel`` and the directories on its way, never through a link (a file
        already there is kept; a link or special file there is ConfinementError)."""
        parts = parts_of(rel)
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for i, name in enumerate(parts[:-1]):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise self._refuse("/".join(parts[: i + 1]), "is a link or not a directory") from None
                    raise
                os.close(fd)
                fd = nxt
            try:
                out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                              0o644, dir_fd=fd)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise self._refuse("/".join(parts), "is a symbolic link") from None
                raise
            try:
                if not stat.S_ISREG(os.fstat(out).st_mode):
                    raise self._refuse("/".join(parts), "is not a regular file")
            finally:
                os.close(out)
        finally:
            os.close(fd)

    def remove(self, rel: str | os.PathLike[str]) -> None:
        """Remove the entry ``rel`` (a link itself, never what it leads to); nothing when absent."""
        parts = parts_of(rel)
        try:
            dfd = self._open_dir(parts[:-1], "/".join(parts))
        except FileNotFoundError:
            return
        try:
            os.unlink(parts[-1], dir_fd=dfd)
        except FileNotFoundError:
            pass
        finally:
            os.close(dfd)

    def glob(self, pattern: str) -> list[str]:
        """The relative paths matching ``pattern`` (``fnmatch`` per component; ``**`` any depth of real
        directories), sorted; directories are entered only when they are directories, not links."""
        from fnmatch import fnmatchcase

        found: list[str] = []

        def step(base: str, comps: list[str]) -> None:
            head, rest = comps[0], comps[1:]
            if head == "**":
                if rest:
                    step(base, rest)
                for e in self.scandir(base):
                    if e.kind == "dir":
                        step(f"{base}/{e.name}" if base else e.name, comps)
                return
            literal = not any(c in head for c in "*?[")
            for e in self.scandir(base):
                if not fnmatchcase(e.name, head):
                    continue
                path = f"{base}/{e.name}" if base else e.name
                if rest:
                    if e.kind == "dir":
                        step(path, rest)
                    elif literal and e.kind == "link":  # a directory named outright is never a link
                        raise self._refuse(path, "is a link, not a directory")
                else:
                    found.append(path)

        comps = parts_of(pattern)
        if comps:
            step("", comps)
        return sorted(dict.fromkeys(found))

    def relative(self, path: str | os.PathLike[str]) -> str | None:
        """``path`` (absolute, as a tool inside the sandbox named it) relative to the root, lexically;
        None when it is not under the root."""
        norm = os.path.normpath(os.fspath(path))
        root = str(self.root)
        if norm == root:
            return ""
        return norm[len(root) + 1:] if norm.startswith(root + os.sep) else None


def host_dir(*parts: str) -> Path:
    """A directory of the host's own under ``<cache>/host/`` that no sandbox is given writable: where the
    files the host writes for a build (its log, the init-cache script, passwd/group) live."""
    d = paths.cache_root() / "host"
    for p in parts:
        d = d / p
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_private(path: Path, text: str | bytes) -> Path:
    """Write ``path`` as a fresh file renamed into place (an existing link there is replaced, not followed)."""
    data = text.encode() if isinstance(text, str) else text
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def open_log(path: Path) -> int:
    """An fd to append to the host's own log ``path``; a link or special file at that path is refused."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        msg = f"{path} is not a regular file; the harness's log is a file it writes itself: remove it"
        raise ConfinementError(msg)
    return fd
