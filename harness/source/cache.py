"""The content-addressed source cache: download, verify, extract safely, once; verify at every use.

``sources/<key>/`` holds ``tree/`` (read-only), the stamp ``.harness-source.json``: where the
tree came from and its manifest (every file and directory, ``__pycache__`` included: kind,
size, sha256, full mode bits and the stat that vouches for each), and the seal
``.harness-source.sha256``: the sha256 of the manifest's content, so that editing the stamp to
hide an edit of the tree is seen too. ``<key>`` is the full sha256 of an archive or
``git-<full commit>``. Archives are downloaded to ``downloads/<engine>/<sha256>/<file name>``
(:func:`archive_path`): two descriptors never share a path.

Trust rules:

- Every use checks the tree cheaply against its manifest (an ``lstat`` per entry, kinds and
  modes compared; a rehash only of files whose size, mtime or ctime moved). The manifest and its
  seal sit in the same writable cache as the tree: a fast path, not an anchor. Under
  :func:`checking` with ``full=True`` (``harness fetch --verify`` / ``--repair``) a tree made from
  an archive is compared with the archive itself, extracted again into a scratch directory after
  its sha256 verified (every member by content, kind and mode; anything else in the tree is
  added); the manifest is not read.
- Nothing runs byte code from a cached tree: a Python that imports from one runs under
  :func:`python_env` (no ``.pyc`` written into the tree) after :func:`refuse_byte_code`.
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
import stat
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock

from harness.core import inputs, paths
from harness.core import progress as ui
from harness.core.errors import (
    ChecksumError,
    HarnessError,
    IntegrityError,
    SourceError,
    UnsafeArchiveError,
)
from harness.core.tarfiles import tarfile
from harness.source import index
from harness.source.manifest import (
    VERSION,
    Manifest,
    check_tree,
    content_digest,
    manifest_from_json,
    manifest_to_json,
    scan_tree,
)

STAMP = ".harness-source.json"
MANIFEST_VERSION = VERSION
_CHUNK = 1 << 20
#: A temporary older than this is debris whoever owns it: no fetch or extraction takes a day.
_MAX_TEMP_AGE_S = 24 * 3600
#: Temporaries of older harness versions carry no host; they only took seconds to write.
_MAX_LEGACY_AGE_S = 3600
_TEMP = re.compile(r"\.tmp-(\d+)-([A-Za-z0-9]*)-")
_LEGACY_TEMP = re.compile(
    r"^\.(extract|git)-[a-z0-9_]{8}$|\.part-\d+$|^\..+-[0-9a-f]{12}-[0-9a-f]{12}-[a-z0-9_]{8}$")
#: Wrong archives moved aside (``<name>.bad-<time>-<pid>``, 76 MB for llama.cpp) are evidence,
#: kept within bounds: the newest few of each name, and any moved aside in the last day.
KEEP_BAD = 2
KEEP_BAD_S = 24 * 3600
_BAD = re.compile(r"^(?P<name>.+)\.bad-(?P<at>\d{8}T\d{6})-\d+$")
#: The longest file name a descriptor may give an archive: room is left for the suffixes of
#: its partial download, temporaries and ``.bad-<time>-<pid>`` within the usual 255 bytes.
MAX_FILE_NAME = 200

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
    """A stamp's JSON object; None when it is absent or not one (a FIFO or a huge file included)."""
    try:
        data = json.loads(inputs.read_text(path, kind="manifest", error=SourceError, nofollow=True))
    except (HarnessError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def seal_path(stamp: Path) -> Path:
    """``<stamp>.sha256`` beside ``<stamp>.json``: where the stamp's manifest is sealed."""
    return stamp.with_name(stamp.name.removesuffix(".json") + ".sha256")


def write_seal(stamp: Path, manifest: Manifest) -> None:
    """Seal ``manifest`` (the one in ``stamp``): its content digest, written atomically."""
    seal = seal_path(stamp)
    tmp = seal.with_name(temp_prefix(seal.name) + "seal")
    tmp.write_text(content_digest(manifest) + "\n")
    os.replace(tmp, seal)


def unsealed(stamp: Path, manifest: Manifest) -> str:
    """``""`` when the seal beside ``stamp`` vouches for ``manifest``, else what is wrong."""
    seal = seal_path(stamp)
    try:
        found = inputs.read_text(seal, kind="manifest", error=SourceError, nofollow=True, max_bytes=256).strip()
    except HarnessError as e:
        return f"its seal cannot be read ({e})"
    if found != content_digest(manifest):
        return (f"the manifest in {stamp} does not match its seal {seal} (sha256 {found[:64]!r}): "
                "it was edited after the tree was made, so it cannot vouch for the tree")
    return ""


# --- downloads ---------------------------------------------------------------------------


def check_file_name(name: str, *, what: str) -> str:
    """``name`` when it is a bare file name (no ``/``, no ``..``, not absolute, no control
    characters, at most :data:`MAX_FILE_NAME` bytes); :class:`SourceError` naming ``what``."""
    bad = (not name or name in (".", "..") or any(c in name for c in "/\\") or any(ord(c) < 32 for c in name)
           or len(name.encode(errors="surrogateescape")) > MAX_FILE_NAME)
    if bad:
        msg = (f"{what} {name[:80]!r} is not a bare file name: no '/', '\\', '..', control characters, "
               f"at most {MAX_FILE_NAME} bytes; fix {what}")
        raise SourceError(msg)
    return name


def archive_path(owner: str, sha256: str, filename: str) -> Path:
    """``downloads/<owner>/<sha256>/<filename>``: where the archive ``owner`` (an engine) pins
    is kept. Per owner and hash, so a descriptor with the same file name and another (or a
    wrong) hash never touches another's archive."""
    check_file_name(owner, what="the engine name")
    check_file_name(filename, what="source.filename")
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        msg = f"source.sha256 {sha256[:80]!r} is not 64 lowercase hex digits; fix source.sha256"
        raise SourceError(msg)
    return paths.downloads_dir() / owner / sha256 / filename


def legacy_archive_path(filename: str) -> Path:
    """Where harness versions before per-engine downloads kept an archive: ``downloads/<filename>``."""
    return paths.downloads_dir() / check_file_name(filename, what="source.filename")


def sha256_archive(path: Path) -> str:
    """sha256 of the archive (or partial download) at ``path``: a regular file within the
    archive limit, read without ever blocking; :class:`SourceError` for anything else."""
    h = hashlib.sha256()
    with inputs.open_input(path, kind="archive", error=SourceError) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _download_lock(dest: Path) -> FileLock:
    h = hashlib.sha256(str(dest.absolute()).encode()).hexdigest()[:16]
    return FileLock(str(paths.locks_dir() / f"download-{dest.name[:100]}-{h}.lock"))


def download(url: str | Callable[[], str], dest: Path, *, sha256: str,
             progress: Progress | None = None, label: str | None = None,
             adopt: Path | None = None, missing: str = "") -> Path:
    """Download ``url`` to ``dest`` (atomically, under a lock) and verify its sha256.

    A file already at ``dest`` with the right hash is reused. One with the wrong hash is moved
    aside to ``<name>.bad-<time>-<pid>`` and downloaded again, once; when the new bytes are wrong
    too, :class:`ChecksumError` names both hashes and the full path. Moved-aside copies are
    pruned (:func:`prune_bad`). Anything at ``dest`` that is not a regular file (a directory, a
    FIFO) is refused, never read. Concurrent calls for the same ``dest`` download once. ``url``
    may be a callable, called only when a download is needed; with ``label`` (and no
    ``progress``) a progress bar shows while downloading. ``adopt``: a file an older harness
    downloaded, linked into place (never moved) when its hash is right. ``missing``: said, after
    the path, when ``dest`` is absent and has to be downloaded.

    The bytes go to ``<name>.partial`` first. A transient failure (5xx, timeout, reset) is
    retried with backoff from where it stopped (an HTTP Range request), and a partial left by a
    failed or killed run is resumed by the next; bytes joined that way are verified like any
    others, and downloaded again from the start once when the whole does not verify.
    """
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        msg = f"cannot make the download directory {dest.parent}: {e.strerror or e}; remove what is in the way"
        raise SourceError(msg) from None
    with _download_lock(dest):
        sweep_stale(dest.parent)
        prune_bad(dest.parent)
        bad = None
        if dest.exists():
            try:
                found = sha256_archive(dest)
            except SourceError as e:
                msg = f"{e}; it is where the archive is kept: remove it and run the command again"
                raise SourceError(msg) from None
            if found == sha256:
                return dest
            bad = _move_aside(dest)
            notice(f"{dest}: sha256 {found} is not the pinned {sha256}; "
                   f"moved it to {bad} and downloading it again")
        elif adopt is not None and _adopt(adopt, dest, sha256):
            return dest
        elif missing:
            notice(f"{dest}: {missing}")
        _check_partial(partial_path(dest))  # before the index is asked: a bad one is refused offline too
        source = url if isinstance(url, str) else url()
        if progress or not label:
            return _fetch(source, dest, sha256=sha256, progress=progress, bad=bad)
        with ui.bytes_task(label) as cb:
            return _fetch(source, dest, sha256=sha256, progress=cb, bad=bad)


def _adopt(legacy: Path, dest: Path, sha256: str) -> bool:
    """Link ``legacy`` to ``dest`` when it is a regular file with the pinned hash (left where it is:
    an older harness may still use it)."""
    try:
        if not legacy.is_file() or sha256_archive(legacy) != sha256:
            return False
    except (OSError, HarnessError):
        return False
    tmp = dest.with_name(temp_prefix(dest.name) + "adopt")
    try:
        os.link(legacy, tmp)
    except OSError:
        shutil.copyfile(legacy, tmp)
    if sha256_archive(tmp) != sha256:  # changed while it was linked or copied
        tmp.unlink()
        return False
    tmp.replace(dest)
    notice(f"{dest}: taken from {legacy} (where an older harness kept it; sha256 verified)")
    return True


def _move_aside(path: Path) -> Path:
    bad = path.with_name(f"{path.name}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    path.replace(bad)
    return bad


def prune_bad(directory: Path, *, keep: int = KEEP_BAD, keep_s: float = KEEP_BAD_S) -> list[Path]:
    """Remove moved-aside wrong archives (``<name>.bad-<time>-<pid>``) beyond the ``keep``
    newest of each name that are older than ``keep_s`` seconds; returns what was removed."""
    groups: dict[str, list[tuple[float, str, Path]]] = {}
    for entry in directory.iterdir() if directory.is_dir() else ():
        m = _BAD.match(entry.name)
        if not m:
            continue
        try:
            at = time.mktime(time.strptime(m["at"], "%Y%m%dT%H%M%S"))
        except ValueError:
            continue
        groups.setdefault(m["name"], []).append((at, entry.name, entry))
    now, gone = time.time(), []
    for entries in groups.values():
        for at, _, entry in sorted(entries, reverse=True)[keep:]:
            if now - at > keep_s and not entry.is_dir():
                entry.unlink(missing_ok=True)
                gone.append(entry)
    if gone:
        notice(f"{directory}: removed {len(gone)} wrong download(s) moved aside more than "
               f"{keep_s / 3600:.0f} h ago (the newest {keep} of each name are kept)")
    return gone


def partial_path(dest: Path) -> Path:
    """Where the bytes of ``dest`` collect while it downloads (kept across runs to resume)."""
    return dest.with_name(f"{dest.name}.partial")


def _check_partial(part: Path) -> None:
    """A partial download is resumed only from a regular file of ours: a symlink there would
    have the download appended to whatever it points at, a FIFO would block."""
    try:
        st = part.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        msg = f"the partial download {part} is {what}; remove it and run the command again"
        raise SourceError(msg)


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
        with inputs.open_input(part, kind="archive", error=SourceError, nofollow=True) as f:
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
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_APPEND if done else os.O_TRUNC)
            with os.fdopen(os.open(part, flags, 0o644), "wb") as f:
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
    found = sha256_archive(path)
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
                label: str, repair_hint: str, anchored: bool = False) -> tuple[Path, bool]:
    """``root`` holding a verified ``tree/``; made by ``create(tree_dir)`` when absent.

    Returns ``(root, created_now)``. Safe under concurrency (a lock per ``root``) and
    interruption (built in a temporary, stamped, renamed into place). A stamped tree that
    differs from its manifest raises :class:`IntegrityError` (``label`` says where it came
    from, ``repair_hint`` what to run), or is re-created under ``checking(repair=True)``.

    ``anchored``: ``create`` makes the tree from something pinned outside the cache (an archive
    whose sha256 it verifies). Then a full check (``harness fetch --verify`` / ``--repair``) never
    trusts the manifest and its seal, which sit in the same writable cache as the tree: it makes
    the tree again in a scratch directory and compares the two (:func:`_check_anchored`).
    """
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(paths.locks_dir() / f"source-{root.name}.lock")):
        sweep_stale(root.parent)
        sweep_stale(root)
        manifest = _recorded_manifest(root)
        if manifest is not None:
            problem = (_check_anchored(root, create, manifest, label=label)
                       if anchored and current_checking().full else _check_stamped(root, manifest, label=label))
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
    current = stamp is not None and stamp.get("key") == root.name and stamp.get("manifest_version") == MANIFEST_VERSION
    manifest = manifest_from_json(stamp.get("manifest")) if stamp and current else None
    if stamp is not None and manifest is None:
        notice(f"{root}: made by an older harness (no manifest of every file, directory and mode); making it again")
    return manifest


