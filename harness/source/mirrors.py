"""The Debian mirror apt is configured with: where pinned ``.deb`` files are fetched from.

Reads apt's sources in apt's order (``sources.list``, then ``sources.list.d/*.list`` and
``*.sources``), in both the one-line and the deb822 format, and takes the first mirror of
the ``debian`` archive; a row's ``pool_path`` is joined to it. No host is written in code.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urljoin, urlsplit

from harness.source.index import IndexConfigError

APT_ETC = Path("/etc/apt")


@dataclass(frozen=True, kw_only=True)
class AptSource:
    """One entry of apt's sources: a one-line ``deb`` line or a deb822 stanza."""

    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    file: Path


def apt_source_files(etc_apt: Path | None = None) -> list[Path]:
    """``sources.list``, then ``sources.list.d/*.list`` and ``*.sources`` by name (apt's order)."""
    etc = etc_apt or APT_ETC
    parts = etc / "sources.list.d"
    listed = sorted((p for p in parts.iterdir() if p.suffix in (".list", ".sources") and p.is_file()),
                    key=lambda p: p.name) if parts.is_dir() else []
    main = etc / "sources.list"
    return [main, *listed] if main.is_file() else listed


_ONE_LINE = re.compile(r"^(deb|deb-src)\s+(?:\[[^\]]*\]\s*)?(\S+)\s+(\S+)(.*)$")


def _one_line_sources(text: str, path: Path) -> Iterator[AptSource]:
    for raw in text.splitlines():
        m = _ONE_LINE.match(raw.split("#", 1)[0].strip())
        if m:
            yield AptSource(types=(m[1],), uris=(m[2],), suites=(m[3],), components=tuple(m[4].split()), file=path)


def _deb822_sources(text: str, path: Path) -> Iterator[AptSource]:
    from debian.deb822 import Deb822

    for stanza in Deb822.iter_paragraphs(text.splitlines()):
        if str(stanza.get("Enabled", "yes")).strip().lower() == "no":
            continue
        yield AptSource(types=tuple(str(stanza.get("Types", "")).split()), uris=tuple(str(stanza.get("URIs", "")).split()),
                        suites=tuple(str(stanza.get("Suites", "")).split()),
                        components=tuple(str(stanza.get("Components", "")).split()), file=path)


def apt_sources(etc_apt: Path | None = None) -> list[AptSource]:
    """Every entry of apt's sources, in apt's order (both the one-line and the deb822 format)."""
    out: list[AptSource] = []
    for path in apt_source_files(etc_apt):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            msg = f"cannot read apt's sources file {path}: {e}"
            raise IndexConfigError(msg) from e
        out += _deb822_sources(text, path) if path.suffix == ".sources" else _one_line_sources(text, path)
    return out


def debian_mirror(etc_apt: Path | None = None) -> str:
    """The first mirror of the ``debian`` archive in apt's sources (a URI whose path ends in
    ``/debian``; ``debian-security`` and other archives do not count), ending in ``/``."""
    sources = apt_sources(etc_apt)
    for s in sources:
        if "deb" not in s.types:
            continue
        for uri in s.uris:
            parts = urlsplit(uri)
            if parts.scheme in ("http", "https", "file") and PurePosixPath(parts.path).name == "debian":
                return uri if uri.endswith("/") else uri + "/"
    etc = etc_apt or APT_ETC
    files = ", ".join(str(p) for p in apt_source_files(etc_apt)) or f"no sources files under {etc}"
    uris = ", ".join(sorted({u for s in sources for u in s.uris}))
    msg = (f"apt is configured with no mirror of the Debian archive (a deb source whose URI ends in "
           f"/debian) in {files}{f'; it has {uris}' if uris else ''}. Add a Debian mirror to "
           f"apt's sources ({etc}/sources.list.d/debian.sources)")
    raise IndexConfigError(msg)


def debian_pool_url(pool_path: str, *, etc_apt: Path | None = None) -> str:
    """The URL of ``pool/...`` on the Debian mirror apt is configured with."""
    path = PurePosixPath(pool_path)
    if path.is_absolute() or ".." in path.parts or not path.parts or path.parts[0] != "pool":
        msg = f"{pool_path!r} is not a path in a Debian archive (pool/<component>/<prefix>/<source>/<file>)"
        raise IndexConfigError(msg)
    return urljoin(debian_mirror(etc_apt), str(path))
