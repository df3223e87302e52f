"""Any engine pin as a source tree, for ``abi diff``: a directory, or an sdist version from PyPI.

The pinned source of the pipeline comes from the engine descriptor with a
committed sha256; an arbitrary other version for a report has no committed hash,
so it is trusted on the sha256 the index publishes (PEP 691), verified after download.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness import paths, progress
from harness.errors import SourceError, UsageError
from harness.source import download, extract_once, single_top_dir

DEFAULT_INDEX = "https://pypi.org/simple"
_SDIST_SUFFIXES = (".tar.gz", ".zip")


def index_url() -> str:
    """``$HARNESS_PYPI_INDEX`` (a mirror) or PyPI's simple index."""
    return os.environ.get("HARNESS_PYPI_INDEX", DEFAULT_INDEX).rstrip("/")


def _index(package: str) -> dict[str, Any]:
    url = f"{index_url()}/{canonicalize_name(package)}/"
    req = urllib.request.Request(
        url, headers={"Accept": "application/vnd.pypi.simple.v1+json", "User-Agent": "harness/0.1"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            data = json.load(r)
    except (OSError, ValueError) as e:
        msg = f"cannot read the package index at {url}: {e}. Set HARNESS_PYPI_INDEX to a reachable index"
        raise SourceError(msg) from e
    return dict(data)


def _sdist_version(filename: str, package: str) -> Version | None:
    """The version of an sdist file of ``package`` (``llama_cpp_python-0.3.16.tar.gz``), else None."""
    stem = next((filename[: -len(s)] for s in _SDIST_SUFFIXES if filename.endswith(s)), None)
    if stem is None or "-" not in stem:
        return None
    name, _, version = stem.rpartition("-")
    if canonicalize_name(name) != canonicalize_name(package):
        return None
    try:
        return Version(version)
    except InvalidVersion:
        return None


def find_sdist(package: str, version: str) -> tuple[str, str, str]:
    """``(filename, url, sha256)`` of the sdist of ``package==version`` on the index."""
    want = Version(version)
    files = _index(package).get("files", [])
    for f in files:
        if _sdist_version(str(f.get("filename", "")), package) == want and not f.get("yanked"):
            sha = f.get("hashes", {}).get("sha256")
            if not sha:
                msg = f"{f['filename']} has no sha256 on the index; refusing to use it unverified"
                raise SourceError(msg)
            return str(f["filename"]), str(f["url"]), str(sha)
    versions = sorted({str(v) for f in files if (v := _sdist_version(str(f.get("filename", "")), package))})
    msg = (f"no sdist of {package}=={version} on {index_url()} "
           f"(sdists there: {', '.join(versions[-8:]) or 'none'})")
    raise SourceError(msg)


def fetch_sdist_version(package: str, version: str) -> Path:
    """Download, verify and extract (once) the sdist of ``package==version``; its top directory."""
    filename, url, sha = find_sdist(package, version)
    archive = paths.downloads_dir() / filename
    if archive.is_file():
        download(url, archive, sha256=sha)  # verifies; fetches again only on a hash mismatch
    else:
        with progress.bytes_task(f"download {filename}") as cb:
            download(url, archive, sha256=sha, progress=cb)
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
    path = tree / subdir if subdir else tree
    if not path.is_dir():
        msg = f"{package} {pin} has no {subdir!r} directory; this version does not vendor the engine there"
        raise SourceError(msg)
    return path
