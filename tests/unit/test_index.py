"""The one package-index client (harness/source/index.py): pages, configuration, retries, resume, apt.

The fake index is the standard simple layout, ``<root>/simple/<project>/`` with ``index.html``
(PEP 503) and ``index.json`` (PEP 691), files under ``<root>/files/`` linked relatively. It is
read as a ``file://`` directory (as pip reads one) or served by :class:`FakeIndex`, a local HTTP
server that negotiates the content type, honours Range requests and fails on demand.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.core.errors import ChecksumError, SourceError
from harness.source import cache as source
from harness.source import index, mirrors
from harness.source.index import (
    IndexConfigError,
    IndexReplyError,
    IndexUnavailableError,
    NotOnIndexError,
    find_file,
    find_sdist,
    pip_indexes,
)

# --- the fake index ---------------------------------------------------------------------------


def write_project(root: Path, project: str, files: dict[str, bytes], *, yanked: tuple[str, ...] = (),
                  html_page: bool = True, json_page: bool = True) -> dict[str, str]:
    """Put ``files`` under ``root/files`` and ``project``'s pages under ``root/simple/<project>/``
    (relative links, as a static mirror writes them); return filename -> sha256."""
    (root / "files").mkdir(parents=True, exist_ok=True)
    page = root / "simple" / project
    page.mkdir(parents=True, exist_ok=True)
    shas = {}
    for name, data in files.items():
        (root / "files" / name).write_bytes(data)
        shas[name] = hashlib.sha256(data).hexdigest()
    if html_page:
        flag = ' data-yanked=""'
        links = "".join(f'<a href="../../files/{n}#sha256={s}"{flag if n in yanked else ""}>{n}</a>\n'
                        for n, s in shas.items())
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    if json_page:
        (page / "index.json").write_text(json.dumps({
            "meta": {"api-version": "1.1"}, "name": project,
            "files": [{"filename": n, "url": f"../../files/{n}", "hashes": {"sha256": s}, "yanked": n in yanked}
                      for n, s in shas.items()]}))
    return shas


@dataclass
class FakeIndex:
    """A simple index over HTTP. ``script`` holds what the next requests get instead of the
    file (an HTTP status, ``"reset"``, ``"half"`` (half the body, then the connection drops))."""

    root: Path
    port: int = 0
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    script: list[int | str] = field(default_factory=list)
    json: bool = True
    ranges: bool = True
    replies: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    """path -> (content type, body): a reply instead of the file."""
    redirects: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/simple/"

    def paths(self) -> list[str]:
        return [p for p, _ in self.requests]


def _handler(fake: FakeIndex) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.requests.append((self.path, dict(self.headers)))
            action = fake.script.pop(0) if fake.script else None
            if action == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                return
            if isinstance(action, int):
                self.send_error(action)
                return
            path = self.path.split("?")[0]
            if path in fake.redirects:
                self.send_response(302)
                self.send_header("Location", fake.redirects[path])
                self.end_headers()
                return
            if path in fake.replies:
                ctype, body = fake.replies[path]
                return self._send(200, body, {"Content-Type": ctype})
            target = fake.root / path.lstrip("/")
            if target.is_dir():
                if not path.endswith("/"):
                    self.send_response(301)
                    self.send_header("Location", path + "/")
                    self.end_headers()
                    return
                wants_json = index.JSON_TYPE in self.headers.get("Accept", "")
                if fake.json and wants_json and (target / "index.json").is_file():
                    return self._send(200, (target / "index.json").read_bytes(), {"Content-Type": index.JSON_TYPE})
                target = target / "index.html"
                if target.is_file():
                    return self._send(200, target.read_bytes(), {"Content-Type": "text/html; charset=utf-8"})
            if not target.is_file():
                self.send_error(404)
                return
            data = target.read_bytes()
            start = 0
            rng = self.headers.get("Range", "")
            if fake.ranges and rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[6:-1])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.end_headers()
                    return
                headers = {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
                status = 206
            else:
                headers, status = {}, 200
            body = data[start:]
            if action == "half":
                self.send_response(status)
                for k, v in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self._send(status, body, {"Content-Type": "application/octet-stream", **headers})

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def isolate_pip(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """No pip configuration from this machine; retries do not sleep (the delays are recorded)."""
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT", "HARNESS_PYPI_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    delays: list[float] = []
    monkeypatch.setattr(index, "_sleep", delays.append)
    return delays


@pytest.fixture
def pip_isolated(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    return isolate_pip(monkeypatch)


@pytest.fixture
def fake_index(tmp_path: Path, pip_isolated: list[float]) -> Iterator[FakeIndex]:
    fake = FakeIndex(root=tmp_path / "mirror")
    (fake.root / "simple").mkdir(parents=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.port = server.server_port
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


WHEEL = "fake_models-1.0-py3-none-any.whl"
SDIST = "fake_models-1.0.tar.gz"
FILES = {WHEEL: b"wheel bytes", SDIST: b"sdist bytes", "fake_models-0.9.tar.gz": b"old sdist"}


# --- pages: JSON, HTML, relative URLs, names ------------------------------------------------


def test_json_page_with_relative_urls_joined_to_the_page(fake_index: FakeIndex,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    shas = write_project(fake_index.root, "fake-models", FILES, yanked=("fake_models-0.9.tar.gz",))
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    f = find_file("fake-models", WHEEL)
    assert f.url == f"http://127.0.0.1:{fake_index.port}/files/{WHEEL}"
    assert f.sha256 == shas[WHEEL] and f.yanked is None
    assert index.JSON_TYPE in fake_index.requests[0][1]["Accept"]
    page = index.IndexClient().page("fake-models", fake_index.url)
    assert page is not None and page.url.endswith("/simple/fake-models/")
    assert {p.filename: p.yanked for p in page.files}["fake_models-0.9.tar.gz"] == ""


def test_html_page_when_the_index_serves_no_json(fake_index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_index.json = False
    shas = write_project(fake_index.root, "fake-models", FILES, yanked=("fake_models-0.9.tar.gz",))
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    f = find_file("fake-models", SDIST)
    assert f.url == f"http://127.0.0.1:{fake_index.port}/files/{SDIST}", "fragment dropped, path joined"
    assert f.sha256 == shas[SDIST]
    page = index.IndexClient().page("fake-models", fake_index.url)
    assert page is not None
    assert {p.filename: p.yanked for p in page.files} == {WHEEL: None, SDIST: None, "fake_models-0.9.tar.gz": ""}


def test_html_base_href_and_attributes() -> None:
    body = (b'<html><head><meta name="pypi:repository-version" content="1.0"><base href="https://m.example/x/">'
            b'</head><body><a href="p-1.0.tar.gz#sha256=ab" data-requires-python="&gt;=3.8" data-yanked="bad">'
            b'p-1.0.tar.gz</a><a href="/about">about</a></body></html>')
    reply = index._Reply("https://idx.example/simple/p/", "text/html", None, body)
    page = index.parse_project_page(reply, project="p", index_url="https://idx.example/simple/")
    assert page.files == (index.DistFile(filename="p-1.0.tar.gz", url="https://m.example/x/p-1.0.tar.gz",
                                         hashes={"sha256": "ab"}, yanked="bad", requires_python=">=3.8"),)


@pytest.mark.parametrize("page", ["json", "html"])
def test_urls_are_joined_to_the_page_found_after_a_redirect(fake_index: FakeIndex, page: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    moved = fake_index.root / "moved" / "fake-models"
    moved.mkdir(parents=True)
    (moved / WHEEL).write_bytes(b"w")
    if page == "html":
        (moved / "index.html").write_text(f'<a href="{WHEEL}">{WHEEL}</a>')
    else:
        (moved / "index.json").write_text(json.dumps({"files": [{"filename": WHEEL, "url": WHEEL, "hashes": {}}]}))
    fake_index.redirects["/simple/fake-models/"] = "/moved/fake-models/"
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    assert find_file("fake-models", WHEEL).url == f"http://127.0.0.1:{fake_index.port}/moved/fake-models/{WHEEL}"


def test_names_are_canonicalised(fake_index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    write_project(fake_index.root, "fake-models", FILES)
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    for name in ("Fake_Models", "fake.models", "FAKE--models"):
        assert find_file(name, WHEEL).filename == WHEEL
    assert set(fake_index.paths()) == {"/simple/fake-models/"}


def test_file_directory_index_as_pip_reads_it(tmp_path: Path, pip_isolated: list[float],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    shas = write_project(tmp_path, "fake-models", FILES, json_page=False)
    monkeypatch.setenv("PIP_INDEX_URL", str(tmp_path / "simple"))  # a plain directory, as pip allows
    f = find_file("Fake.Models", WHEEL)
    assert f.url == (tmp_path / "files" / WHEEL).as_uri() and f.sha256 == shas[WHEEL]
    out = source.download(f.url, tmp_path / "dl" / WHEEL, sha256=shas[WHEEL])
    assert out.read_bytes() == FILES[WHEEL]


def test_missing_file_and_project_say_what_the_index_has(fake_index: FakeIndex,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    write_project(fake_index.root, "fake-models", FILES)
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    with pytest.raises(NotOnIndexError, match=r"fake_models-1\.1-py3-none-any\.whl is not on .* lists fake_models-1\.0-py3"):
        find_file("fake-models", "fake_models-1.1-py3-none-any.whl", hint="Move the pin")
    with pytest.raises(NotOnIndexError, match=r"has no project other.*index-url from \$PIP_INDEX_URL.*PIP_INDEX_URL"):
        find_file("other", "other-1.0.tar.gz")
    assert [p for p in fake_index.paths() if p.endswith("other/")] == ["/simple/other/"], "a 404 is not retried"


def test_extra_index_is_asked_when_the_first_lacks_the_project(fake_index: FakeIndex, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    shas = write_project(tmp_path / "extra", "only-extra", {"only_extra-2.0.tar.gz": b"x"}, json_page=False)
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"{fake_index.url}nothing-here/ {(tmp_path / 'extra' / 'simple').as_uri()}")
    f = find_sdist("only-extra", "2.0")
    assert f.sha256 == shas["only_extra-2.0.tar.gz"] and f.url.startswith("file://")
    assert fake_index.paths() == ["/simple/only-extra/", "/simple/nothing-here/only-extra/"]


def test_sdist_lookup_by_version_skips_yanked_and_needs_a_hash(fake_index: FakeIndex,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    write_project(fake_index.root, "fake-models", FILES, yanked=("fake_models-0.9.tar.gz",))
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    assert find_sdist("fake_models", "1.0.0").filename == SDIST, "versions compare as versions"
    with pytest.raises(NotOnIndexError, match=r"sdist of fake_models==0\.9 .*sdists 0\.9 \(yanked\), 1\.0"):
        find_sdist("fake_models", "0.9")
    page = fake_index.root / "simple" / "fake-models" / "index.json"
    data = json.loads(page.read_text())
    for f in data["files"]:
        f["hashes"] = {}
    page.write_text(json.dumps(data))
    with pytest.raises(IndexReplyError, match="has no sha256"):
        find_sdist("fake_models", "1.0")


def test_sdist_version_parsing() -> None:
    v = index.sdist_version
    assert str(v("llama_cpp_python-0.3.16.tar.gz", "llama-cpp-python")) == "0.3.16"
    assert str(v("llama-cpp-python-0.2.1.zip", "llama_cpp_python")) == "0.2.1"
    assert v("llama_cpp_python-0.3.16-cp311-cp311-linux_x86_64.whl", "llama-cpp-python") is None
    assert v("other-1.0.tar.gz", "llama-cpp-python") is None
    assert v("x-notaversion.tar.gz", "x") is None


# --- replies that are not index pages -----------------------------------------------------------


@pytest.mark.parametrize(("ctype", "body", "expected"), [
    ("text/html", b"<html><title>Sign in</title><body><a href='/login'>log in</a></body></html>",
     r"expected a PEP 503 project page .* titled 'Sign in' with 1 links and none to a distribution file"),
    (index.JSON_TYPE, b'{"files": [{"filename": "x-1.0.tar.gz", "url": "x-1.0.ta',
     r"expected a PEP 691 project page .*not JSON"),
    (index.JSON_TYPE, b'{"error": "rate limited"}', r"a JSON object with a 'files' list"),
    (index.JSON_TYPE, b'{"meta": {"api-version": "2.0"}, "files": []}', r"speaks simple API version 2\.0"),
    (index.JSON_TYPE, b'{"files": [{"filename": "x-1.0.tar.gz"}]}', r"files\[0\] is not a PEP 691 file"),
    ("text/plain", b"x-1.0.tar.gz", r"Content-Type text/plain; expected a simple index project page"),
], ids=["html-login-page", "truncated-json", "json-error-object", "api-version-2", "file-without-url", "plain-text"])
def test_a_reply_that_is_not_an_index_page_is_a_typed_error(
        fake_index: FakeIndex, monkeypatch: pytest.MonkeyPatch, ctype: str, body: bytes, expected: str) -> None:
    fake_index.replies["/simple/x/"] = (ctype, body)
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    with pytest.raises(IndexReplyError, match=expected) as e:
        find_file("x", "x-1.0.tar.gz")
    assert f"{fake_index.url}x/" in str(e.value), "the message names the URL"
    assert isinstance(e.value, SourceError) and e.value.exit_code == 5


# --- retries -----------------------------------------------------------------------------------


def test_a_server_failing_twice_then_answering(fake_index: FakeIndex, pip_isolated: list[float],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    write_project(fake_index.root, "fake-models", FILES)
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    fake_index.script = [503, "reset"]
    assert find_file("fake-models", WHEEL).filename == WHEEL
    assert fake_index.paths() == ["/simple/fake-models/"] * 3
    assert len(pip_isolated) == 2 and pip_isolated[0] < pip_isolated[1], "exponential backoff"


def test_retries_give_up_with_the_url_and_the_last_failure(fake_index: FakeIndex, pip_isolated: list[float],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    fake_index.script = [502] * (index.RETRIES + 1)
    with pytest.raises(IndexUnavailableError, match=rf"{fake_index.url}fake-models/: HTTP 502"):
        find_file("fake-models", WHEEL)
    assert len(fake_index.requests) == index.RETRIES + 1 and len(pip_isolated) == index.RETRIES


def test_a_client_error_is_not_retried(fake_index: FakeIndex, pip_isolated: list[float],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    fake_index.script = [403]
    with pytest.raises(IndexUnavailableError, match="HTTP 403"):
        find_file("fake-models", WHEEL)
    assert len(fake_index.requests) == 1 and pip_isolated == []


def test_a_timeout_is_retried(fake_index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    write_project(fake_index.root, "fake-models", FILES)
    monkeypatch.setenv("PIP_INDEX_URL", fake_index.url)
    calls = []
    real = index._open

    def slow_then_fine(url: str, headers: object = None, *, timeout: float | None = None) -> object:
        calls.append(url)
        if len(calls) == 1:
            raise TimeoutError("timed out")
        return real(url, headers)  # type: ignore[arg-type]

    monkeypatch.setattr(index, "_open", slow_then_fine)
    assert find_file("fake-models", WHEEL).filename == WHEEL
    assert len(calls) == 2


def test_retry_after_is_honoured() -> None:
    import urllib.error
    from email.message import Message

    headers = Message()
    headers["Retry-After"] = "7"
    e = urllib.error.HTTPError("http://x/", 429, "Too Many Requests", headers, None)
    assert index.is_transient(e) and index.retry_delay(0, e) == 7.0
    assert index.BACKOFF_S <= index.retry_delay(0, TimeoutError()) < index.retry_delay(3, TimeoutError())


# --- resumable downloads ---------------------------------------------------------------------


DATA = os.urandom(3 << 20)
DATA_SHA = hashlib.sha256(DATA).hexdigest()


def test_a_partial_download_is_resumed_with_a_range_request(fake_index: FakeIndex, cache: Path) -> None:
    (fake_index.root / "files").mkdir()
    (fake_index.root / "files" / "big.bin").write_bytes(DATA)
    dest = cache / "downloads" / "big.bin"
    dest.parent.mkdir(parents=True)
    source.partial_path(dest).write_bytes(DATA[: 1 << 20])
    source.download(f"http://127.0.0.1:{fake_index.port}/files/big.bin", dest, sha256=DATA_SHA)
    assert dest.read_bytes() == DATA
    assert [h.get("Range") for _, h in fake_index.requests] == [f"bytes={1 << 20}-"]
    assert sorted(p.name for p in dest.parent.iterdir()) == ["big.bin"]


def test_a_dropped_connection_resumes_where_it_stopped(fake_index: FakeIndex, cache: Path,
                                                       pip_isolated: list[float]) -> None:
    (fake_index.root / "files").mkdir()
    (fake_index.root / "files" / "big.bin").write_bytes(DATA)
    fake_index.script = ["half", 503]
    dest = cache / "downloads" / "big.bin"
    source.download(f"http://127.0.0.1:{fake_index.port}/files/big.bin", dest, sha256=DATA_SHA)
    assert dest.read_bytes() == DATA
    ranges = [h.get("Range") for _, h in fake_index.requests]
    assert ranges[0] is None and ranges[1] == ranges[2] == f"bytes={len(DATA) // 2}-"
    assert len(pip_isolated) == 2


def test_a_failed_download_keeps_its_bytes_for_the_next_run(fake_index: FakeIndex, cache: Path) -> None:
    (fake_index.root / "files").mkdir()
    (fake_index.root / "files" / "big.bin").write_bytes(DATA)
    fake_index.script = ["half", *[503] * index.RETRIES]
    url = f"http://127.0.0.1:{fake_index.port}/files/big.bin"
    dest = cache / "downloads" / "big.bin"
    with pytest.raises(SourceError, match=r"HTTP 503.*bytes received are kept in .*big\.bin\.partial"):
        source.download(url, dest, sha256=DATA_SHA)
    assert source.partial_path(dest).stat().st_size == len(DATA) // 2 and not dest.exists()
    source.download(url, dest, sha256=DATA_SHA)
    assert dest.read_bytes() == DATA and fake_index.requests[-1][1]["Range"] == f"bytes={len(DATA) // 2}-"


def test_a_partial_that_does_not_verify_is_downloaded_again_from_the_start(fake_index: FakeIndex,
                                                                          cache: Path) -> None:
    (fake_index.root / "files").mkdir()
    (fake_index.root / "files" / "big.bin").write_bytes(DATA)
    dest = cache / "downloads" / "big.bin"
    dest.parent.mkdir(parents=True)
    source.partial_path(dest).write_bytes(b"\0" * 1000)  # bytes of another file
    source.download(f"http://127.0.0.1:{fake_index.port}/files/big.bin", dest, sha256=DATA_SHA)
    assert dest.read_bytes() == DATA
    assert [h.get("Range") for _, h in fake_index.requests] == ["bytes=1000-", None]


def test_a_server_ignoring_ranges_sends_the_whole_file(fake_index: FakeIndex, cache: Path) -> None:
    fake_index.ranges = False
    (fake_index.root / "files").mkdir()
    (fake_index.root / "files" / "big.bin").write_bytes(DATA)
    dest = cache / "downloads" / "big.bin"
    dest.parent.mkdir(parents=True)
    source.partial_path(dest).write_bytes(DATA[:5000])
    source.download(f"http://127.0.0.1:{fake_index.port}/files/big.bin", dest, sha256=DATA_SHA)
    assert dest.read_bytes() == DATA and len(fake_index.requests) == 1


def test_a_complete_partial_is_finished_without_a_body(fake_index: FakeIndex, cache: Path) -> None:
    (fake_index.root / "files").mkdir()
    (fake_index.root / "files" / "big.bin").write_bytes(DATA)
    dest = cache / "downloads" / "big.bin"
    dest.parent.mkdir(parents=True)
    source.partial_path(dest).write_bytes(DATA)  # killed between the last byte and the rename
    source.download(f"http://127.0.0.1:{fake_index.port}/files/big.bin", dest, sha256=DATA_SHA)
    assert dest.read_bytes() == DATA and len(fake_index.requests) == 1


def test_resumed_bytes_are_still_verified(fake_index: FakeIndex, cache: Path) -> None:
    (fake_index.root / "files").mkdir()
    (fake_index.root / "files" / "big.bin").write_bytes(b"tampered" + DATA)
    dest = cache / "downloads" / "big.bin"
    with pytest.raises(ChecksumError, match=DATA_SHA):
        source.download(f"http://127.0.0.1:{fake_index.port}/files/big.bin", dest, sha256=DATA_SHA)
    assert list(dest.parent.iterdir()) == []


# --- credentials ------------------------------------------------------------------------------


def test_credentials_in_the_index_url_are_sent_and_never_shown(fake_index: FakeIndex,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    write_project(fake_index.root, "fake-models", FILES)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://me:s3cret@127.0.0.1:{fake_index.port}/simple/")
    f = find_file("fake-models", WHEEL)
    assert f.url == f"http://me:s3cret@127.0.0.1:{fake_index.port}/files/{WHEEL}", "same host: same credentials"
    assert fake_index.requests[-1][1]["Authorization"] == "Basic " + base64.b64encode(b"me:s3cret").decode()
    fake_index.script = [403]
    with pytest.raises(IndexUnavailableError) as e:
        find_file("fake-models", WHEEL)
    assert "s3cret" not in str(e.value) and "me:****@" in str(e.value)
    assert index.redact("https://tok@h/simple/") == "https://****@h/simple/"


# --- pip's configuration ----------------------------------------------------------------------


def test_pip_index_url_from_the_environment(pip_isolated: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.invalid/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://a.invalid/simple/  https://b.invalid/simple")
    conf = index.configured_indexes()
    assert conf.urls == ("https://mirror.invalid/simple/", "https://a.invalid/simple/", "https://b.invalid/simple/")
    assert conf.origin == "$PIP_INDEX_URL"
    assert index.configured_indexes("https://only.invalid/s").urls == ("https://only.invalid/s/",)


def test_pip_conf_is_honoured(tmp_path: Path, pip_isolated: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://global.invalid/simple\n"
                    "extra_index_url =\n    https://x1.invalid/simple\n    https://x2.invalid/simple\ncert = /ca.pem\n"
                    "[install]\nindex-url = https://install.invalid/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    got = pip_indexes()
    assert got.urls == ("https://install.invalid/simple/", "https://x1.invalid/simple/", "https://x2.invalid/simple/")
    assert got.origin == f"{conf} [install]" and got.cert == "/ca.pem"
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.invalid/simple/")
    assert pip_indexes().index_url == "https://env.invalid/simple/", "the environment wins over the files"


def test_user_pip_conf_in_the_xdg_location(tmp_path: Path, pip_isolated: list[float],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIP_CONFIG_FILE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    legacy = tmp_path / "home" / ".pip" / "pip.conf"
    new = tmp_path / "xdg" / "pip" / "pip.conf"
    for path, host in ((legacy, "legacy"), (new, "xdg")):
        path.parent.mkdir(parents=True)
        path.write_text(f"[global]\nindex-url = https://{host}.invalid/simple/\n")
    files = index.pip_config_files()
    assert files.index(legacy) < files.index(new) and Path("/etc/pip.conf") in files
    assert pip_indexes().index_url == "https://xdg.invalid/simple/", "the new location overrides the legacy one"


def test_pip_config_file_replaces_the_users_and_devnull_disables_all(tmp_path: Path, pip_isolated: list[float],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "own.conf"
    own.write_text("[global]\nindex-url = https://own.invalid/simple/\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(own))
    files = index.pip_config_files()
    assert files[-1] == own and tmp_path / ".pip" / "pip.conf" not in files
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert index.pip_config_files() == []


def test_nothing_configured_means_pips_default() -> None:
    got = pip_indexes({}, files=[])
    assert got.urls == (index.DEFAULT_INDEX,) and "default" in got.origin


def test_a_broken_pip_conf_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "pip.conf"
    bad.write_text("index-url = https://x.invalid/\n")  # no section header
    with pytest.raises(IndexConfigError, match=f"cannot read pip's configuration file {bad}"):
        pip_indexes({}, files=[bad])


def test_the_old_harness_variable_is_still_read(pip_isolated: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_PYPI_INDEX", "https://old.invalid/simple")
    assert index.configured_indexes().index_url == "https://old.invalid/simple/"
    monkeypatch.setenv("PIP_INDEX_URL", "https://new.invalid/simple")
    assert index.configured_indexes().index_url == "https://new.invalid/simple/"


# --- apt's sources ----------------------------------------------------------------------------


def _apt(tmp_path: Path, files: dict[str, str]) -> Path:
    etc = tmp_path / "etc-apt"
    (etc / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (etc / name).write_text(text)
    return etc


def test_one_line_sources(tmp_path: Path) -> None:
    etc = _apt(tmp_path, {"sources.list": (
        "# deb http://commented.invalid/debian bookworm main\n"
        "deb-src http://src.invalid/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://security.invalid/debian-security bookworm-security main\n"
        "deb [ arch=amd64 ] http://mirror.invalid/debian/ bookworm main contrib  # the mirror\n")})
    sources = mirrors.apt_sources(etc)
    assert [(s.types, s.uris, s.components) for s in sources][-1] == (
        ("deb",), ("http://mirror.invalid/debian/",), ("main", "contrib"))
    assert mirrors.debian_mirror(etc) == "http://mirror.invalid/debian/"


def test_deb822_sources(tmp_path: Path) -> None:
    etc = _apt(tmp_path, {"sources.list.d/a-off.sources": (
        "Types: deb\nURIs: http://off.invalid/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n"),
        "sources.list.d/debian.sources": (
        "Types: deb\n# http://snapshot.invalid/archive/debian/20250520T000000Z\nURIs: http://deb822.invalid/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "\nTypes: deb\nURIs: http://deb822.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n"),
        "sources.list.d/other.list.disabled": "deb http://disabled.invalid/debian bookworm main\n"})
    assert [s.uris for s in mirrors.apt_sources(etc)] == [("http://deb822.invalid/debian",),
                                                       ("http://deb822.invalid/debian-security",)]
    assert mirrors.debian_mirror(etc) == "http://deb822.invalid/debian/"
    assert mirrors.debian_pool_url("pool/main/v/x/x_1_amd64.deb", etc_apt=etc) == \
        "http://deb822.invalid/debian/pool/main/v/x/x_1_amd64.deb"


def test_sources_list_comes_before_the_parts(tmp_path: Path) -> None:
    etc = _apt(tmp_path, {"sources.list": "deb http://first.invalid/debian bookworm main\n",
                          "sources.list.d/0.list": "deb http://second.invalid/debian bookworm main\n"})
    assert mirrors.debian_mirror(etc) == "http://first.invalid/debian/"


def test_no_debian_mirror_is_a_typed_error(tmp_path: Path) -> None:
    etc = _apt(tmp_path, {"sources.list.d/x.sources": "Types: deb\nURIs: http://archive.invalid/ubuntu\nSuites: noble\n"})
    with pytest.raises(IndexConfigError, match=r"no mirror of the Debian archive .*it has http://archive\.invalid/ubuntu"):
        mirrors.debian_mirror(etc)
    with pytest.raises(IndexConfigError, match="not a path in a Debian archive"):
        mirrors.debian_pool_url("../etc/passwd", etc_apt=etc)


def test_a_file_mirror_serves_the_pool(tmp_path: Path, cache: Path) -> None:
    pool = tmp_path / "mirror" / "debian" / "pool" / "main" / "x"
    pool.mkdir(parents=True)
    (pool / "x.deb").write_bytes(b"deb bytes")
    etc = _apt(tmp_path, {"sources.list": f"deb [trusted=yes] file:{tmp_path / 'mirror' / 'debian'} bookworm main\n"})
    url = mirrors.debian_pool_url("pool/main/x/x.deb", etc_apt=etc)
    out = source.download(url, cache / "downloads" / "x.deb", sha256=hashlib.sha256(b"deb bytes").hexdigest())
    assert out.read_bytes() == b"deb bytes"


def test_html_escaping_in_a_page_is_undone() -> None:
    name = "a&b-1.0.tar.gz"
    body = f'<a href="{html.escape(name)}">{html.escape(name)}</a>'.encode()
    reply = index._Reply("https://i.invalid/simple/a-b/", "text/html", "utf-8", body)
    assert index.parse_project_page(reply, project="a-b", index_url="https://i.invalid/simple/").files[0].filename == name
