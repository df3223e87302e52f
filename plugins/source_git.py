"""Source kind ``git``: a repository URL at a pinned commit, cached as ``git-<full commit>``.

``filter: blob:none`` (a partial clone) fetches the commit's trees and only the blobs the
checkout needs; ``sparse: [paths]`` checks out only those paths, for an engine whose build does
not need every file (a mirror without the large test data still serves). A sparse tree holds
other files than the full one, so its cache key adds a hash of the paths:
``git-<full commit>-sparse-<hash12>``. Either way the tree is made once, stamped with its
manifest and checked at every use (:func:`harness.source.cache.ensure_tree`). A mirror that is
itself a partial clone lacks the blobs it never checked out: git's "possible repository corruption"
is answered with those two settings (:func:`_missing_objects`).

A repository on this host is written relative to the project or as ``$HARNESS_MIRRORS/...``; the
descriptor parser hands this plugin its ``file://`` URL (:func:`harness.engine.descriptor.resolve_git_url`).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from harness.core.errors import SourceError, SubprocessError
from harness.core.types import SourceSpec, SourceTree
from harness.engine.confine import (
    LOCAL_UPLOAD_PACK,
    check_git_url,
    run_git,
    upload_pack_args,
)
from harness.engine.plugin import hookimpl

KIND = "git"
REMOTE = "origin"


def _git(*args: str, cwd: Path | None = None) -> str:
    return run_git(*args, cwd=cwd)


def cache_key(spec: SourceSpec) -> str:
    """``git-<commit>``; a sparse checkout adds ``-sparse-<sha256 of its paths, 12 hex>``."""
    if not spec.sparse:
        return f"git-{spec.commit}"
    paths = "\n".join(sorted(p.strip("/") for p in spec.sparse))
    return f"git-{spec.commit}-sparse-{hashlib.sha256(paths.encode()).hexdigest()[:12]}"


#: What git says when the repository it fetches from lacks objects: a partial clone served as a mirror
#: ("could not read" only of an object: "could not read Username" is a server asking for a login).
MISSING_OBJECTS = re.compile(r"possible repository corruption|missing blob|promisor remote|"
                             r"[Cc]ould not read [0-9a-f]{7,}")


def _missing_objects(spec: SourceSpec, e: SubprocessError) -> SourceError | None:
    """A :class:`SourceError` with what to do when ``e`` is git meeting objects the mirror does not have."""
    found = MISSING_OBJECTS.findall(e.output)
    if not found:
        return None
    if not spec.filter:
        todo = ("set `filter: blob:none` in the engine descriptor's source (`harness pin ENGINE "
                "git:URL@REV --filter blob:none`), with `sparse:` naming the paths the build needs (`--sparse PATH`, "
                "repeated)")
    elif not spec.sparse:
        todo = ("name the paths the build needs with `sparse:` in the engine descriptor's source (`harness pin "
                "ENGINE git:URL@REV --filter blob:none --sparse PATH ...`), leaving out what the mirror lacks")
    else:
        todo = (f"the mirror lacks blobs under the sparse paths ({', '.join(spec.sparse)}) too: narrow `sparse:` "
                "to what the build needs")
    msg = (f"{spec.url} lacks objects that commit {spec.commit} needs (git: {found[0]!r}): the mirror is a partial "
           f"clone without its large blobs. Either {todo}, or fetch from a full mirror.\n{e}")
    return SourceError(msg)


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
        if upload_pack_args(spec.url):  # a local mirror: served with the filter allowed, lazy fetches too
            _git("config", f"remote.{REMOTE}.uploadpack", LOCAL_UPLOAD_PACK, cwd=tree)
        fetch += [f"--filter={spec.filter}", "--", REMOTE, spec.commit]
    else:
        fetch += ["--", spec.url, spec.commit]
    try:
        _git(*fetch, cwd=tree)
        if spec.sparse:
            # Non-cone patterns anchored at the root: each path is a file or a whole directory.
            _git("sparse-checkout", "set", "--no-cone", *(f"/{p.strip('/')}" for p in spec.sparse), cwd=tree)
        _git("checkout", "-q", "FETCH_HEAD", cwd=tree)
    except SubprocessError as e:
        raise _missing_objects(spec, e) or e from None
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
