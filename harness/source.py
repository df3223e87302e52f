"""The content-addressed source cache: download, verify, extract safely, once; verify at every use.

``sources/<key>/`` holds ``tree/`` (read-only) and the stamp ``.harness-source.json``: where
the tree came from and its manifest (size, sha256, executable bit and the stat that vouches
for each file). ``<key>`` is the full sha256 of an archive or ``git-<full commit>``.

Trust rules:

- Every use checks the tree cheaply against its manifest (an ``lstat`` per file; a rehash
  only of files whose size, mtime or ctime moved); :func:`checking` with ``full=True``
  (``harness fetch --verify``) rehashes every file.
- A pristine tree that differs from its manifest is refused (:class:`IntegrityError`
  naming the files): an edit there is a mistake or tampering a person should see. Under
  ``checking(repair=True)`` (``harness fetch --repair``) it is re-created instead. A tree
  without a (current) stamp, e.g. after an interrupted extraction, is re-created
  automatically from the archive once that verifies.
- Downloads and extractions hold a per-target lock, so concurrent fetches do the work once;
  temporaries carry their owner (``<name>.tmp-<pid>-<host>-...``) and those of dead
  processes are removed by the next run.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock

from harness import index, paths
from harness import progress as ui
from harness.errors import ChecksumError, IntegrityError, SourceError, UnsafeArchiveError
from harness.manifest import (
    Manifest,
    check_tree,
    manifest_from_json,
    manifest_to_json,
    scan_tree,
    sha256_file,
)

STAMP = ".harness-source.json"
MANIFEST_VERSION = 1
_CHUNK = 1 << 20
#: Derived files Python writes beside sources it imports (the GGUF converter does); never pinned.
#: A temporary older than this is debris whoever owns it: no fetch or extraction takes a day.
_MAX_TEMP_AGE_S = 24 * 3600
#: Temporaries of older harness versions carry no host; they only took seconds to write.
_MAX_LEGACY_AGE_S = 3600
_TEMP = re.compile(r"\.tmp-(\d+)-([A-Za-z0-9]*)-")
_LEGACY_TEMP = re.compile(
    r"^\.(extract|git)-[a-z0-9_]{8}$|\.part-\d+$|^\..+-[0-9a-f]{12}-[0-9a-f]{12}-[a-z0-9_]{8}$")

Progress = Callable[[int, int | None], None]


def notice(message: str) -> None:
    """Tell the user what the cache did on its own; paths stay whole (no wrapping, no markup)."""
    if not ui._quiet:
        ui.console.print(message, markup=False, highlight=False, soft_wrap=True)


# --- temporaries -------------------------------------------------------------------------


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32]


def temp_prefix(base: str) -> str:
    """``<base>.tmp-<pid>-<host>-``: the name says who owns it, so a sweep can tell debris."""
    return f"{base}.tmp-{os.getpid()}-{_host()}-"


def temp_dir(parent: Path, base: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=temp_prefix(f".{base}"), dir=parent))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    return True


def _is_stale(entry: Path) -> bool:
    try:
        age = time.time() - entry.lstat().st_mtime
    except FileNotFoundError:
        return False
    m = _TEMP.search(entry.name)
    if m:
        mine = m.group(2) == _host()
        return age > _MAX_TEMP_AGE_S or (mine and not _pid_alive(int(m.group(1))))
    return bool(_LEGACY_TEMP.search(entry.name)) and age > _MAX_LEGACY_AGE_S


def remove(path: Path) -> None:
    """Remove a file or a tree (read-only files included), ignoring what is already gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def sweep_stale(directory: Path) -> list[Path]:
    """Remove temporaries in ``directory`` whose owner process is gone (or that are too old).

    A temporary of a live process is left alone. Call it under the lock of the work that
    creates such temporaries. Returns what was removed.
    """
    gone = [e for e in directory.iterdir() if _is_stale(e)] if directory.is_dir() else []
    for e in gone:
        remove(e)
    return gone


def write_json(path: Path, data: Mapping[str, object]) -> None:
    """Write atomically: a reader sees the old or the new file, never half of one."""
    tmp = path.with_name(temp_prefix(path.name) + "json")
    tmp.write_text(json.dumps(data, separators=(",", ":")))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- downloads ---------------------------------------------------------------------------


def _download_lock(dest: Path) -> FileLock:
    h = hashlib.sha256(str(dest.absolute()).encode()).hexdigest()[:16]
    return FileLock(str(paths.locks_dir() / f"download-{dest.name[:100]}-{h}.lock"))


