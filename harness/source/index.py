"""Package indexes and mirrors: where a pinned file comes from, asked the way this host is configured.

One client for Python package indexes (the simple repository API: PEP 691 JSON, with the
PEP 503 HTML page as the fallback; a ``file://`` directory in the same layout is read as pip
reads it, ``<project>/index.html``) and one lookup of the Debian mirror. Where files come from
is the host's configuration, never a host name written in code:

- Python packages: the indexes pip is configured with (:func:`pip_indexes`): ``$PIP_INDEX_URL``
  and ``$PIP_EXTRA_INDEX_URL``, else pip's configuration files, else :data:`DEFAULT_INDEX`.
- Debian packages: the first mirror of the ``debian`` archive in apt's sources
  (:func:`debian_mirror`).

Every request goes through :func:`with_retries` (transient failures: 5xx, 429, timeouts,
connection resets; exponential backoff). A reply that is not what an index serves (an HTML
login page, a truncated JSON document) raises :class:`IndexReplyError` naming the URL and what
was expected. Credentials in an index URL (``https://user:token@host/simple/``) are sent as
basic auth to that host and never printed. Downloads (resumable, verified, atomic, locked) are
:func:`harness.source.cache.download`'s; it opens URLs through :func:`open_download`.
"""

from __future__ import annotations

import base64
import configparser
import functools
import html.parser
import http.client
import io
import json
import os
import random
import re
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from harness.core import progress
from harness.core.errors import SourceError

#: Used only when pip is configured with no index at all (pip's own default).
DEFAULT_INDEX = "https://pypi.org/simple/"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
USER_AGENT = "harness/0.1"
RETRIES = 3
BACKOFF_S = 0.5
MAX_DELAY_S = 30.0
TIMEOUT_S = 60.0
_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_DIST_SUFFIXES = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz", ".tbz", ".txz", ".tar", ".egg")
_HOW_TO_CONFIGURE = "the indexes come from pip's configuration (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, pip.conf)"
_sleep = time.sleep
_warned_legacy = False

T = TypeVar("T")


class IndexConfigError(SourceError):
    """pip's or apt's configuration cannot be read, or names no usable index or mirror."""


class IndexUnavailableError(SourceError):
    """An index or mirror could not be reached (after retries) or refused the request."""


class IndexReplyError(SourceError):
    """A reply is not what a simple index serves: wrong content type, broken JSON, an HTML
    page without links to distribution files, a range the server did not honour as asked."""


class NotOnIndexError(SourceError):
    """The wanted file or version is on none of the configured indexes."""


def _say(message: str) -> None:
    if not progress._quiet:
        progress.console.print(message, markup=False, highlight=False, soft_wrap=True)


# --- pip's configuration -----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PipIndexes:
    """The indexes to ask, in order, and where the first came from."""

    index_url: str
    extra_index_urls: tuple[str, ...] = ()
    cert: str | None = None
    """pip's ``cert``: a CA bundle trusted in addition to the system's."""
    origin: str = "pip's default (no index-url configured)"

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.index_url, *self.extra_index_urls)))

    def describe(self) -> str:
        return f"index-url from {self.origin}; {_HOW_TO_CONFIGURE}"


def pip_config_files(environ: Mapping[str, str] | None = None) -> list[Path]:
    """pip's configuration files in the order pip loads them (a later one overrides).

    Site-wide, then the user's (legacy ``~/.pip`` first), then the virtualenv's, then
    ``$PIP_CONFIG_FILE``; an existing ``$PIP_CONFIG_FILE`` replaces the user's files, and
    ``PIP_CONFIG_FILE=/dev/null`` disables them all (as in pip).
    """
    env = os.environ if environ is None else environ
    explicit = env.get("PIP_CONFIG_FILE")
    if explicit == os.devnull:
        return []
    home = Path(env.get("HOME") or Path.home())
    name = "pip.ini" if sys.platform == "win32" else "pip.conf"
    if sys.platform == "win32":
        site_wide = [Path(env.get("ALLUSERSPROFILE", r"C:\ProgramData")) / "pip" / name]
        user = [home / "pip" / name, Path(env.get("APPDATA") or home / "AppData" / "Roaming") / "pip" / name]
    elif sys.platform == "darwin":
        site_wide = [Path("/Library/Application Support/pip") / name]
        support = home / "Library" / "Application Support" / "pip"
        user = [home / ".pip" / name, (support if support.is_dir() else home / ".config" / "pip") / name]
    else:
        xdg_dirs = [d for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep) if d]
        site_wide = [*(Path(d) / "pip" / name for d in xdg_dirs), Path("/etc") / name]
        user = [home / ".pip" / name, Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / name]
    own = [Path(explicit)] if explicit else []
    skip_user = bool(own) and own[0].exists()
    return [*site_wide, *([] if skip_user else user), Path(sys.prefix) / name, *own]


