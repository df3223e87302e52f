"""Source kind ``pypi-sdist``: a pinned sdist from the package indexes pip is configured with.

The archive is kept at ``downloads/<engine>/<sha256>/<filename>`` (:func:`harness.source.cache.archive_path`);
``harness fetch --verify`` and ``--repair`` leave a verified archive there, downloading it again
when it is missing (and saying so), so that a later repair needs no network.
"""

from __future__ import annotations

from pathlib import Path

from harness.core.errors import SourceError
from harness.core.types import SourceSpec, SourceTree
from harness.engine.plugin import hookimpl

KIND = "pypi-sdist"


def resolve_url(spec: SourceSpec) -> str:
    """The download URL of ``spec.filename`` on the configured indexes (:mod:`harness.source.index`)."""
    from harness.source import index
    return index.find_file(spec.package, spec.filename,
                           hint="Check source.version and source.filename in the engine descriptor").url


@hookimpl
def harness_source_kinds() -> list[str]:
    return [KIND]


def fetch_archive(engine: str, spec: SourceSpec, *, missing: str = "") -> Path:
    """The verified archive in the downloads cache: downloaded (under a lock) when absent or
    wrong, a wrong one moved aside first; one an older harness kept in ``downloads/`` is
    taken when its hash is right."""
    from harness.source.cache import archive_path, download, legacy_archive_path
    archive = archive_path(engine, spec.sha256, spec.filename)
    return download(lambda: resolve_url(spec), archive, sha256=spec.sha256, label=f"download {spec.filename}",
                    adopt=legacy_archive_path(spec.filename), missing=missing)


@hookimpl
def harness_source_fetch(engine: str, spec: SourceSpec, cache_dir: Path) -> SourceTree | None:
    from harness.source.cache import current_checking, extract_once, single_top_dir, tree_subdir
    if spec.kind != KIND:
        return None
    if current_checking().full:  # verify the archive as well; a corrupt or missing one is fetched again
        fetch_archive(engine, spec, missing="no archive there (moved or deleted); downloading it again")
    root, fetched = extract_once(
        lambda: fetch_archive(engine, spec), spec.sha256, cache_dir=cache_dir,
        meta={"kind": KIND, "package": spec.package, "version": spec.version, "filename": spec.filename},
        repair_hint=f"Run `harness fetch --repair {engine}` to extract it again from the verified archive "
                    "(downloaded again only when it is missing or corrupt).")
    tree = single_top_dir(root / "tree")
    path = tree_subdir(tree, spec.subdir)
    if not path.is_dir():
        msg = (f"{spec.filename} (verified, extracted intact at {root / 'tree'}) has no {spec.subdir!r} "
               f"directory under {tree}; fix source.subdir in the {engine} engine descriptor")
        raise SourceError(msg)
    return SourceTree(engine=engine, pin=spec.pin, path=path, digest=spec.sha256, fetched=fetched)