def download(url: str | Callable[[], str], dest: Path, *, sha256: str,
             progress: Progress | None = None, label: str | None = None) -> Path:
    """Download ``url`` to ``dest`` (atomically, under a lock) and verify its sha256.

    A file already at ``dest`` with the right hash is reused. One with the wrong hash is moved
    aside to ``<name>.bad-<time>`` and downloaded again, once; when the new bytes are wrong
    too, :class:`ChecksumError` names both hashes and the full path. Concurrent calls for the
    same ``dest`` download once. ``url`` may be a callable, called only when a download is
    needed; with ``label`` (and no ``progress``) a progress bar shows while downloading.

    The bytes go to ``<name>.partial`` first. A transient failure (5xx, timeout, reset) is
    retried with backoff from where it stopped (an HTTP Range request), and a partial left by a
    failed or killed run is resumed by the next; bytes joined that way are verified like any
    others, and downloaded again from the start once when the whole does not verify.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _download_lock(dest):
        sweep_stale(dest.parent)
        bad = None
        if dest.exists():
            found = sha256_file(dest)
            if found == sha256:
                return dest
            bad = _move_aside(dest)
            notice(f"{dest}: sha256 {found} is not the pinned {sha256}; "
                   f"moved it to {bad} and downloading it again")
        source = url if isinstance(url, str) else url()
        if progress or not label:
            return _fetch(source, dest, sha256=sha256, progress=progress, bad=bad)
        with ui.bytes_task(label) as cb:
            return _fetch(source, dest, sha256=sha256, progress=cb, bad=bad)


def _move_aside(path: Path) -> Path:
    bad = path.with_name(f"{path.name}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    path.replace(bad)
    return bad


def partial_path(dest: Path) -> Path:
    """Where the bytes of ``dest`` collect while it downloads (kept across runs to resume)."""
    return dest.with_name(f"{dest.name}.partial")


def _fetch(url: str, dest: Path, *, sha256: str, progress: Progress | None, bad: Path | None) -> Path:
    part = partial_path(dest)
    try:
        found, joined = _stream(url, part, progress)
        if found != sha256 and joined:
            notice(f"{part}: the bytes joined from more than one request do not verify; "
                   f"downloading {index.redact(url)} again from the start")
            part.unlink()
            found, _ = _stream(url, part, progress)
    except BaseException as e:
        kept = part.stat().st_size if part.exists() else 0
        if not kept:
            part.unlink(missing_ok=True)
        if not isinstance(e, OSError | http.client.HTTPException):
            raise
        resume = f"; the {kept} bytes received are kept in {part} and the next run resumes there" if kept else ""
        msg = (f"download of {index.redact(url)} to {dest} failed: {index.describe(e)}{resume}. "
               f"Check the network/proxy, or put the file (sha256 {sha256}) at {dest}")
        raise SourceError(msg) from e
    if found != sha256:
        part.unlink(missing_ok=True)
        also = f"; the cached copy was wrong too and is kept at {bad}" if bad else ""
        raise ChecksumError(f"{dest} (downloaded from {index.redact(url)}{also})", sha256, found)
    part.replace(dest)
    return dest


def _stream(url: str, part: Path, progress: Progress | None) -> tuple[str, bool]:
    """Complete ``part`` from ``url``: ``(sha256 of the whole, whether bytes of several replies
    were joined)``. Transient failures are retried from the current end of ``part``."""
    h = hashlib.sha256()
    done = 0
    if part.exists():
        with part.open("rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
                done += len(chunk)
    joined = False

    def attempt() -> None:
        nonlocal h, done, joined
        with index.open_download(url, offset=done) as body:
            if body.start != done:  # the server sent the whole file: start over
                h, done = hashlib.sha256(), 0
            joined = joined or done > 0
            with part.open("ab" if done else "wb") as f:
                while chunk := body.stream.read(_CHUNK):
                    f.write(chunk)
                    h.update(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, body.total)
            if body.total is not None and done < body.total:
                raise http.client.IncompleteRead(b"", body.total - done)

    index.with_retries(attempt, url=url)
    return h.hexdigest(), joined


def verify(path: Path, sha256: str) -> None:
    found = sha256_file(path)
    if found != sha256:
        raise ChecksumError(str(path), sha256, found)


# --- safe extraction ---------------------------------------------------------------------


def _check_member_name(name: str, archive: Path) -> None:
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith(("/", "\\")) or ".." in p.parts:
        msg = f"refusing archive {archive}: member {name!r} would be written outside the extraction dir"
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
                    msg = f"refusing archive {archive}: symlink member {info.filename!r}"
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
        msg = f"refusing archive {archive}: {e}"
        raise UnsafeArchiveError(msg) from e
    except tarfile.TarError as e:
        msg = f"cannot read archive {archive}: {e}. Delete it and fetch again"
        raise SourceError(msg) from e


@dataclass(frozen=True, kw_only=True)
class Checking:
    """How cached trees are checked: ``full`` rehashes every file; ``repair`` re-creates a
    damaged tree instead of refusing it."""

    full: bool = False
    repair: bool = False


_CHECKING: ContextVar[Checking | None] = ContextVar("harness_source_checking", default=None)


@contextmanager
def checking(*, full: bool | None = None, repair: bool | None = None) -> Iterator[Checking]:
    """Check cached trees this way inside the block (the fetch hook takes no such argument);
    ``None`` keeps what an enclosing block chose."""
    outer = current_checking()
    mode = Checking(full=outer.full if full is None else full, repair=outer.repair if repair is None else repair)
    token = _CHECKING.set(mode)
    try:
        yield mode
    finally:
        _CHECKING.reset(token)


def current_checking() -> Checking:
    return _CHECKING.get() or Checking()


# --- cached trees ------------------------------------------------------------------------


def ensure_tree(root: Path, *, create: Callable[[Path], None], meta: Mapping[str, object],
                label: str, repair_hint: str) -> tuple[Path, bool]:
    """``root`` holding a verified ``tree/``; made by ``create(tree_dir)`` when absent.

    Returns ``(root, created_now)``. Safe under concurrency (a lock per ``root``) and
    interruption (built in a temporary, stamped, renamed into place). A stamped tree that
    differs from its manifest raises :class:`IntegrityError` (``label`` says where it came
    from, ``repair_hint`` what to run), or is re-created under ``checking(repair=True)``.
    """
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(paths.locks_dir() / f"source-{root.name}.lock")):
        sweep_stale(root.parent)
        sweep_stale(root)
        manifest = _recorded_manifest(root)
        if manifest is not None:
            problem = _check_stamped(root, manifest, label=label)
            if not problem:
                return root, False
            if not current_checking().repair:
                msg = f"{problem}\nThe pristine source is never edited in place (changes belong in a patch). {repair_hint}"
                raise IntegrityError(msg)
            notice(f"{problem}\nrepairing: re-creating {root / 'tree'}")
        _replace_tree(root, create, meta)
        return root, True


def _recorded_manifest(root: Path) -> Manifest | None:
    """The manifest stamped in ``root``; None when there is no stamp (an interrupted or
    never-made tree) or it is one of an older harness: then the tree is simply made again."""
    stamp = read_json(root / STAMP)
    manifest = manifest_from_json(stamp.get("manifest")) if stamp and stamp.get("key") == root.name else None
    if stamp is not None and manifest is None:
        notice(f"{root}: made by an older harness (no manifest); making it again")
    return manifest


def _check_stamped(root: Path, manifest: Manifest, *, label: str) -> str:
    """``""`` when ``root/tree`` matches ``manifest``, else what is wrong (files named)."""
    tree = root / "tree"
    check = check_tree(tree, manifest, full=current_checking().full)
    if check.restat:
        _record_restat(root, check.restat)
    if check.ok:
        return ""
    return (f"the cached source tree {tree} is damaged: expected the {len(manifest)} files "
            f"recorded when it was made from {label}; {check.describe(tree)}")


def _record_restat(root: Path, restat: Manifest) -> None:
    """Files whose content verified under a new stat (a copied cache, a chmod): vouch anew."""
    stamp = read_json(root / STAMP) or {}
    recorded = stamp.get("manifest")
    if isinstance(recorded, dict):
        recorded.update(manifest_to_json(restat))
        write_json(root / STAMP, stamp)


def _replace_tree(root: Path, create: Callable[[Path], None], meta: Mapping[str, object]) -> None:
    tmp = temp_dir(root.parent, root.name)
    try:
        create(tmp / "tree")
        make_read_only(tmp / "tree")
        manifest = scan_tree(tmp / "tree")
        write_json(tmp / STAMP, {**meta, "key": root.name, "made_at": time.time(),
                                 "manifest_version": MANIFEST_VERSION,
                                 "manifest": manifest_to_json(manifest)})
        discard(root)
        tmp.rename(root)
    except BaseException:
        remove(tmp)
        raise


def discard(path: Path) -> None:
    """Remove ``path`` so that no half-deleted tree is ever left under its name."""
    if not path.exists() and not path.is_symlink():
        return
    aside = Path(tempfile.mkdtemp(prefix=temp_prefix(f".{path.name}"), dir=path.parent))
    path.rename(aside / "old")
    remove(aside)


def extract_once(archive: Path | Callable[[], Path], sha256: str, *, meta: Mapping[str, object],
                 cache_dir: Path | None = None, repair_hint: str | None = None) -> tuple[Path, bool]:
    """Extract ``archive`` into ``<cache_dir>/<sha256>/`` once; check it at every later call.

    ``archive`` may be a callable that downloads it, called only when the tree has to be
    (re-)made. The archive is verified before it is extracted. Returns ``(dir, extracted_now)``.
    """
    root = (cache_dir or paths.sources_dir()) / sha256

    def create(tree: Path) -> None:
        path = archive if isinstance(archive, Path) else archive()
        verify(path, sha256)
        with ui.spinner(f"extract {path.name}"):
            safe_extract(path, tree)

    name = archive.name if isinstance(archive, Path) else str(meta.get("filename", "the archive"))
    hint = repair_hint or (f"To restore it, remove {root} (rm -rf) and run the command again: "
                           "it is extracted again from the verified archive.")
    return ensure_tree(root, create=create, meta={**meta, "sha256": sha256},
                       label=f"{name} (sha256 {sha256})", repair_hint=hint)


def make_read_only(tree: Path) -> None:
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