def _read_pip_config(path: Path) -> Iterator[tuple[str, str, str]]:
    if not path.is_file():
        return
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as e:
        msg = f"cannot read pip's configuration file {path}: {e}. Fix it (pip cannot read it either)"
        raise IndexConfigError(msg) from e
    for section in parser.sections():
        for key, value in parser.items(section):
            yield section, key.lower().replace("_", "-"), value


def _as_index(url: str) -> str:
    """An index URL ending in ``/``; a local directory (pip allows one) as a ``file://`` URL."""
    url = url.strip()
    if len(urlsplit(url).scheme) <= 1:  # no scheme, or a Windows drive letter
        url = Path(url).expanduser().resolve().as_uri()
    return url if url.endswith("/") else url + "/"


def pip_indexes(environ: Mapping[str, str] | None = None, *, files: Sequence[Path] | None = None) -> PipIndexes:
    """The indexes ``pip install`` would ask: ``index-url`` then each ``extra-index-url``.

    A ``PIP_*`` environment variable wins over the files; in the files ``[install]`` wins over
    ``[global]`` and a later file over an earlier one (pip's rules). ``files`` replaces the
    standard list (:func:`pip_config_files`).
    """
    env = os.environ if environ is None else environ
    found: dict[str, tuple[str, str]] = {}
    for path in pip_config_files(env) if files is None else files:
        for section, key, value in _read_pip_config(path):
            found[f"{section}.{key}"] = (value, f"{path} [{section}]")

    def get(key: str) -> tuple[str, str] | None:
        var = "PIP_" + key.upper().replace("-", "_")
        if env.get(var):
            return env[var], f"${var}"
        return found.get(f"install.{key}") or found.get(f"global.{key}")

    index, extra, cert = get("index-url"), get("extra-index-url"), get("cert")
    conf = PipIndexes(index_url=DEFAULT_INDEX,
                      extra_index_urls=tuple(_as_index(u) for u in extra[0].split()) if extra else (),
                      cert=cert[0].strip() if cert else None)
    return replace(conf, index_url=_as_index(index[0]), origin=index[1]) if index else conf


def configured_indexes(index: str | None = None) -> PipIndexes:
    """The indexes to ask: ``index`` alone when given (a command's ``--index``), else pip's.

    ``$HARNESS_PYPI_INDEX`` (older harness versions) is still read, as ``$PIP_INDEX_URL``.
    """
    global _warned_legacy
    conf = pip_indexes()
    if index:
        return PipIndexes(index_url=_as_index(index), cert=conf.cert, origin="the --index argument")
    legacy = os.environ.get("HARNESS_PYPI_INDEX")
    if legacy and not os.environ.get("PIP_INDEX_URL"):
        if not _warned_legacy:
            _warned_legacy = True
            _say("HARNESS_PYPI_INDEX is deprecated: set PIP_INDEX_URL (pip reads it too)")
        return replace(conf, index_url=_as_index(legacy), origin="$HARNESS_PYPI_INDEX (deprecated)")
    return conf


# --- requests with retries -----------------------------------------------------------------


def redact(url: str) -> str:
    """``url`` with its password (or lone token) shown as ``****``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user, sep, _ = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=f"{user}:****@{host}" if sep else f"****@{host}"))


@functools.cache
def _ssl_context(cafile: str) -> ssl.SSLContext:
    context = ssl.create_default_context()
    try:
        context.load_verify_locations(cafile=cafile)
    except (OSError, ssl.SSLError) as e:
        msg = f"pip's cert {cafile} cannot be loaded as a CA bundle: {e}. Fix pip's 'cert' setting"
        raise IndexConfigError(msg) from e
    return context


def _open(url: str, headers: Mapping[str, str] | None = None, *, timeout: float | None = None) -> Any:
    """One request: credentials from the URL as basic auth (never sent on to a redirect)."""
    parts = urlsplit(url)
    auth = None
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        auth = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
        url = urlunsplit(parts._replace(netloc=host))
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
    if auth:
        req.add_unredirected_header("Authorization", f"Basic {auth}")
    timeout = TIMEOUT_S if timeout is None else timeout
    cert = pip_indexes().cert if parts.scheme == "https" else None
    if cert:
        return urllib.request.urlopen(req, timeout=timeout, context=_ssl_context(cert))
    return urllib.request.urlopen(req, timeout=timeout)


def is_transient(error: BaseException) -> bool:
    """Worth asking again: 5xx/429/408, timeouts, resets, a reply cut short, DNS "try again"."""
    if isinstance(error, urllib.error.HTTPError):
        return error.code in _TRANSIENT_STATUS
    if isinstance(error, urllib.error.URLError):
        return isinstance(error.reason, BaseException) and is_transient(error.reason)
    if isinstance(error, socket.gaierror):
        return error.errno == socket.EAI_AGAIN
    return isinstance(error, TimeoutError | ConnectionError | http.client.IncompleteRead
                      | http.client.BadStatusLine | ssl.SSLEOFError)


def describe(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return str(error.reason)
    return str(error) or type(error).__name__


def retry_delay(attempt: int, error: BaseException) -> float:
    """Exponential backoff with jitter; a server's ``Retry-After`` (seconds) when it sends one."""
    headers = getattr(error, "headers", None)
    after = headers.get("Retry-After") if headers is not None else None
    if isinstance(after, str) and after.strip().isdigit():
        return min(float(after), MAX_DELAY_S)
    return min(BACKOFF_S * 2.0**attempt, MAX_DELAY_S) * random.uniform(1.0, 1.25)