def _check_stamped(root: Path, manifest: Manifest, *, label: str) -> str:
    """``""`` when ``root/tree`` matches ``manifest`` and the seal vouches for the manifest,
    else what is wrong (files named)."""
    tree = root / "tree"
    seal = unsealed(root / STAMP, manifest)
    if seal:
        return f"the cached source tree {tree} cannot be trusted: {seal}"
    check = check_tree(tree, manifest, full=current_checking().full)
    if check.restat:
        _record_restat(root, check.restat)
    if check.ok:
        return ""
    return (f"the cached source tree {tree} is damaged: expected the {len(manifest)} files and directories "
            f"recorded when it was made from {label}; {check.describe(tree)}")


def _check_anchored(root: Path, create: Callable[[Path], None], recorded: Manifest, *, label: str) -> str:
    """``""`` when ``root/tree`` is what ``create`` makes (the archive's every member, by content,
    kind and mode, and nothing else), else what differs. The stamp's manifest is not consulted;
    when the tree verifies and the stamp's manifest (or its seal) says otherwise, both are written
    again from the tree, so that the fast check of later uses is right too."""
    tree = root / "tree"
    scratch = temp_dir(root.parent, f"{root.name}-verify")
    try:
        create(scratch / "tree")
        make_read_only(scratch / "tree")
        expected = scan_tree(scratch / "tree")
    finally:
        remove(scratch)
    check = check_tree(tree, expected, full=True)
    if not check.ok:
        return (f"the cached source tree {tree} differs from {label} itself (every member of the archive "
                f"compared by content, kind and mode; anything else in the tree counted as added); "
                f"{check.describe(tree)}")
    if content_digest(recorded) != content_digest(expected) or unsealed(root / STAMP, recorded):
        stamp = read_json(root / STAMP) or {}
        manifest = scan_tree(tree)
        write_json(root / STAMP, {**stamp, "manifest": manifest_to_json(manifest)})
        write_seal(root / STAMP, manifest)
        notice(f"{root / STAMP}: its manifest or seal did not describe the tree, which matches the archive: "
               "written again from the tree")
    return ""


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
        write_seal(tmp / STAMP, manifest)
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
                       label=f"{name} (sha256 {sha256})", repair_hint=hint, anchored=True)


