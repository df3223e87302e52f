"""Source kind ``local-archive``: a pinned archive file beside the project, for engines no
registry carries (``git archive`` of an upstream commit, kept at ``../shared/sources/``).

``source.path`` names the file: an absolute path, a ``file://`` URL, a path relative to the
project root the descriptor sits in (the folder holding ``engines/``), or ``$HARNESS_MIRRORS/...``
(what ``harness pin`` writes: :mod:`harness.engine.locations`); the descriptor parser resolves it
(:func:`harness.engine.descriptor.parse_engine`). ``source.sha256`` pins its bytes;
``source.url`` and ``source.commit`` say which upstream repository and commit it is (recorded
in the tree's stamp, and what a user with the network switches to: ``kind: git`` with the same
``url`` and ``commit``).

The file is verified before anything is extracted: it must be a regular file (a FIFO, a
directory or ``/dev/zero`` is refused by what it is) with the pinned sha256 (:class:`ChecksumError`
naming both hashes otherwise). The verified bytes are copied into the downloads cache
(``downloads/<engine>/<sha256>/<file name>``), so a later ``harness fetch --repair`` works even
when the original has moved, and extracted with the sdist kind's safe extraction
(:func:`harness.source.cache.safe_extract`: no member outside the tree, no link leading out of it).
"""

from __future__ import annotations

from pathlib import Path

from harness.core.errors import ChecksumError, SourceError
from harness.core.types import SourceSpec, SourceTree
from harness.engine.plugin import hookimpl

KIND = "local-archive"


@hookimpl
def harness_source_kinds() -> list[str]:
    return [KIND]


def archive_file(spec: SourceSpec) -> Path:
    """The archive the descriptor names (absolute: the parser resolved ``source.path``)."""
    path = Path(spec.path)
    if not path.is_absolute():
        msg = (f"source.path {spec.path[:200]!r} was not resolved against a project root; "
               "load the descriptor with harness.engine.descriptor.load_engine")
        raise SourceError(msg)
    return path


def fetch_archive(engine: str, spec: SourceSpec) -> Path:
    """The verified archive in the downloads cache, copied there from ``source.path``.

    The file at ``source.path`` is hashed first: a wrong one is refused (never copied, never
    extracted) even when the cache holds a good copy, since a person should see it. When the
    file is gone, a verified copy kept in the cache is used (and the output says so).
    """
    from harness.source.cache import archive_path, download, notice, sha256_archive

    src = archive_file(spec)
    dest = archive_path(engine, spec.sha256, src.name)
    if not src.exists() and not src.is_symlink():
        if dest.is_file() and sha256_archive(dest) == spec.sha256:
            notice(f"{src}: not there (moved or deleted); using the verified copy kept at {dest}")
            return dest
        msg = (f"the {engine} source archive {src} does not exist (source.path in its engine descriptor). "
               f"Put the file with sha256 {spec.sha256} there"
               + (f" (upstream: {spec.url} at {spec.commit})" if spec.url else "")
               + ", or fix source.path")
        raise SourceError(msg)
    found = sha256_archive(src)  # a regular file within the archive limit, read without blocking
    if found != spec.sha256:
        raise ChecksumError(f"the {engine} source archive {src}", spec.sha256, found)
    return download(src.as_uri(), dest, sha256=spec.sha256)


@hookimpl
def harness_source_fetch(engine: str, spec: SourceSpec, cache_dir: Path) -> SourceTree | None:
    from harness.source.cache import current_checking, extract_once, single_top_dir, tree_subdir
    if spec.kind != KIND:
        return None
    if len(spec.commit) != 40:
        msg = f"local-archive source for {engine} must record the full 40-hex upstream commit, found {spec.commit!r}"
        raise SourceError(msg)
    if current_checking().full:  # --verify / --repair: the archive itself is rehashed too
        fetch_archive(engine, spec)
    src = archive_file(spec)
    root, fetched = extract_once(
        lambda: fetch_archive(engine, spec), spec.sha256, cache_dir=cache_dir,
        meta={"kind": KIND, "path": str(src), "filename": src.name, "repository": spec.url,
              "commit": spec.commit},
        repair_hint=f"Run `harness fetch --repair {engine}` to extract it again from the verified archive "
                    f"({src}, or the copy kept in the downloads cache).")
    tree = single_top_dir(root / "tree")
    path = tree_subdir(tree, spec.subdir)
    if not path.is_dir():
        msg = (f"{src.name} (verified, extracted intact at {root / 'tree'}) has no {spec.subdir!r} "
               f"directory under {tree}; fix source.subdir in the {engine} engine descriptor")
        raise SourceError(msg)
    return SourceTree(engine=engine, pin=spec.pin, path=path, digest=spec.sha256, fetched=fetched)
