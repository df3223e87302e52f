"""Tree manifests: what a cached tree held when it was made, and a cheap check that it still does.

Each file is recorded with its size, sha256, executable bit and the stat (mtime, ctime) that
vouches for it; a check ``lstat``s every file and rehashes only those whose stat moved (or
every file with ``full=True``).
"""

from __future__ import annotations

import hashlib
import os
import stat
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

IGNORED_DIRS = frozenset({"__pycache__"})
_SHOWN = 5
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One file of a tree as recorded: its content, and the stat that vouches for it."""

    size: int
    #: sha256 of the bytes; ``-> target`` for a symlink; ``special:<mode>`` otherwise.
    digest: str
    executable: bool
    mtime_ns: int
    ctime_ns: int

    def to_json(self) -> list[object]:
        return [self.size, self.digest, int(self.executable), self.mtime_ns, self.ctime_ns]

    @classmethod
    def from_json(cls, v: list[object]) -> Entry:
        size, digest, exe, mtime, ctime = v
        return cls(size=int(str(size)), digest=str(digest), executable=bool(exe),
                   mtime_ns=int(str(mtime)), ctime_ns=int(str(ctime)))

    def same_content(self, other: Entry) -> bool:
        return (self.size, self.digest, self.executable) == (other.size, other.digest, other.executable)


Manifest = dict[str, Entry]


def _walk(tree: Path) -> dict[str, os.stat_result]:
    """``relative posix path -> lstat`` of every non-directory under ``tree``."""
    found: dict[str, os.stat_result] = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if d not in IGNORED_DIRS]
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        rel_dir = os.path.relpath(dirpath, tree)
        for name in (*filenames, *links):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            with suppress(FileNotFoundError):  # gone while we walked: reported as removed
                found[rel.replace(os.sep, "/")] = os.lstat(os.path.join(dirpath, name))
    return found


def _entry(path: Path, st: os.stat_result) -> Entry:
    if stat.S_ISLNK(st.st_mode):
        digest = "-> " + os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        try:
            digest = sha256_file(path)
        except OSError as e:
            digest = f"unreadable: {e.strerror}"
    else:
        digest = f"special:{stat.S_IFMT(st.st_mode):o}"
    return Entry(size=st.st_size, digest=digest, executable=bool(st.st_mode & 0o100),
                 mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)


def scan_tree(tree: Path) -> Manifest:
    """The manifest of ``tree``: every file hashed (``__pycache__`` dirs left out)."""
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
        counts = f"{len(self.edited)} edited, {len(self.added)} added, {len(self.removed)} removed"
        return f"found: {counts}:\n" + "\n".join(lines)


def check_tree(tree: Path, manifest: Manifest, *, full: bool = False) -> TreeCheck:
    """Compare ``tree`` with ``manifest``: stat first, hashing only files whose stat moved
    (every file with ``full``)."""
    seen = _walk(tree)
    edited: list[str] = []
    restat: Manifest = {}
    for rel in sorted(seen.keys() & manifest.keys()):
        rec, st = manifest[rel], seen[rel]
        vouched = (st.st_size, st.st_mtime_ns, st.st_ctime_ns) == (rec.size, rec.mtime_ns, rec.ctime_ns)
        if vouched and not full and bool(st.st_mode & 0o100) == rec.executable:
            continue
        if st.st_size != rec.size:
            edited.append(rel)
            continue
        now = _entry(tree / rel, st)
        if not now.same_content(rec):
            edited.append(rel)
        elif not vouched:
            restat[rel] = now
    return TreeCheck(edited=tuple(edited), added=tuple(sorted(seen.keys() - manifest.keys())),
                     removed=tuple(sorted(manifest.keys() - seen.keys())), restat=restat)


# --- how hard to check -------------------------------------------------------------------
