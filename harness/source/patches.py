"""The patch series: ordered ``engines/<engine>/patches/NNNN-topic.patch`` applied with ``git apply``.

Never fuzzy: a patch that does not apply fails the run loudly, because a pin
silently missing a promised fix is worse than a red build.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from harness.core import inputs, paths
from harness.core.errors import IntegrityError, PatchError
from harness.core.types import PatchedTree, PatchOutcome, SourceTree
from harness.source.cache import (
    current_checking,
    notice,
    read_json,
    remove,
    seal_path,
    sweep_stale,
    temp_dir,
    unsealed,
    write_json,
    write_seal,
)
from harness.source.confine import check_links_inside, check_patch
from harness.source.manifest import (
    VERSION,
    check_tree,
    manifest_from_json,
    manifest_to_json,
    scan_tree,
    sha256_file,
)

STAMP = ".harness-patched.json"
HEADER_KEYS = ("Subject", "Why", "Upstream", "Retire-when")
_NAME = re.compile(r"^\d{4}-[a-z0-9][a-z0-9._-]*\.patch$")


@dataclass(frozen=True, kw_only=True)
class Patch:
    """One patch of the series: its bytes are read once (:func:`read_patch`) and every later use
    (the series hash, the path checks, ``git apply`` on stdin) sees those bytes, never the file again."""

    path: Path
    header: dict[str, str]
    data: bytes = field(repr=False)

    @property
    def name(self) -> str:
        return self.path.name


def read_patch(path: Path) -> bytes:
    """The bytes of a patch file: a regular file within the ``patch`` limit, opened without ever
    blocking (a FIFO or ``/dev/zero`` in the series is a :class:`PatchError` naming it)."""
    try:
        return inputs.read_bytes(path, kind="patch", error=PatchError)
    except PatchError as e:
        msg = f"{e}; a patch of the series is a regular text file: put the patch's text there or remove it"
        raise PatchError(msg) from None


def _text(data: bytes) -> str:
    # A hunk may carry any bytes; the header and the paths are read as UTF-8, the rest is kept.
    return data.decode("utf-8", errors="surrogateescape")


def parse_header(path: Path | bytes) -> dict[str, str]:
    """Read ``Key: value`` lines (with indented continuations) before the diff."""
    header: dict[str, str] = {}
    key = None
    data = path if isinstance(path, bytes) else read_patch(path)
    for line in _text(data).splitlines():
        if line.startswith(("diff --git", "---", "+++", "@@")):
            break
        m = re.match(r"^([A-Za-z-]+):\s?(.*)$", line)
        if m:
            key = m.group(1)
            header[key] = m.group(2).strip()
        elif key and line.startswith((" ", "\t")):
            header[key] += " " + line.strip()
    return header


def load_series(directory: Path) -> list[Patch]:
    """The series in order; each file must be ``NNNN-topic.patch`` with a full header."""
    if not directory.is_dir():
        return []
    series = []
    for p in sorted(directory.glob("*.patch")):
        if not _NAME.match(p.name):
            msg = f"{p}: patch files are named NNNN-topic.patch (lowercase), found {p.name!r}"
            raise PatchError(msg)
        data = read_patch(p)
        header = parse_header(data)
        missing = [k for k in HEADER_KEYS if not header.get(k)]
        if missing:
            msg = f"{p}: header lacks {', '.join(missing)}; every patch says why, its upstream status and when to retire it"
            raise PatchError(msg)
        series.append(Patch(path=p, header=header, data=data))
    return series


def series_hash(series: list[Patch]) -> str:
    h = hashlib.sha256()
    for p in series:
        h.update(p.name.encode() + b"\0" + p.data + b"\0")
    return h.hexdigest()


def _git_apply(tree: Path, patch: Patch, *extra: str) -> subprocess.CompletedProcess[str]:
    # The patch goes on stdin: git applies the bytes that were checked, not the file as it is now.
    argv = ["git", "apply", "--verbose", *extra, "-"]
    # The ceiling keeps git from treating an enclosing repository as the target,
    # in which case it would silently skip paths outside that repository.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    r = subprocess.run(argv, cwd=tree, input=patch.data, capture_output=True, check=False, env=env)
    return subprocess.CompletedProcess(r.args, r.returncode, _text(r.stdout), _text(r.stderr))


def _failure_detail(output: str) -> str:
    keep = [ln for ln in output.splitlines() if ln.startswith(("error:", "Checking", "Hunk", "warning:"))
            or "patch failed" in ln or "does not apply" in ln]
    return "\n".join(keep or output.splitlines()[-10:])


def confine_series(tree: Path, series: list[Patch]) -> dict[str, list[str]]:
    """Every patch of the series checked against ``tree`` (the pristine source) before any is
    applied (:func:`harness.source.confine.check_patch`: paths inside the tree, no symlink on the
    way, links that point inside); :class:`PatchError` naming the patch otherwise. Returns the
    paths each patch touches, by patch name."""
    links: dict[str, str] = {}
    return {p.name: check_patch(tree, p.path, p.data, links) for p in series}


def check_series(source: SourceTree, series: list[Patch]) -> list[PatchOutcome]:
    """Per patch: ``applies``, ``already-upstream`` (applies in reverse: retire it), or ``conflicts``.

    Works on a scratch copy of only the touched files, applying cumulatively. A patch that
    leaves the tree is refused first (:func:`confine_series`), before any file is copied.
    """
    outcomes = []
    touched = confine_series(source.path, series)
    with tempfile.TemporaryDirectory(prefix="harness-patch-check-") as tmp:
        scratch = Path(tmp) / "tree"
        scratch.mkdir()
        for p in series:
            for rel in touched[p.name]:
                _copy_entry(source.path / rel, scratch / rel)
        for p in series:
            fwd = _git_apply(scratch, p, "--check")
            if fwd.returncode == 0:
                _git_apply(scratch, p)
                outcomes.append(PatchOutcome(patch=p.path, status="applies"))
                continue
            rev = _git_apply(scratch, p, "--check", "--reverse")
            if rev.returncode == 0:
                outcomes.append(PatchOutcome(patch=p.path, status="already-upstream",
                                             detail=f"applies in reverse: retire it ({p.header.get('Retire-when', '')})"))
            else:
                outcomes.append(PatchOutcome(patch=p.path, status="conflicts",
                                             detail=_failure_detail(fwd.stdout + fwd.stderr)))
        check_links_inside(scratch)
    return outcomes


def _copy_entry(src: Path, dst: Path) -> None:
    """``src`` into the scratch tree as what it is: a symlink as a symlink (never followed), a
    regular file by its bytes; anything else (or nothing) is left out."""
    if dst.exists() or dst.is_symlink():
        return
    if src.is_symlink():
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.symlink_to(os.readlink(src))
    elif src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst, follow_symlinks=False)


def copy_dir(source: SourceTree, series_hash_: str, *, engine: str) -> Path:
    """``work/<engine>-<pin>-<source digest>-<series hash>`` (prefixes; the stamp holds both in full)."""
    return paths.work_dir() / f"{engine}-{source.pin}-{source.digest[:12]}-{series_hash_[:12]}"


def apply_series(source: SourceTree, series: list[Patch], *, engine: str) -> PatchedTree:
    """Apply the series to a fresh working copy; a no-op when the stamped copy is intact.

    The copy is checked at every use against the manifest stamped when it was made (with
    the full digest of the pristine source and the full series hash, sealed beside it): cheaply
    (stat, then a rehash of the files whose stat moved) or fully under ``checking(full=True)``.
    A copy that was edited (a file or directory changed, added or removed, a mode changed, a
    ``.pyc`` written: nothing is skipped) or whose stamp was edited is **re-created** from the verified
    pristine tree and the series, and the output names the files that were discarded:
    the copy is derived data, and a change belongs in ``engines/<engine>/patches/``. Files whose
    content differs from the discarded copy get a fresh mtime, so an incremental build in
    ``<copy>/build/`` recompiles exactly those.
    """
    sh = series_hash(series)
    dest = copy_dir(source, sh, engine=engine)
    outcomes = tuple(PatchOutcome(patch=p.path, status="applied") for p in series)
    with _lock(dest):
        sweep_stale(paths.work_dir())
        if dest.is_dir():
            sweep_stale(dest)
        problem = copy_problem(dest, source, sh)
        if problem is None and current_checking().full:
            problem = _rederived_problem(dest, source, series, engine=engine) or None
        if problem is None:
            return PatchedTree(engine=engine, pin=source.pin, path=dest / "tree", series_hash=sh,
                               patches=outcomes, applied=False)
        if problem:
            notice(f"{problem}\nre-creating it from the verified pristine tree {source.path} "
                   "and the series (changes belong in a patch, not in the copy)")
        _make_copy(dest, source, series, sh=sh, engine=engine)
    return PatchedTree(engine=engine, pin=source.pin, path=dest / "tree", series_hash=sh,
                       patches=outcomes, applied=True)


def copy_state(source: SourceTree, series: list[Patch], *, engine: str) -> tuple[Path, str | None]:
    """``(copy tree, problem)`` without changing the copy: problem as :func:`copy_problem`."""
    sh = series_hash(series)
    dest = copy_dir(source, sh, engine=engine)
    with _lock(dest):
        return dest / "tree", copy_problem(dest, source, sh)


def _lock(dest: Path) -> FileLock:
    return FileLock(str(paths.locks_dir() / f"patch-{dest.name}.lock"))


def copy_problem(dest: Path, source: SourceTree, sh: str) -> str | None:
    """None when the stamped copy at ``dest`` is intact; ``""`` when there is none to check
    (absent, or made by an older harness); else what is wrong with it, files named."""
    stamp = read_json(dest / STAMP)
    current = stamp is not None and stamp.get("manifest_version") == VERSION
    manifest = manifest_from_json(stamp.get("manifest")) if stamp and current else None
    if stamp is None or manifest is None:
        return ""
    if (stamp.get("source_digest"), stamp.get("series_hash")) != (source.digest, sh):
        return (f"the patched working copy {dest / 'tree'} was made from source {stamp.get('source_digest')} "
                f"with series {stamp.get('series_hash')}; expected {source.digest} with {sh}")
    tree = dest / "tree"
    seal = unsealed(dest / STAMP, manifest)
    if seal:
        return f"the patched working copy {tree} cannot be trusted: {seal}"
    check = check_tree(tree, manifest, full=current_checking().full)
    if check.restat:
        stamp["manifest"] = {**manifest_to_json(manifest), **manifest_to_json(check.restat)}
        write_json(dest / STAMP, stamp)
    if check.ok:
        return None
    return (f"the patched working copy {tree} was edited after it was made: expected the "
            f"{len(manifest)} files of the pristine source with the series applied; {check.describe(tree)}")


def _rederived_problem(dest: Path, source: SourceTree, series: list[Patch], *, engine: str) -> str:
    """``""`` when the copy at ``dest`` is what the series makes of the verified pristine tree, made
    again now in a scratch directory and compared file by file (content, kind, mode); else what
    differs. Its stamp and seal are not consulted: they sit in the same writable cache as the copy,
    and a forged copy comes with a manifest and a seal rewritten to match it.

    Under ``--verify`` a difference is an :class:`IntegrityError` and the copy's stamp is removed
    (no later command uses it before it is made again); under ``--repair`` it is re-created."""
    scratch = temp_dir(paths.work_dir(), f"{dest.name}-verify")
    try:
        _derive(scratch / "tree", source, series, engine=engine)
        expected = scan_tree(scratch / "tree")
    finally:
        remove(scratch)
    check = check_tree(dest / "tree", expected, full=True)
    if check.ok:
        return ""
    problem = (f"the patched working copy {dest / 'tree'} differs from the verified pristine tree {source.path} "
               f"with the series applied again now (its manifest and seal describe the copy as it is: they were "
               f"rewritten with it); {check.describe(dest / 'tree')}")
    if not current_checking().repair:
        (dest / STAMP).unlink(missing_ok=True)
        msg = (f"{problem}\nIts stamp is removed, so no command builds it. Run `harness fetch --repair {engine}` "
               f"(or `harness patch {engine}`) to make it again from the pristine tree and the series")
        raise IntegrityError(msg)
    return problem


def _derive(tree: Path, source: SourceTree, series: list[Patch], *, engine: str) -> None:
    """The working copy at ``tree``: the pristine tree copied, the series applied, links checked."""
    # A vendored submodule's `.git` file points at a repository the sdist lacks; git
    # would then refuse to apply anything. Byte code is derived, never copied.
    shutil.copytree(source.path, tree, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    _make_writable(tree)
    for p in series:
        _apply_one(tree, p, source, engine=engine)
    check_links_inside(tree)


def _make_copy(dest: Path, source: SourceTree, series: list[Patch], *, sh: str, engine: str) -> None:
    # A hostile series is refused before anything is copied (as fast as `harness patch --check`).
    confine_series(source.path, series)
    tmp = temp_dir(paths.work_dir(), dest.name)
    try:
        tree = tmp / "tree"
        _derive(tree, source, series, engine=engine)
        if (dest / "tree").is_dir():
            _carry_mtimes(dest / "tree", tree)
        manifest = scan_tree(tree)
        write_json(tmp / STAMP, {"engine": engine, "pin": source.pin, "source": str(source.path),
                                 "source_digest": source.digest, "series_hash": sh,
                                 "patches": [p.name for p in series], "applied_at": time.time(),
                                 "manifest_version": VERSION, "manifest": manifest_to_json(manifest)})
        write_seal(tmp / STAMP, manifest)
        _swap_in(tmp, dest)
    finally:
        remove(tmp)


def _apply_one(tree: Path, p: Patch, source: SourceTree, *, engine: str) -> None:
    r = _git_apply(tree, p)
    if r.returncode != 0:
        msg = (f"patch {p.path} does not apply to {engine} {source.pin}:\n"
               f"{_failure_detail(r.stdout + r.stderr)}\n"
               f"The pristine source at {source.path} is untouched. Rebase the patch on the new pin, "
               "or delete it if `harness patch --check` says it is already upstream.")
        raise PatchError(msg)


def _carry_mtimes(old: Path, new: Path) -> None:
    """A file whose content is what the old copy had keeps the old mtime; any other gets now,
    so the build dirs beside the copy recompile exactly what changed."""
    now = time.time_ns()
    for dirpath, _dirnames, filenames in os.walk(new):
        for fn in filenames:
            path = Path(dirpath, fn)
            if path.is_symlink():
                continue
            before = old / path.relative_to(new)
            same = (before.is_file() and not before.is_symlink()
                    and before.stat().st_size == path.stat().st_size and sha256_file(before) == sha256_file(path))
            ns = before.stat().st_mtime_ns if same else now
            os.utime(path, ns=(ns, ns))


def _swap_in(tmp: Path, dest: Path) -> None:
    """Put ``tmp/tree`` and its stamp at ``dest``, keeping ``dest/build``; the old tree goes
    into ``tmp`` (removed by the caller, or swept as debris after a crash)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / STAMP).unlink(missing_ok=True)
    if (dest / "tree").exists():
        (dest / "tree").rename(tmp / "old-tree")
    (tmp / "tree").rename(dest / "tree")
    os.replace(seal_path(tmp / STAMP), seal_path(dest / STAMP))
    os.replace(tmp / STAMP, dest / STAMP)


def _make_writable(tree: Path) -> None:
    for p in tree.rglob("*"):
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)
