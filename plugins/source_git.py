"""Source kind ``git``: a repository URL at a pinned commit, cached as ``git-<full commit>``.

``filter: blob:none`` (a partial clone) fetches the commit's trees and only the blobs the
checkout needs; ``sparse: [paths]`` checks out only those paths, for an engine whose build does
not need every file (a mirror without the large test data still serves). A sparse tree holds
other files than the full one, so its cache key adds a hash of the paths:
``git-<full commit>-sparse-<hash12>``. Either way the tree is made once, stamped with its
manifest and checked at every use (:func:`harness.source.cache.ensure_tree`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from harness.core.errors import SourceError, SubprocessError
from harness.core.types import SourceSpec, SourceTree
from harness.engine.confine import check_git_url, git_env
from harness.engine.plugin import hookimpl

KIND = "git"
REMOTE = "origin"


def _git(*args: str, cwd: Path | None = None) -> str:
    argv = ["git", *args]
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, env=git_env(os.environ))
    if r.returncode:
        raise SubprocessError(argv, r.returncode, r.stdout + r.stderr)
    return r.stdout.strip()


def cache_key(spec: SourceSpec) -> str:
    """``git-<commit>``; a sparse checkout adds ``-sparse-<sha256 of its paths, 12 hex>``."""
    if not spec.sparse:
        return f"git-{spec.commit}"
    paths = "\n".join(sorted(p.strip("/") for p in spec.sparse))
    return f"git-{spec.commit}-sparse-{hashlib.sha256(paths.encode()).hexdigest()[:12]}"


def _checkout(spec: SourceSpec, tree: Path) -> None:
    """Check out exactly ``spec.commit`` into ``tree`` (only ``spec.sparse`` when set), without its ``.git``."""
    tree.mkdir()
    _git("init", "-q", str(tree))
    fetch = ["fetch", "-q", "--depth=1"]
    if spec.filter:
        # A partial clone needs a named promisor remote: checkout fetches the missing blobs from it.
        _git("remote", "add", "--", REMOTE, spec.url, cwd=tree)
        _git("config", f"remote.{REMOTE}.promisor", "true", cwd=tree)
        _git("config", f"remote.{REMOTE}.partialclonefilter", spec.filter, cwd=tree)
        fetch += [f"--filter={spec.filter}", "--", REMOTE, spec.commit]
    else:
        fetch += ["--", spec.url, spec.commit]
    _git(*fetch, cwd=tree)
    if spec.sparse:
        # Non-cone patterns anchored at the root: each path is a file or a whole directory.
        _git("sparse-checkout", "set", "--no-cone", *(f"/{p.strip('/')}" for p in spec.sparse), cwd=tree)
    _git("checkout", "-q", "FETCH_HEAD", cwd=tree)
    head = _git("rev-parse", "HEAD", cwd=tree)
    if head != spec.commit:
        msg = f"{spec.url} gave commit {head}, expected {spec.commit}"
        raise SourceError(msg)
    missing = [p for p in spec.sparse if not (tree / p.strip("/")).exists()]
    if missing:
        msg = (f"{spec.url} at {spec.commit} has no {', '.join(missing)}: fix source.sparse in the engine "
               "descriptor (paths are relative to the repository root)")
        raise SourceError(msg)
    shutil.rmtree(tree / ".git")


@hookimpl
def harness_source_kinds() -> list[str]:
    return [KIND]


@hookimpl
def harness_source_fetch(engine: str, spec: SourceSpec, cache_dir: Path) -> SourceTree | None:
    from harness.source.cache import ensure_tree, tree_subdir
    if spec.kind != KIND:
        return None
    check_git_url(spec.url or "", where=f"the {engine} engine's source.url")
    if len(spec.commit) != 40:
        msg = f"git source for {engine} must pin a full 40-hex commit, found {spec.commit!r}"
        raise SourceError(msg)
    meta: dict[str, object] = {"kind": KIND, "url": spec.url, "commit": spec.commit}
    if spec.filter:
        meta["filter"] = spec.filter
    if spec.sparse:
        meta["sparse"] = sorted(spec.sparse)
    root, fetched = ensure_tree(
        cache_dir / cache_key(spec), create=lambda tree: _checkout(spec, tree), meta=meta,
        label=f"{spec.url} at {spec.commit}" + (f" (sparse: {', '.join(spec.sparse)})" if spec.sparse else ""),
        repair_hint=f"Run `harness fetch --repair {engine}` to check it out again from {spec.url}.")
    path = tree_subdir(root / "tree", spec.subdir)
    if not path.is_dir():
        msg = (f"{spec.url} at {spec.commit} (checked out intact at {root / 'tree'}) has no "
               f"{spec.subdir!r} directory; fix source.subdir in the {engine} engine descriptor")
        raise SourceError(msg)
    # The digest names the content: a sparse tree of a commit is not its full tree.
    digest = cache_key(spec).removeprefix("git-")
    return SourceTree(engine=engine, pin=spec.pin, path=path, digest=digest, fetched=fetched)
