"""The patch series: ordered ``patches/<engine>/NNNN-topic.patch`` applied with ``git apply``.

Never fuzzy: a patch that does not apply fails the run loudly, because a pin
silently missing a promised fix is worse than a red build.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from harness import paths
from harness.errors import PatchError
from harness.types import PatchedTree, PatchOutcome, SourceTree

STAMP = ".harness-patched.json"
HEADER_KEYS = ("Subject", "Why", "Upstream", "Retire-when")
_NAME = re.compile(r"^\d{4}-[a-z0-9][a-z0-9._-]*\.patch$")


@dataclass(frozen=True, kw_only=True)
class Patch:
    path: Path
    header: dict[str, str]

    @property
    def name(self) -> str:
        return self.path.name


def parse_header(path: Path) -> dict[str, str]:
    """Read ``Key: value`` lines (with indented continuations) before the diff."""
    header: dict[str, str] = {}
    key = None
    for line in path.read_text().splitlines():
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
        header = parse_header(p)
        missing = [k for k in HEADER_KEYS if not header.get(k)]
        if missing:
            msg = f"{p}: header lacks {', '.join(missing)}; every patch says why, its upstream status and when to retire it"
            raise PatchError(msg)
        series.append(Patch(path=p, header=header))
    return series


def series_hash(series: list[Patch]) -> str:
    h = hashlib.sha256()
    for p in series:
        h.update(p.name.encode() + b"\0" + p.path.read_bytes() + b"\0")
    return h.hexdigest()


def _git_apply(tree: Path, patch: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["git", "apply", "--verbose", *extra, str(patch.resolve())]
    # The ceiling keeps git from treating an enclosing repository as the target,
    # in which case it would silently skip paths outside that repository.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    return subprocess.run(argv, cwd=tree, capture_output=True, text=True, check=False, env=env)


def _failure_detail(output: str) -> str:
    keep = [ln for ln in output.splitlines() if ln.startswith(("error:", "Checking", "Hunk", "warning:"))
            or "patch failed" in ln or "does not apply" in ln]
    return "\n".join(keep or output.splitlines()[-10:])


def touched_files(patch: Path) -> list[str]:
    files: list[str] = []
    for line in patch.read_text().splitlines():
        m = re.match(r"^diff --git a/(\S+) b/(\S+)$", line)
        if m:
            files.extend({m.group(1), m.group(2)})
    return files


def check_series(source: SourceTree, series: list[Patch]) -> list[PatchOutcome]:
    """Per patch: ``applies``, ``already-upstream`` (applies in reverse: retire it), or ``conflicts``.

    Works on a scratch copy of only the touched files, applying cumulatively.
    """
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="harness-patch-check-") as tmp:
        scratch = Path(tmp) / "tree"
        scratch.mkdir()
        for p in series:
            for rel in touched_files(p.path):
                src, dst = source.path / rel, scratch / rel
                if src.is_file() and not dst.exists():
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dst)
        for p in series:
            fwd = _git_apply(scratch, p.path, "--check")
            if fwd.returncode == 0:
                _git_apply(scratch, p.path)
                outcomes.append(PatchOutcome(patch=p.path, status="applies"))
                continue
            rev = _git_apply(scratch, p.path, "--check", "--reverse")
            if rev.returncode == 0:
                outcomes.append(PatchOutcome(patch=p.path, status="already-upstream",
                                             detail=f"applies in reverse: retire it ({p.header.get('Retire-when', '')})"))
            else:
                outcomes.append(PatchOutcome(patch=p.path, status="conflicts",
                                             detail=_failure_detail(fwd.stdout + fwd.stderr)))
    return outcomes


def apply_series(source: SourceTree, series: list[Patch], *, engine: str) -> PatchedTree:
    """Apply the series to a fresh working copy; a no-op when the stamped copy exists."""
    sh = series_hash(series)
    key = f"{engine}-{source.pin}-{source.digest[:12]}-{sh[:12]}"
    dest = paths.work_dir() / key
    stamp = dest / STAMP
    outcomes = tuple(PatchOutcome(patch=p.path, status="applied") for p in series)
    with FileLock(str(paths.locks_dir() / f"patch-{key}.lock")):
        if stamp.exists():
            return PatchedTree(engine=engine, pin=source.pin, path=dest / "tree", series_hash=sh,
                               patches=outcomes, applied=False)
        shutil.rmtree(dest, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=paths.work_dir()))
        try:
            tree = tmp / "tree"
            # A vendored submodule's `.git` file points at a repository the sdist
            # lacks; git would then refuse to apply anything.
            shutil.copytree(source.path, tree, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            _make_writable(tree)
            for p in series:
                r = _git_apply(tree, p.path)
                if r.returncode != 0:
                    msg = (f"patch {p.path} does not apply to {engine} {source.pin}:\n"
                           f"{_failure_detail(r.stdout + r.stderr)}\n"
                           f"The pristine source at {source.path} is untouched. Rebase the patch on the new pin, "
                           "or delete it if `harness patch --check` says it is already upstream.")
                    raise PatchError(msg)
            tmp.rename(dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        stamp.write_text(json.dumps({"engine": engine, "pin": source.pin, "source": str(source.path),
                                     "series_hash": sh, "patches": [p.name for p in series],
                                     "applied_at": time.time()}, indent=2))
    return PatchedTree(engine=engine, pin=source.pin, path=dest / "tree", series_hash=sh,
                       patches=outcomes, applied=True)


def _make_writable(tree: Path) -> None:
    for p in tree.rglob("*"):
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)
