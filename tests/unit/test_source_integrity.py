"""The source cache and patched working copies are trustworthy (issue 15, items 1 and 2).

Full keys; a manifest checked at every use (and fully with --verify); edits refused and
repaired; patched copies re-created when edited; self-healing downloads, once under a
lock; debris of dead processes swept.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from harness.build import pipeline
from harness.cli import main
from harness.core import paths, progress
from harness.core.errors import ChecksumError, IntegrityError
from harness.core.types import EngineSpec, SourceSpec
from harness.engine.plugin import make_manager
from harness.source import cache as source
from harness.source import manifest
from harness.source.cache import download, extract_once

from .test_index import isolate_pip, write_project

FILES = {
    "toy-1.0/setup.py": b"print('toy')\n",
    "toy-1.0/vendor/lib/src/a.c": b"int a(void) { return 1; }\n",
    "toy-1.0/vendor/lib/README": b"the toy engine\n",
}


def _targz(path: Path, files: dict[str, bytes]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tf.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Toy:
    engine: EngineSpec
    served: Path
    sha256: str
    cache: Path

    def fetch(self, **kw: bool) -> pipeline.SourceTree:
        return pipeline.fetch(self.engine, make_manager(autoload=False), **kw)

    def with_sha(self, sha: str) -> EngineSpec:
        import dataclasses

        return dataclasses.replace(self.engine, source=dataclasses.replace(self.engine.source, sha256=sha))

    @property
    def archive(self) -> Path:
        return self.cache / "downloads" / "toy" / self.sha256 / "toy-1.0.tar.gz"


@pytest.fixture
def toy(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> Toy:
    """The toy engine's sdist on a file:// simple index (the PEP 503 layout) named by PIP_INDEX_URL."""
    sha = _targz(tmp_path / "build" / "toy-1.0.tar.gz", FILES)
    isolate_pip(monkeypatch)
    write_project(tmp_path / "index", "toy", {"toy-1.0.tar.gz": (tmp_path / "build" / "toy-1.0.tar.gz").read_bytes()})
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "index" / "simple").as_uri())
    served = tmp_path / "index" / "files" / "toy-1.0.tar.gz"
    monkeypatch.setattr(progress, "_quiet", False)
    spec = SourceSpec(kind="pypi-sdist", package="toy", version="1.0", filename="toy-1.0.tar.gz",
                      sha256=sha, subdir="vendor/lib")
    engine = EngineSpec(name="toy", root=tmp_path / "recipe" / "engines" / "toy", source=spec, upstream={},
                        cmake={}, targets=(), artifacts={}, abi={})
    return Toy(engine=engine, served=served, sha256=sha, cache=cache)


def _edit(path: Path, data: bytes) -> None:
    path.chmod(0o644)
    path.write_bytes(data)


# --- 1. full keys ------------------------------------------------------------------------


