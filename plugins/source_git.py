"""Source kind ``git``: a repository URL at a pinned commit."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from filelock import FileLock

from harness import paths
from harness.errors import SourceError, SubprocessError
from harness.plugin import hookimpl
from harness.source import _make_read_only
from harness.types import SourceSpec, SourceTree

KIND = "git"


def _git(*args: str, cwd: Path | None = None) -> str:
    argv = ["git", *args]
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if r.returncode:
        raise SubprocessError(argv, r.returncode, r.stdout + r.stderr)
    return r.stdout.strip()


@hookimpl
def harness_source_kinds() -> list[str]:
    return [KIND]


@hookimpl
def harness_source_fetch(engine: str, spec: SourceSpec, cache_dir: Path) -> SourceTree | None:
    if spec.kind != KIND:
        return None
    if len(spec.commit) != 40:
        msg = f"git source for {engine} must pin a full 40-hex commit, found {spec.commit!r}"
        raise SourceError(msg)
    root = cache_dir / f"git-{spec.commit}"
    stamp = root / ".harness-source.json"
    fetched = False
    with FileLock(str(paths.locks_dir() / f"source-git-{spec.commit}.lock")):
        if not stamp.exists():
            shutil.rmtree(root, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=".git-", dir=cache_dir))
            try:
                tree = tmp / "tree"
                tree.mkdir()
                _git("init", "-q", str(tree))
                _git("fetch", "-q", "--depth=1", spec.url, spec.commit, cwd=tree)
                _git("checkout", "-q", "FETCH_HEAD", cwd=tree)
                head = _git("rev-parse", "HEAD", cwd=tree)
                if head != spec.commit:
                    msg = f"{spec.url} gave commit {head}, expected {spec.commit}"
                    raise SourceError(msg)
                shutil.rmtree(tree / ".git")
                _make_read_only(tree)
                tmp.rename(root)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            stamp.write_text(json.dumps({"kind": KIND, "url": spec.url, "commit": spec.commit,
                                         "fetched_at": time.time()}))
            fetched = True
    path = root / "tree" / spec.subdir if spec.subdir else root / "tree"
    return SourceTree(engine=engine, pin=spec.pin, path=path, digest=spec.commit, fetched=fetched)