def with_retries(action: Callable[[], T], *, url: str, retries: int | None = None) -> T:
    """``action()``, run again after a transient failure (at most ``retries`` times, backing off)."""
    limit = RETRIES if retries is None else retries
    attempt = 0
    while True:
        try:
            return action()
        except Exception as e:
            if isinstance(e, urllib.error.HTTPError):
                e.close()  # its body is not read; the status and headers stay
            if attempt >= limit or not is_transient(e):
                raise
            delay = retry_delay(attempt, e)
            attempt += 1
            _say(f"{redact(url)}: {describe(e)}; trying again in {delay:.1f} s ({attempt}/{limit})")
            _sleep(delay)


@dataclass(frozen=True)
class Body:
    """An open download whose first byte is byte ``start`` of the file (``total`` bytes, when known)."""

    stream: Any
    start: int
    total: int | None


_CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(\d+|\*)")


@contextmanager
def open_download(url: str, *, offset: int = 0) -> Iterator[Body]:
    """Open ``url`` from byte ``offset`` (an HTTP Range request). A server that ignores the
    range sends the whole file (``start == 0``); a partial that is already whole reads empty."""
    ranged = bool(offset) and urlsplit(url).scheme in ("http", "https")
    try:
        r = _open(url, {"Range": f"bytes={offset}-"} if ranged else None)
    except urllib.error.HTTPError as e:
        if not (ranged and e.code == 416):
            raise
        e.close()
        size = (e.headers.get("Content-Range") or "").rpartition("/")[2]
        r = None if size == str(offset) else _open(url)
    if r is None:
        yield Body(io.BytesIO(), offset, offset)
        return
    with r:
        length = r.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        if getattr(r, "status", None) != 206:
            yield Body(r, 0, total)
            return
        m = _CONTENT_RANGE.fullmatch((r.headers.get("Content-Range") or "").strip())
        if not m or int(m[1]) != offset:
            msg = (f"{redact(url)} answered a request for the bytes from {offset} on with "
                   f"Content-Range {r.headers.get('Content-Range')!r}")
            raise IndexReplyError(msg)
        yield Body(r, offset, None if m[2] == "*" else int(m[2]))


# --- project pages --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DistFile:
    """One distribution file as a project page lists it; ``url`` is absolute."""

    filename: str
    url: str
    hashes: Mapping[str, str] = field(default_factory=dict)
    yanked: str | None = None
    """``None`` when not yanked, else the reason (possibly empty)."""
    requires_python: str | None = None

    @property
    def sha256(self) -> str | None:
        return self.hashes.get("sha256")


@dataclass(frozen=True, kw_only=True)
class ProjectPage:
    project: str
    url: str
    files: tuple[DistFile, ...]


@dataclass(frozen=True)
class _Reply:
    url: str
    content_type: str
    charset: str | None
    body: bytes


