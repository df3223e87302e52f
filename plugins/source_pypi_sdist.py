"""Source kind ``pypi-sdist``: a pinned sdist from a PyPI simple index (PEP 691 JSON)."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

from harness import paths
from harness.errors import SourceError
from harness.plugin import hookimpl
from harness.source import current_checking, download, extract_once, single_top_dir
from harness.types import SourceSpec, SourceTree

KIND = "pypi-sdist"
DEFAULT_INDEX = "https://pypi.org/simple"


def index_url() -> str:
    return os.environ.get("HARNESS_PYPI_INDEX", DEFAULT_INDEX).rstrip("/")


def resolve_url(spec: SourceSpec) -> str:
    """Find the download URL of ``spec.filename`` on the simple index."""
    url = f"{index_url()}/{spec.package}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            data = json.load(r)
    except OSError as e:
        msg = f"cannot read the package index at {url}: {e}. Set HARNESS_PYPI_INDEX to a reachable index"
        raise SourceError(msg) from e
    for f in data.get("files", []):
        if f.get("filename") == spec.filename:
            return str(f["url"])
    msg = f"{spec.filename} is not on {url}; check source.version/filename in the engine descriptor"
    raise SourceError(msg)


@hookimpl
def harness_source_kinds() -> list[str]:
    return [KIND]


def fetch_archive(spec: SourceSpec) -> Path:
    """The verified archive in the downloads cache: downloaded (under a lock) when absent or
    wrong, a wrong one moved aside first."""
    archive = paths.downloads_dir() / spec.filename
    return download(lambda: resolve_url(spec), archive, sha256=spec.sha256,
                    label=f"download {spec.filename}")


@hookimpl
def harness_source_fetch(engine: str, spec: SourceSpec, cache_dir: Path) -> SourceTree | None:
    if spec.kind != KIND:
        return None
    if current_checking().full and (paths.downloads_dir() / spec.filename).exists():
        fetch_archive(spec)  # verify the archive as well; a corrupt one is replaced
    root, fetched = extract_once(
        lambda: fetch_archive(spec), spec.sha256, cache_dir=cache_dir,
        meta={"kind": KIND, "package": spec.package, "version": spec.version, "filename": spec.filename},
        repair_hint=f"Run `harness fetch --repair {engine}` to extract it again from the verified archive "
                    "(downloaded again only when it is missing or corrupt).")
    tree = single_top_dir(root / "tree")
    path = tree / spec.subdir if spec.subdir else tree
    if not path.is_dir():
        msg = (f"{spec.filename} (verified, extracted intact at {root / 'tree'}) has no {spec.subdir!r} "
               f"directory under {tree}; fix source.subdir in the {engine} engine descriptor")
        raise SourceError(msg)
    return SourceTree(engine=engine, pin=spec.pin, path=path, digest=spec.sha256, fetched=fetched)
