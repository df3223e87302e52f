"""Tree manifests: what a cached tree held when it was made, and a cheap check that it still does.

Every entry of the tree is recorded, directories and ``__pycache__`` included (nothing under a
cached tree is "derived" and skipped: a byte-code file there is code that runs): its kind, size,
sha256 (a symlink's target), full permission bits (setuid, setgid, sticky, every exec bit) and
the stat (mtime, ctime) that vouches for its content. A check ``lstat``s every entry, compares
kinds and modes, and rehashes only files whose stat moved (or every file with ``full=True``).

The manifest is sealed: :func:`content_digest` over what it says about content (not the stat
vouchers, which a check may refresh) is kept beside the stamp that holds it, so an edit of the
stamp that hides an edit of the tree does not go unseen.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

#: The manifest format; a stamp of another version is not trusted (its tree is made again).
VERSION = 2
#: ``Entry.digest`` of a directory.
DIR = "dir"
_SHOWN = 5
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """sha256 of a regular file (symlinks followed); ``OSError`` for anything else, never a
    blocking read of a FIFO or a device."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
            raise OSError(code, "not a regular file", str(path))
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One entry of a tree as recorded: its content, and the stat that vouches for it."""

    size: int
    #: sha256 of the bytes; ``-> target`` for a symlink; ``dir``; ``special:<mode>`` otherwise.
    digest: str
    #: Permission bits with setuid/setgid/sticky (``stat.S_IMODE``); 0 for a symlink.
    mode: int
    mtime_ns: int
    ctime_ns: int

    def to_json(self) -> list[object]:
        return [self.size, self.digest, self.mode, self.mtime_ns, self.ctime_ns]

    @classmethod
    def from_json(cls, v: object) -> Entry:
        if not (isinstance(v, list) and len(v) == 5 and isinstance(v[1], str)
                and all(isinstance(n, int) and not isinstance(n, bool) for n in (v[0], *v[2:]))):
            msg = f"not a manifest entry: {str(v)[:80]}"
            raise ValueError(msg)
        size, digest, mode, mtime, ctime = v
        return cls(size=size, digest=digest, mode=mode, mtime_ns=mtime, ctime_ns=ctime)

    def same_content(self, other: Entry) -> bool:
        return (self.size, self.digest, self.mode) == (other.size, other.digest, other.mode)


Manifest = dict[str, Entry]


def _walk(tree: Path) -> dict[str, os.stat_result]:
    """``relative posix path -> lstat`` of every entry under ``tree`` (``.``: the tree itself);
    symlinked directories are entries, never followed."""
    found: dict[str, os.stat_result] = {}
    with suppress(FileNotFoundError):
        found["."] = os.lstat(tree)
    for dirpath, dirnames, filenames in os.walk(tree):
        rel_dir = os.path.relpath(dirpath, tree)
        for name in (*dirnames, *filenames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            with suppress(FileNotFoundError):  # gone while we walked: reported as removed
                found[rel.replace(os.sep, "/")] = os.lstat(os.path.join(dirpath, name))
    return found


def _entry(path: Path, st: os.stat_result) -> Entry:
    mode = stat.S_IMODE(st.st_mode)
    size = st.st_size
    if stat.S_ISLNK(st.st_mode):
        digest, mode = "-> " + os.readlink(path), 0
    elif stat.S_ISDIR(st.st_mode):
        digest, size = DIR, 0  # a directory's size is the file system's business
    elif stat.S_ISREG(st.st_mode):
        try:
            digest = sha256_file(path)
        except OSError as e:
            digest = f"unreadable: {e.strerror}"
    else:
        digest = f"special:{stat.S_IFMT(st.st_mode):o}"
    return Entry(size=size, digest=digest, mode=mode, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)


def scan_tree(tree: Path) -> Manifest:
    """The manifest of ``tree``: every file hashed, every directory and link recorded."""
    return {rel: _entry(tree / rel, st) for rel, st in sorted(_walk(tree).items())}


def manifest_to_json(manifest: Manifest) -> dict[str, list[object]]:
    return {rel: e.to_json() for rel, e in manifest.items()}


def manifest_from_json(data: object) -> Manifest | None:
    """The manifest recorded in a stamp, or None when there is none (or it is unreadable)."""
    if not isinstance(data, dict):
        return None
    try:
        return {str(rel): Entry.from_json(v) for rel, v in data.items()}
    except (TypeError, ValueError):
        return None


def content_digest(manifest: Manifest) -> str:
    """sha256 of what ``manifest`` says about content: paths, kinds, sizes, digests, modes (the
    stat vouchers are left out: a check refreshes them when the content verifies)."""
    h = hashlib.sha256()
    for rel in sorted(manifest):
        e = manifest[rel]
        h.update(json.dumps([rel, e.size, e.digest, e.mode]).encode() + b"\n")
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class TreeCheck:
    """How a tree differs from its manifest; ``restat``: files re-verified under a new stat."""

    edited: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restat: Manifest = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.edited or self.added or self.removed)

    def describe(self, tree: Path) -> str:
        """``found: 1 edited, 0 added, 0 removed`` and the first few full paths."""
        rows = ([("edited", r) for r in self.edited] + [("added", r) for r in self.added]
                + [("removed", r) for r in self.removed])
        lines = [f"  {what:<8}{tree / rel}" for what, rel in rows[:_SHOWN]]
        if len(rows) > _SHOWN:
            lines.append(f"  ... and {len(rows) - _SHOWN} more")
        counts = f"{len(self.edited)} edited (content, kind or mode), {len(self.added)} added, {len(self.removed)} removed"
        return f"found: {counts}:\n" + "\n".join(lines)


def check_tree(tree: Path, manifest: Manifest, *, full: bool = False) -> TreeCheck:
    """Compare ``tree`` with ``manifest``: kinds and modes always, content by stat first,
    hashing only files whose stat moved (every file with ``full``)."""
    seen = _walk(tree)
    edited: list[str] = []
    restat: Manifest = {}
    for rel in sorted(seen.keys() & manifest.keys()):
        rec, st = manifest[rel], seen[rel]
        if not stat.S_ISREG(st.st_mode) or rec.digest == DIR or rec.digest.startswith("-> "):
            if not _entry(tree / rel, st).same_content(rec):  # no hashing: a link, a dir, a special
                edited.append(rel)
            continue
        mode = stat.S_IMODE(st.st_mode)
        vouched = (st.st_size, st.st_mtime_ns, st.st_ctime_ns) == (rec.size, rec.mtime_ns, rec.ctime_ns)
        if vouched and not full and mode == rec.mode:
            continue
        if st.st_size != rec.size or mode != rec.mode:
            edited.append(rel)
            continue
        now = _entry(tree / rel, st)
        if not now.same_content(rec):
            edited.append(rel)
        elif not vouched:
            restat[rel] = now
    return TreeCheck(edited=tuple(edited), added=tuple(sorted(seen.keys() - manifest.keys())),
                     removed=tuple(sorted(manifest.keys() - seen.keys())), restat=restat)
