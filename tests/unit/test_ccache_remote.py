"""A shared compiler cache through ccache's remote storage, with a real Redis.

``redis-server`` (Debian's, from scripts/install-system-deps.sh) is started on 127.0.0.1 with a
free port and stopped at the end. The small C library of the third-engine test goes through the
harness build path twice: the first build fills an empty local ccache and the remote; the second,
in a fresh build dir with another empty local ccache (never the shared ~/.cache/ccache), gets
every compilation from Redis, and its manifest says so.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.build import ccache
from harness.sandbox.confined import Tree
from tests.unit.test_third_engine import DESCRIPTOR, PATCH, _repo, _run

TOOLS = ("git", "cmake", "ninja", "cc", "ccache", "redis-server")
pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in TOOLS),
                                reason=f"needs {', '.join(TOOLS)} (bash scripts/install-system-deps.sh)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    url = f"redis://127.0.0.1:{port}"
    proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path), "--logfile", str(tmp_path / "redis.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not ccache.probe_remote(url, timeout=0.5).reachable:
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (tmp_path / "redis.log").read_text() if (tmp_path / "redis.log").exists() else ""
                pytest.fail(f"redis-server did not answer on {url}: {log[-2000:]}")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_second_build_with_a_cleared_local_cache_hits_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], redis_url: str) -> None:
    bare, one, _ = _repo(tmp_path / "proj")
    proj = tmp_path / "proj"
    (proj / "engines" / "tiny").mkdir(parents=True)
    (proj / "engines" / "tiny" / "patches").mkdir(parents=True)
    (proj / "engines" / "tiny" / "engine.yaml").write_text(DESCRIPTOR.format(url=bare.as_uri(), commit=one))
    (proj / "engines" / "tiny" / "patches" / "0001-tiny-clamp-negative-scale.patch").write_text(PATCH)
    monkeypatch.setenv("HARNESS_ENGINES_PATH", str(proj / "engines"))
    # writing the shared cache is a trusted build's privilege (an untrusted one reads it read-only:
    # tests/unit/test_recipe_sandbox.py); its sandbox keeps the network for ccache's remote
    monkeypatch.setenv("HARNESS_TRUST", "tiny")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_NO_PROGRESS", "1")
    monkeypatch.delenv("HARNESS_DIST", raising=False)
    monkeypatch.delenv("CCACHE_STATSLOG", raising=False)
    monkeypatch.setenv("CCACHE_REMOTE_STORAGE", redis_url)
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache-first"))

    code, out, err = _run(capsys, "host", "--json")
    assert code == 0, err
    remote = json.loads(out)["ccache_remote"]
    assert remote["configured"] and remote["setting"] == redis_url
    assert remote["remotes"][0]["reachable"] is True and remote["remotes"][0]["detail"].startswith("PONG")

    assert _run(capsys, "abi", "snapshot", "tiny", "--json")[0] == 0
    code, out, err = _run(capsys, "build", "tiny", "--variant", "cpu", "--json")
    assert code == 0, err
    first = json.loads(out)[0]
    assert first["built"] is True
    manifest = json.loads((Path(first["artifact"]) / "manifest.json").read_text())
    cold = manifest["ccache"]
    assert cold["remote_storage"] == redis_url
    assert cold["compilations"] >= 1 and cold["misses"] == cold["compilations"] and cold["hits"] == 0
    assert cold["remote_errors"] == 0

    # a fresh build dir and an empty local cache: only Redis has the objects
    shutil.rmtree(manifest["build_dir"])
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache-second"))
    code, out, err = _run(capsys, "build", "tiny", "--variant", "cpu", "--force")
    assert code == 0, err
    assert f"ccache {cold['compilations']}/{cold['compilations']} hits (100%: 0 local, {cold['compilations']} remote)" in out
    warm = json.loads((Path(first["artifact"]) / "manifest.json").read_text())["ccache"]
    assert warm["remote_hits"] == warm["hits"] == warm["compilations"] == cold["compilations"]
    assert warm["local_hits"] == 0 and warm["misses"] == 0 and warm["hit_rate"] == 1.0


def test_host_says_when_the_remote_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    port = _free_port()  # nothing listens there
    monkeypatch.setenv("CCACHE_REMOTE_STORAGE", f"redis://user:hunter2@127.0.0.1:{port}|connect-timeout=50")
    status = ccache.remote_status()
    assert status["setting"] == f"redis://user:***@127.0.0.1:{port}|connect-timeout=50"
    assert status["remotes"][0]["reachable"] is False and "hunter2" not in json.dumps(status)
    monkeypatch.setenv("CCACHE_REMOTE_STORAGE", "")
    monkeypatch.setenv("CCACHE_DIR", "/nonexistent-harness-test")
    monkeypatch.setenv("CCACHE_CONFIGPATH", "/nonexistent-harness-test/ccache.conf")
    assert ccache.remote_status()["configured"] is False


def test_stats_log_counts(tmp_path: Path) -> None:
    # the stats log as ccache 4.7 writes it: "# <source>" then one counter id per line
    log = tmp_path / "stats.log"
    log.write_text("# a.c\ncache_miss\ndirect_cache_miss\nlocal_storage_miss\nremote_storage_miss\n"
                   "local_storage_write\nremote_storage_write\n"
                   "# b.c\ndirect_cache_hit\nlocal_storage_miss\nremote_storage_hit\nremote_storage_read_hit\n"
                   "# c.c\ndirect_cache_hit\nlocal_storage_hit\nlocal_storage_read_hit\n"
                   "# link\ncalled_for_link\n")
    stats = ccache.read_stats_log(Tree(tmp_path), "stats.log")
    assert stats is not None
    assert (stats.compilations, stats.hits, stats.local_hits, stats.remote_hits, stats.misses, stats.uncacheable) == (
        3, 2, 1, 1, 1, 1)
    assert stats.summary() == "ccache 2/3 hits (67%: 1 local, 1 remote)"
    assert ccache.read_stats_log(Tree(tmp_path), "none.log") is None