def test_cache_key_is_the_full_sha256(tmp_path: Path, cache: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    sha = _targz(archive, {"pkg/a.txt": b"A"})
    root, _ = extract_once(archive, sha, meta={})
    assert root.name == sha


def test_one_digit_sha_change_downloads_and_fails_with_both_hashes_and_full_path(toy: Toy) -> None:
    toy.fetch()
    wrong = toy.sha256[:-1] + ("0" if toy.sha256[-1] != "0" else "1")
    with pytest.raises(ChecksumError) as e:
        pipeline.fetch(toy.with_sha(wrong), make_manager(autoload=False))
    msg = str(e.value)
    assert wrong in msg and toy.sha256 in msg
    assert str(source.archive_path("toy", wrong, "toy-1.0.tar.gz")) in msg, "the full path of the archive"
    assert not (toy.cache / "sources" / wrong).exists()


def test_git_source_is_keyed_by_the_full_commit_and_checked(tmp_path: Path, cache: Path) -> None:
    def git(*args: str, cwd: Path) -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()

    work = tmp_path / "work"
    (work / "engine").mkdir(parents=True)
    git("init", "-q", cwd=work)
    (work / "engine" / "engine.c").write_text("int main(void) { return 0; }\n")
    git("add", "-A", cwd=work)
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    pm = make_manager(autoload=False)
    spec = SourceSpec(kind="git", url=work.as_uri(), commit=commit, subdir="engine")
    tree = pm.hook.harness_source_fetch(engine="toy", spec=spec, cache_dir=paths.sources_dir())
    assert tree.path.parent.parent.name == f"git-{commit}"
    _edit(tree.path / "engine.c", b"int main(void) { return 1; }\n")
    with pytest.raises(IntegrityError, match=r"engine\.c"):
        pm.hook.harness_source_fetch(engine="toy", spec=spec, cache_dir=paths.sources_dir())


# --- 2. the pristine tree: manifest, cheap and full checks, repair -----------------------


def test_extraction_records_a_manifest_of_every_file(toy: Toy) -> None:
    tree = toy.fetch()
    stamp = json.loads((toy.cache / "sources" / toy.sha256 / source.STAMP).read_text())
    dirs = {".", "toy-1.0", "toy-1.0/vendor", "toy-1.0/vendor/lib", "toy-1.0/vendor/lib/src"}
    assert set(FILES) | dirs == set(stamp["manifest"]), "every file and every directory"
    size, digest, *_ = stamp["manifest"]["toy-1.0/vendor/lib/src/a.c"]
    assert (size, digest) == (len(FILES["toy-1.0/vendor/lib/src/a.c"]),
                              hashlib.sha256(FILES["toy-1.0/vendor/lib/src/a.c"]).hexdigest())
    assert not (tree.path / "src" / "a.c").stat().st_mode & 0o222, "the pristine tree stays read-only"


@pytest.mark.parametrize("damage", ["edited", "added", "removed"])
def test_a_changed_pristine_tree_is_refused_naming_the_file(toy: Toy, damage: str) -> None:
    tree = toy.fetch()
    target = tree.path / "src" / "a.c"
    if damage == "edited":
        _edit(target, b"int a(void) { return 666; }\n")
    elif damage == "added":
        target = tree.path / "src" / "evil.c"
        target.write_text("int evil;\n")
    else:
        target.unlink()
    with pytest.raises(IntegrityError) as e:
        toy.fetch()
    msg = str(e.value)
    assert f"{damage}" in msg and str(target) in msg
    assert "harness fetch --repair toy" in msg


def test_a_same_size_edit_with_its_mtime_put_back_is_still_caught(toy: Toy) -> None:
    tree = toy.fetch()
    target = tree.path / "src" / "a.c"
    st = target.stat()
    _edit(target, FILES["toy-1.0/vendor/lib/src/a.c"].replace(b"1", b"7"))
    target.chmod(st.st_mode)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(IntegrityError, match=r"a\.c"):
        toy.fetch()


def test_full_verify_rehashes_what_the_stat_check_trusts(toy: Toy) -> None:
    tree = toy.fetch()
    setup = tree.path.parent.parent / "setup.py"
    _edit(setup, FILES["toy-1.0/setup.py"].replace(b"toy", b"yot"))
    setup.chmod(0o444)
    # Bit rot: the bytes no longer match the record, yet the stat vouchers do.
    stamp_path = toy.cache / "sources" / toy.sha256 / source.STAMP
    stamp = json.loads(stamp_path.read_text())
    stamp["manifest"]["toy-1.0/setup.py"][3:] = [setup.stat().st_mtime_ns, setup.stat().st_ctime_ns]
    stamp_path.write_text(json.dumps(stamp))
    toy.fetch()
    with pytest.raises(IntegrityError, match=r"setup\.py"):
        toy.fetch(full=True)


def test_a_chmod_alone_is_rehashed_once_then_trusted(toy: Toy, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = toy.fetch()
    (tree.path / "README").chmod(0o644)
    (tree.path / "README").chmod(0o444)
    hashed: list[Path] = []
    real = manifest.sha256_file
    monkeypatch.setattr(manifest, "sha256_file", lambda p: hashed.append(p) or real(p))
    toy.fetch()
    assert hashed == [tree.path / "README"]
    hashed.clear()
    toy.fetch()
    assert hashed == [], "the new stat was recorded after the content verified"


def test_repair_restores_an_edited_tree(toy: Toy) -> None:
    tree = toy.fetch()
    _edit(tree.path / "src" / "a.c", b"tampered\n")
    repaired = toy.fetch(repair=True)
    assert repaired.fetched
    assert (tree.path / "src" / "a.c").read_bytes() == FILES["toy-1.0/vendor/lib/src/a.c"]
    assert not (tree.path / "src" / "a.c").stat().st_mode & 0o222
    assert not toy.fetch(full=True).fetched


def test_a_missing_subdir_says_the_cache_is_damaged(toy: Toy) -> None:
    tree = toy.fetch()
    source.remove(tree.path)
    with pytest.raises(IntegrityError) as e:
        toy.fetch()
    assert "damaged" in str(e.value) and "--repair" in str(e.value)
    assert "source.subdir" not in str(e.value)


def test_a_tree_without_a_stamp_is_extracted_again(toy: Toy) -> None:
    tree = toy.fetch()
    (toy.cache / "sources" / toy.sha256 / source.STAMP).unlink()
    _edit(tree.path / "src" / "a.c", b"half-written\n")
    again = toy.fetch()
    assert again.fetched
    assert (again.path / "src" / "a.c").read_bytes() == FILES["toy-1.0/vendor/lib/src/a.c"]


def test_cli_fetch_verify_and_repair(toy: Toy, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(pipeline, "load_engine", lambda name: toy.engine)
    monkeypatch.setattr(pipeline, "_pm", lambda pm: make_manager(autoload=False))
    assert main(["fetch", "toy"]) == 0
    assert main(["fetch", "--verify", "toy"]) == 0
    assert "every file rehashed" in capsys.readouterr().out
    tree = toy.fetch()
    _edit(tree.path / "README", b"x")
    assert main(["fetch", "toy"]) == 5
    err = capsys.readouterr().err
    assert "IntegrityError" in err and "README" in err
    assert main(["fetch", "--repair", "toy"]) == 0
    assert "repaired" in capsys.readouterr().out
    assert (tree.path / "README").read_bytes() == FILES["toy-1.0/vendor/lib/README"]


# --- 4. self-healing downloads, once, under a lock; debris swept -------------------------


def test_a_corrupt_cached_archive_is_moved_aside_and_fetched_again(toy: Toy) -> None:
    toy.archive.parent.mkdir(parents=True)
    toy.archive.write_bytes(b"corrupt")
    tree = toy.fetch()
    assert tree.fetched
    assert hashlib.sha256(toy.archive.read_bytes()).hexdigest() == toy.sha256
    bad = list(toy.archive.parent.glob("toy-1.0.tar.gz.bad-*"))
    assert len(bad) == 1 and bad[0].read_bytes() == b"corrupt"


def test_wrong_again_is_refused_with_both_hashes_and_the_full_paths(toy: Toy) -> None:
    toy.archive.parent.mkdir(parents=True)
    toy.archive.write_bytes(b"corrupt")
    toy.served.write_bytes(b"tampered upstream")
    with pytest.raises(ChecksumError) as e:
        toy.fetch()
    msg = str(e.value)
    assert toy.sha256 in msg and hashlib.sha256(b"tampered upstream").hexdigest() in msg
    assert str(toy.archive) in msg and str(toy.archive) + ".bad-" in msg
    assert not toy.archive.exists()


real_urlopen = urllib.request.urlopen


class _SlowResponse(io.BytesIO):
    headers: ClassVar[dict[str, str]] = {}

    def __enter__(self) -> _SlowResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_concurrent_fetches_download_once(toy: Toy, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    data = toy.served.read_bytes()

    def urlopen(req: urllib.request.Request, **kw: Any) -> object:
        if not req.full_url.endswith(".tar.gz"):  # the index page
            return real_urlopen(req, **kw)
        calls.append(req.full_url)
        time.sleep(0.3)
        return _SlowResponse(data)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    results: list[object] = []

    def run() -> None:
        try:
            results.append(toy.fetch())
        except Exception as e:
            results.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1, "one download for two concurrent fetches"
    assert sorted(getattr(r, "fetched", r) for r in results) == [False, True]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_temporaries_of_dead_processes_are_swept_live_ones_kept(toy: Toy) -> None:
    dead, host = _dead_pid(), source.temp_prefix("x").split("-")[-2]
    downloads, sources = toy.archive.parent, toy.cache / "sources"
    downloads.mkdir(parents=True)
    sources.mkdir(parents=True)
    debris = [downloads / f"toy-1.0.tar.gz.tmp-{dead}-{host}-part",
              sources / f".{toy.sha256}.tmp-{dead}-{host}-abcd1234",
              sources / f".other.tmp-{dead}-{host}-abcd1234"]
    legacy = [downloads / "toy-1.0.tar.gz.part-12345", sources / ".extract-ab12cd34"]
    live = [sources / f".{toy.sha256}.tmp-{os.getppid()}-{host}-abcd1234",
            sources / ".extract-fresh123"]
    for p in (*debris, *legacy, *live):
        if p.name.endswith("part") or "part-" in p.name:
            p.write_bytes(b"x" * 10)
        else:
            (p / "tree").mkdir(parents=True)
    old = time.time() - 7200
    for p in legacy:
        os.utime(p, (old, old))
    toy.fetch()
    assert [p for p in (*debris, *legacy) if p.exists()] == []
    assert all(p.exists() for p in live), "a live process's (or a fresh legacy) temporary is left alone"


def test_an_interrupted_download_leaves_nothing(toy: Toy, monkeypatch: pytest.MonkeyPatch) -> None:
    class Interrupted(_SlowResponse):
        def read(self, n: int | None = -1) -> bytes:
            raise KeyboardInterrupt

    monkeypatch.setattr(urllib.request, "urlopen", lambda req, **kw: (
        Interrupted(b"") if req.full_url.endswith(".tar.gz") else real_urlopen(req, **kw)))
    with pytest.raises(KeyboardInterrupt):
        toy.fetch()
    assert [p for p in (toy.cache / "downloads").rglob("*") if not p.is_dir()] == []


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[tuple[str, bytes, threading.Event]]:
    """A local HTTP server sending 2 of 3 MiB, then stalling until released."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    data = os.urandom(3 << 20)
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: 2 << 20])
            self.wfile.flush()
            release.wait(30)
            self.wfile.write(data[2 << 20:])

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/f.bin", data, release
    release.set()
    server.shutdown()
    server.server_close()


def test_kill_9_mid_download_then_rerun_leaves_no_debris(
        cache: Path, slow_server: tuple[str, bytes, threading.Event]) -> None:
    url, data, release = slow_server
    sha = hashlib.sha256(data).hexdigest()
    dest = cache / "downloads" / "f.bin"
    code = (f"from pathlib import Path; from harness.source.cache import download; "
            f"download({url!r}, Path({str(dest)!r}), sha256={sha!r})")
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "HARNESS_CACHE": str(cache)})
    deadline = time.monotonic() + 20
    while not any(p.stat().st_size for p in dest.parent.glob("f.bin.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    child.kill()
    child.wait()
    assert not dest.exists() and list(dest.parent.glob("f.bin.*")), "killed mid-download: a partial file"
    release.set()
    download(url, dest, sha256=sha)
    assert dest.read_bytes() == data
    assert sorted(p.name for p in dest.parent.iterdir()) == ["f.bin"]


def test_verify_notices_a_byte_flipped_in_the_cached_archive(toy: Toy) -> None:
    toy.fetch()
    data = bytearray(toy.archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    toy.archive.write_bytes(bytes(data))
    assert not toy.fetch().fetched, "the tree is intact: an ordinary use does not need the archive"
    toy.fetch(full=True)
    assert hashlib.sha256(toy.archive.read_bytes()).hexdigest() == toy.sha256
    assert [p.read_bytes() for p in toy.archive.parent.glob("toy-1.0.tar.gz.bad-*")] == [bytes(data)]
