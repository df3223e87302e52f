"""Source kind ``git``: a repository URL at a pinned commit, cached as ``git-<full commit>``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.errors import SourceError, SubprocessError
from harness.plugin import hookimpl
from harness.source import ensure_tree
from harness.types import SourceSpec, SourceTree

KIND = "git"


def _git(*args: str, cwd: Path | None = None) -> str:
    argv = ["git", *args]
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if r.returncode:
        raise SubprocessError(argv, r.returncode, r.stdout + r.stderr)
    return r.stdout.strip()


def _checkout(spec: SourceSpec, tree: Path) -> None:
    """Check out exactly ``spec.commit`` into ``tree``, without its ``.git``."""
    tree.mkdir()
    _git("init", "-q", str(tree))
    _git("fetch", "-q", "--depth=1", spec.url, spec.commit, cwd=tree)
    _git("checkout", "-q", "FETCH_HEAD", cwd=tree)
    head = _git("rev-parse", "HEAD", cwd=tree)
    if head != spec.commit:
        msg = f"{spec.url} gave commit {head}, expected {spec.commit}"
        raise SourceError(msg)
    shutil.rmtree(tree / ".git")


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
    root, fetched = ensure_tree(
        cache_dir / f"git-{spec.commit}", create=lambda tree: _checkout(spec, tree),
        meta={"kind": KIND, "url": spec.url, "commit": spec.commit},
        label=f"{spec.url} at {spec.commit}",
        repair_hint=f"Run `harness fetch --repair {engine}` to check it out again from {spec.url}.")
    path = root / "tree" / spec.subdir if spec.subdir else root / "tree"
    if not path.is_dir():
        msg = (f"{spec.url} at {spec.commit} (checked out intact at {root / 'tree'}) has no "
               f"{spec.subdir!r} directory; fix source.subdir in the {engine} engine descriptor")
        raise SourceError(msg)
    return SourceTree(engine=engine, pin=spec.pin, path=path, digest=spec.commit, fetched=fetched)
