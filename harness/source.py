"""The content-addressed source cache: download, verify, extract safely, once."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from filelock import FileLock

from harness import paths
from harness.errors import ChecksumError, SourceError, UnsafeArchiveError

STAMP = ".harness-source.json"
_CHUNK = 1 << 20

Progress = Callable[[int, int | None], None]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def download(url: str, dest: Path, *, sha256: str, progress: Progress | None = None) -> Path:
    """Download ``url`` to ``dest`` (atomically) and verify its sha256.

    A file already at ``dest`` with the right hash is reused; one with the wrong
    hash is downloaded again.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() and sha256_file(dest) == sha256:
        return dest
    tmp = dest.with_name(dest.name + f".part-{os.getpid()}")
    h = hashlib.sha256()
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "harness/0.1"})
        with urllib.request.urlopen(req, timeout=120) as r, tmp.open("wb") as f:
            total = int(r.headers.get("Content-Length") or 0) or None
            done = 0
            while chunk := r.read(_CHUNK):
                f.write(chunk)
                h.update(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        msg = f"download of {url} failed: {e}. Check the network/proxy, or put the file at {dest}"
        raise SourceError(msg) from e
    found = h.hexdigest()
    if found != sha256:
        tmp.unlink(missing_ok=True)
        raise ChecksumError(dest.name, sha256, found)
    tmp.replace(dest)
    return dest


def verify(path: Path, sha256: str) -> None:
    found = sha256_file(path)
    if found != sha256:
        raise ChecksumError(path.name, sha256, found)


def _check_member_name(name: str, archive: Path) -> None:
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith(("/", "\\")) or ".." in p.parts:
        msg = f"refusing archive {archive.name}: member {name!r} would be written outside the extraction dir"
        raise UnsafeArchiveError(msg)


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract a .tar.gz/.tar/.zip, refusing path traversal and links escaping the tree."""
    dest.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _check_member_name(info.filename, archive)
                # A zip entry with S_IFLNK mode is a symlink; we never create those.
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    msg = f"refusing archive {archive.name}: symlink member {info.filename!r}"
                    raise UnsafeArchiveError(msg)
            zf.extractall(dest)
        return
    try:
        with tarfile.open(archive) as tf:
            for m in tf.getmembers():
                _check_member_name(m.name, archive)
            # The 'data' filter refuses absolute/escaping links and special files.
            tf.extractall(dest, filter="data")
    except tarfile.FilterError as e:
        msg = f"refusing archive {archive.name}: {e}"
        raise UnsafeArchiveError(msg) from e
    except tarfile.TarError as e:
        msg = f"cannot read archive {archive}: {e}. Delete it and fetch again"
        raise SourceError(msg) from e


def extract_once(archive: Path, sha256: str, *, meta: dict[str, object]) -> tuple[Path, bool]:
    """Extract ``archive`` into ``sources/<sha256>/`` exactly once.

    Returns ``(dir, extracted_now)``. Safe under concurrency (file lock) and
    interruption (extraction happens in a temp dir renamed into place, then stamped).
    """
    root = paths.sources_dir() / sha256[:24]
    stamp = root / STAMP
    with FileLock(str(paths.locks_dir() / f"source-{sha256[:24]}.lock")):
        if stamp.exists():
            return root, False
        if root.exists():
            shutil.rmtree(root)
        tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=paths.sources_dir()))
        try:
            safe_extract(archive, tmp / "tree")
            _make_read_only(tmp / "tree")
            tmp.rename(root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        stamp.write_text(json.dumps({**meta, "sha256": sha256, "extracted_at": time.time()}, indent=2))
        return root, True


def _make_read_only(tree: Path) -> None:
    """The pristine source is never modified: drop write bits on files."""
    for dirpath, _dirnames, filenames in os.walk(tree):
        for fn in filenames:
            p = Path(dirpath, fn)
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & ~0o222)


def single_top_dir(tree: Path) -> Path:
    """An sdist has one top-level directory; return it (or ``tree`` itself)."""
    entries = [p for p in tree.iterdir() if not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else tree
