"""Any engine pin as a source tree, for ``abi diff``: a directory, or an sdist version from the index.

The pinned source of the pipeline comes from the engine descriptor with a
committed sha256; an arbitrary other version for a report has no committed hash,
so it is trusted on the sha256 the index publishes (:func:`harness.source.index.find_sdist`),
verified after download.
"""

from __future__ import annotations

from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.core import progress
from harness.core.errors import SourceError, UsageError
from harness.source import index
from harness.source.cache import (
    archive_path,
    download,
    extract_once,
    legacy_archive_path,
    single_top_dir,
    tree_subdir,
)


def find_sdist(package: str, version: str) -> tuple[str, str, str]:
    """``(filename, url, sha256)`` of the sdist of ``package==version`` on the configured indexes."""
    found = index.find_sdist(package, version)
    assert found.sha256  # find_sdist refuses a file without one
    return found.filename, found.url, found.sha256


def fetch_sdist_version(package: str, version: str) -> Path:
    """Download, verify and extract (once) the sdist of ``package==version``; its top directory."""
    filename, url, sha = find_sdist(package, version)
    archive = archive_path(package, sha, filename)  # the index names the file: checked to be a bare name
    if archive.is_file():
        download(url, archive, sha256=sha)  # verifies; fetches again only on a hash mismatch
    else:
        with progress.bytes_task(f"download {filename}") as cb:
            download(url, archive, sha256=sha, progress=cb, adopt=legacy_archive_path(filename))
    root, _ = extract_once(archive, sha, meta={"kind": "pypi-sdist", "package": package, "version": version})
    return single_top_dir(root / "tree")


def resolve_pin(pin: str, *, package: str, subdir: str = "") -> Path:
    """A pin given as a directory (used as is, or its ``subdir`` when present) or a version."""
    p = Path(pin).expanduser()
    if p.is_dir():
        return p / subdir if subdir and (p / subdir).is_dir() else p
    try:
        Version(pin)
    except InvalidVersion:
        msg = f"pin {pin!r} is neither a directory nor a version of {package}"
        raise UsageError(msg) from None
    tree = fetch_sdist_version(package, pin)
    path = tree_subdir(tree, subdir)
    if not path.is_dir():
        msg = f"{package} {pin} has no {subdir!r} directory; this version does not vendor the engine there"
        raise SourceError(msg)
    return path