def _fetch_page(url: str) -> _Reply | None:
    """A project page, or None when the index has no such project (404/410, no such directory)."""
    target, local = url, urlsplit(url).scheme == "file"
    if local:
        path = Path(urllib.request.url2pathname(urlsplit(url).path))
        if not path.exists():
            return None
        if path.is_dir():
            target = urljoin(url if url.endswith("/") else url + "/", "index.html")

    def attempt() -> _Reply | None:
        try:
            with _open(target, {"Accept": ACCEPT}) as r:
                return _Reply(str(r.geturl()), r.headers.get_content_type(), r.headers.get_content_charset(), r.read())
        except urllib.error.HTTPError as e:
            if e.code in (404, 410):
                e.close()
                return None
            raise
        except urllib.error.URLError as e:
            if local and isinstance(e.reason, FileNotFoundError):
                return None
            raise

    try:
        return with_retries(attempt, url=url)
    except (OSError, http.client.HTTPException) as e:
        msg = f"cannot read the package index page {redact(url)}: {describe(e)}. Check the network/proxy"
        raise IndexUnavailableError(msg) from e


def _with_auth(url: str, index_url: str) -> str:
    """A file on the index's own host gets the index's credentials (as pip sends them)."""
    index = urlsplit(index_url)
    parts = urlsplit(url)
    if "@" not in index.netloc or "@" in parts.netloc or parts.hostname != index.hostname:
        return url
    return urlunsplit(parts._replace(netloc=index.netloc.rpartition("@")[0] + "@" + parts.netloc))


def _api_version(version: object, url: str) -> None:
    major = str(version or "1.0").split(".")[0]
    if major != "1":
        msg = (f"{redact(url)} speaks simple API version {version}; this harness reads 1.x "
               "(PEP 629). Use an index that serves version 1")
        raise IndexReplyError(msg)


def _parse_json(reply: _Reply, index_url: str) -> list[DistFile]:
    where = redact(reply.url)
    try:
        data = json.loads(reply.body)
    except ValueError as e:
        msg = (f"{where}: expected a PEP 691 project page ({JSON_TYPE}), found a reply that is not "
               f"JSON ({e}); it starts {reply.body[:60]!r}")
        raise IndexReplyError(msg) from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(files, list):
        msg = (f"{where}: expected a PEP 691 project page (a JSON object with a 'files' list), "
               f"found {type(data).__name__} {str(data)[:80]}")
        raise IndexReplyError(msg)
    meta = data.get("meta")
    _api_version(meta.get("api-version") if isinstance(meta, dict) else None, reply.url)
    out = []
    for i, f in enumerate(files):
        hashes = f.get("hashes", {}) if isinstance(f, dict) else None
        if not (isinstance(f, dict) and isinstance(f.get("filename"), str) and isinstance(f.get("url"), str)
                and isinstance(hashes, dict)):
            msg = f"{where}: files[{i}] is not a PEP 691 file (a 'filename', a 'url' and a 'hashes' object): {str(f)[:120]}"
            raise IndexReplyError(msg)
        yanked = f.get("yanked", False)
        out.append(DistFile(
            filename=f["filename"], url=_with_auth(urljoin(reply.url, f["url"]), index_url),
            hashes={str(k).lower(): str(v) for k, v in hashes.items()},
            yanked=(yanked if isinstance(yanked, str) else "") if yanked else None,
            requires_python=f.get("requires-python")))
    return out


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.anchors: list[dict[str, str | None]] = []
        self.version: str | None = None
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "base" and self.base is None and a.get("href"):
            self.base = a["href"]
        elif tag == "a" and a.get("href") is not None:
            self.anchors.append(a)
        elif tag == "meta" and a.get("name") == "pypi:repository-version":
            self.version = a.get("content")
        self._in_title = tag == "title"

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data


def _parse_html(reply: _Reply, index_url: str) -> list[DistFile]:
    parser = _Links()
    parser.feed(reply.body.decode(reply.charset or "utf-8", errors="replace"))
    parser.close()
    if parser.version is not None:
        _api_version(parser.version, reply.url)
    base = urljoin(reply.url, parser.base) if parser.base else reply.url
    out = []
    for a in parser.anchors:
        url = urljoin(base, a["href"] or "")
        parts = urlsplit(url)
        filename = unquote(PurePosixPath(parts.path).name)
        if not filename.lower().endswith(_DIST_SUFFIXES):
            continue
        algo, _, digest = parts.fragment.partition("=")
        out.append(DistFile(filename=filename, url=_with_auth(urlunsplit(parts._replace(fragment="")), index_url),
                            hashes={algo.lower(): digest} if digest else {},
                            yanked=(a["data-yanked"] or "") if "data-yanked" in a else None,
                            requires_python=a.get("data-requires-python")))
    if not out and parser.version is None:
        title = f" titled {parser.title.strip()[:60]!r}" if parser.title.strip() else ""
        msg = (f"{redact(reply.url)}: expected a PEP 503 project page (links to distribution files) or "
               f"PEP 691 JSON, found an HTML page{title} with {len(parser.anchors)} links and none to a "
               "distribution file. Is the index URL right (it ends in /simple/), or did a proxy or login page answer?")
        raise IndexReplyError(msg)
    return out