def make_read_only(tree: Path) -> None:
    """The pristine source is never modified: drop write bits on files."""
    for dirpath, _dirnames, filenames in os.walk(tree):
        for fn in filenames:
            p = Path(dirpath, fn)
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & ~0o222)


def tree_subdir(tree: Path, subdir: str) -> Path:
    """``tree / subdir`` (``tree`` for ``""``): a relative path that stays inside ``tree``, symlinks
    resolved; :class:`SourceError` naming ``source.subdir`` otherwise. Whether it exists is the
    caller's to say."""
    if not subdir:
        return tree
    rel = PurePosixPath(subdir)
    if rel.is_absolute() or ".." in rel.parts or "\\" in subdir or any(ord(c) < 32 for c in subdir):
        msg = f"source.subdir {subdir[:200]!r} must be a relative path inside the source tree (no '..', not absolute)"
        raise SourceError(msg)
    path = tree / subdir
    if not path.resolve().is_relative_to(tree.resolve()):
        msg = (f"source.subdir {subdir[:200]!r} leads outside the source tree {tree} (to {path.resolve()}, "
               "through a symlink); fix source.subdir")
        raise SourceError(msg)
    return path


def refuse_byte_code(tree: Path, *, hint: str) -> None:
    """Before Python runs from ``tree``: :class:`SourceError` when it holds byte code (a
    ``__pycache__`` or a ``.pyc``), which Python would run instead of the sources the manifest
    vouches for. Nothing writes byte code there (:func:`python_env`); ``hint`` says how to get
    a clean tree."""
    for dirpath, dirnames, filenames in os.walk(tree):
        found = [n for n in dirnames if n == "__pycache__"] + [n for n in filenames if n.endswith(".pyc")]
        if found:
            msg = (f"{Path(dirpath, found[0])}: byte code in {tree}, which Python would run instead of the "
                   f"verified sources; refusing to run Python from it. {hint}")
            raise SourceError(msg)


def python_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a Python that imports modules from a cached tree (the GGUF converter and its
    ``gguf-py``): no byte code written into the tree (run it with ``-B`` too, and check the tree
    with :func:`refuse_byte_code` first)."""
    return {**env, "PYTHONDONTWRITEBYTECODE": "1"}


def single_top_dir(tree: Path) -> Path:
    """An sdist has one top-level directory; return it (or ``tree`` itself)."""
    entries = [p for p in tree.iterdir() if not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else tree