def parse_project_page(reply: _Reply, *, project: str, index_url: str) -> ProjectPage:
    """The files a reply lists; :class:`IndexReplyError` when it is not a project page."""
    if reply.content_type in (JSON_TYPE, "application/json"):
        files = _parse_json(reply, index_url)
    elif reply.content_type in HTML_TYPES:
        files = _parse_html(reply, index_url)
    else:
        msg = (f"{redact(reply.url)} answered with Content-Type {reply.content_type}; expected a simple "
               f"index project page ({JSON_TYPE} (PEP 691) or text/html (PEP 503)). Is the index URL right?")
        raise IndexReplyError(msg)
    return ProjectPage(project=project, url=reply.url, files=tuple(files))


def sdist_version(filename: str, project: str) -> Version | None:
    """The version of an sdist of ``project`` (``example_pkg-1.0.tar.gz``), else None."""
    try:
        name, version = parse_sdist_filename(filename)
    except (InvalidSdistFilename, InvalidVersion):
        return None
    return version if name == canonicalize_name(project) else None


class IndexClient:
    """Asks the configured indexes in order (``index-url``, then each ``extra-index-url``).

    A project missing from one index (404) is looked up on the next; an unreachable index is
    skipped when a later one has the file; a reply that is not a project page stops the search.
    """

    def __init__(self, config: PipIndexes | None = None) -> None:
        self.config = config or configured_indexes()

    def page(self, project: str, index_url: str) -> ProjectPage | None:
        """``project``'s page on one index (its canonical name in the URL), None when absent."""
        name = canonicalize_name(project)
        reply = _fetch_page(urljoin(index_url, f"{name}/"))
        return None if reply is None else parse_project_page(reply, project=name, index_url=index_url)

    def find(self, project: str, match: Callable[[DistFile], bool], *, what: str,
             listing: Callable[[Sequence[DistFile]], str], hint: str = "") -> DistFile:
        """The first file ``match`` accepts; :class:`NotOnIndexError` saying what each index has."""
        seen: list[str] = []
        unreachable: list[IndexUnavailableError] = []
        for index_url in self.config.urls:
            try:
                page = self.page(project, index_url)
            except IndexUnavailableError as e:
                unreachable.append(e)
                continue
            if page is None:
                seen.append(f"{redact(index_url)} has no project {canonicalize_name(project)}")
                continue
            found = next((f for f in page.files if match(f)), None)
            if found is not None:
                return found
            seen.append(f"{redact(page.url)} lists {listing(page.files) or 'nothing like it'}")
        others = f" ({'; '.join(seen)})" if seen else ""
        if unreachable:
            raise IndexUnavailableError(f"{unreachable[0]}{others}; {self.config.describe()}")
        msg = f"{what} is not on the package index{others}; {self.config.describe()}. {hint}".rstrip(". ")
        raise NotOnIndexError(msg)


def find_file(project: str, filename: str, *, index: str | None = None, hint: str = "") -> DistFile:
    """The file ``filename`` of ``project``, as the first configured index that lists it has it."""

    def similar(files: Sequence[DistFile]) -> str:
        names = sorted({f.filename for f in files})
        close = _close(filename, names) or names[-6:]
        return ", ".join(close)

    return IndexClient(configured_indexes(index)).find(
        project, lambda f: f.filename == filename, what=filename, listing=similar, hint=hint)


def find_sdist(project: str, version: str, *, index: str | None = None, hint: str = "") -> DistFile:
    """The sdist of ``project==version`` (not yanked) with the sha256 the index publishes;
    one published without a sha256 is refused."""
    want = Version(version)

    def versions(files: Sequence[DistFile]) -> str:
        found: dict[Version, str] = {}
        for f in files:
            if (v := sdist_version(f.filename, project)) is not None:
                found[v] = f"{v} (yanked)" if f.yanked is not None else str(v)
        return f"sdists {', '.join(found[v] for v in sorted(found)[-8:])}" if found else "no sdist"

    found = IndexClient(configured_indexes(index)).find(
        project, lambda f: sdist_version(f.filename, project) == want and f.yanked is None,
        what=f"an sdist of {project}=={version}", listing=versions, hint=hint)
    if not found.sha256:
        msg = f"{found.filename} has no sha256 on {redact(found.url)}; refusing to use it unverified"
        raise IndexReplyError(msg)
    return found


def _close(name: str, names: Iterable[str]) -> list[str]:
    import difflib

    return difflib.get_close_matches(name, list(names), n=4, cutoff=0.6)
