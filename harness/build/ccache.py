"""ccache as the harness uses it: per-build hit counts, and its remote storage (a shared cache).

A build's counts come from ccache's stats log (``CCACHE_STATSLOG``): every compilation of that
build appends its counters to the build's own file, so builds running at the same time (other
worktrees, other users of ``~/.cache/ccache``) neither see nor reset each other's figures, as
``ccache --zero-stats`` would. The remote storage (``CCACHE_REMOTE_STORAGE`` or
``remote_storage`` in ccache.conf: ``redis://HOST:PORT``, ``http://HOST/PATH``) is ccache's own:
the harness passes the environment through to every compile, records the setting (password
redacted) and the remote hits in the manifest, and ``harness host`` says whether it answers.
"""

from __future__ import annotations

import re
import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from harness.sandbox.bwrap import remote_storage as remote_storage
from harness.sandbox.confined import Tree

#: The stats log's name in a build dir.
STATS_LOG = "ccache-stats.log"

#: Seconds a reachability probe waits for one remote.
PROBE_TIMEOUT = 3.0


@dataclass(frozen=True, kw_only=True)
class CacheStats:
    """One build's ccache counts (cacheable compilations only)."""

    compilations: int
    hits: int
    local_hits: int
    remote_hits: int
    misses: int
    remote_errors: int
    uncacheable: int

    @property
    def hit_rate(self) -> float | None:
        return None if not self.compilations else self.hits / self.compilations

    def as_dict(self) -> dict[str, Any]:
        rate = self.hit_rate
        return {**asdict(self), "hit_rate": None if rate is None else round(rate, 4)}

    def summary(self) -> str:
        if not self.compilations:
            return "ccache: no cacheable compilation"
        return (f"ccache {self.hits}/{self.compilations} hits ({100 * (self.hit_rate or 0):.0f}%: "
                f"{self.local_hits} local, {self.remote_hits} remote)"
                + (f", {self.remote_errors} remote errors" if self.remote_errors else ""))


#: Counters that mean ccache did not try the cache for the call (links, preprocessing only, ...).
_UNCACHEABLE = re.compile(r"^(called_for_|could_not_|compiler_|unsupported_|multiple_source|no_input|"
                          r"bad_|autoconf|output_to_stdout|preprocessor_error|compile_failed|internal_error|"
                          r"missing_cache_file|error_hashing|modified_input|recache)")


def read_stats_log(build: Tree, rel: str = STATS_LOG) -> CacheStats | None:
    """Count the counters a build's compilations appended to ``rel`` in the build dir (read through the
    confined accessor: the build wrote it); None when there is no log (ccache was not the compiler
    launcher, or nothing was compiled)."""
    if not build.is_file(rel):
        return None
    counts: Counter[str] = Counter()
    uncacheable = 0
    for line in build.read_text(rel).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        counts[line] += 1
        if _UNCACHEABLE.match(line):
            uncacheable += 1
    hits = counts["direct_cache_hit"] + counts["preprocessed_cache_hit"]
    return CacheStats(compilations=hits + counts["cache_miss"], hits=hits, local_hits=counts["local_storage_hit"],
                      remote_hits=counts["remote_storage_hit"], misses=counts["cache_miss"],
                      remote_errors=counts["remote_storage_error"], uncacheable=uncacheable)


def build_env(build: Tree) -> dict[str, str]:
    """The environment additions that give one build its own stats log (emptied first)."""
    build.remove(STATS_LOG)
    return {"CCACHE_STATSLOG": str(build.root / STATS_LOG)}


def _urls(setting: str) -> list[str]:
    """The URLs of a remote storage setting: space-separated, each with optional ``|attr=value``."""
    return [part.split("|", 1)[0] for part in setting.split() if part]


def redact(setting: str) -> str:
    """The setting with any password replaced by ``***`` (it goes into manifests and reports)."""
    out = []
    for part in setting.split():
        url, _, attrs = part.partition("|")
        u = urlsplit(url)
        if u.password:
            user = f"{u.username}:***@" if u.username else "***@"
            host = u.hostname or ""
            netloc = user + (f"[{host}]" if ":" in host else host) + (f":{u.port}" if u.port else "")
            url = urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))
        out.append(url + (f"|{attrs}" if attrs else ""))
    return " ".join(out)


@dataclass(frozen=True, kw_only=True)
class RemoteProbe:
    url: str
    """Redacted."""
    reachable: bool
    detail: str


def probe_remote(url: str, timeout: float = PROBE_TIMEOUT) -> RemoteProbe:
    """Does one remote storage answer? redis: a RESP ``PING`` (AUTH first when the URL has a
    password); http(s): any HTTP response to a GET of the URL."""
    u = urlsplit(url)
    shown = redact(url)
    t0 = time.perf_counter()
    try:
        if u.scheme in ("redis", "rediss"):
            if u.scheme == "rediss":
                return RemoteProbe(url=shown, reachable=False, detail="rediss (TLS) is not probed; ccache 4.7 has no TLS")
            if not u.hostname:
                return RemoteProbe(url=shown, reachable=False, detail="no host in the URL")
            with socket.create_connection((u.hostname, u.port or 6379), timeout=timeout) as s:
                s.settimeout(timeout)
                if u.password:
                    auth = [b"AUTH", *([u.username.encode()] if u.username else []), u.password.encode()]
                    s.sendall(_resp(auth))
                    reply = s.recv(256)
                    if not reply.startswith(b"+OK"):
                        return RemoteProbe(url=shown, reachable=False, detail=f"AUTH refused: {_line(reply)}")
                s.sendall(_resp([b"PING"]))
                reply = s.recv(256)
            ms = (time.perf_counter() - t0) * 1000
            ok = reply.startswith(b"+PONG")
            return RemoteProbe(url=shown, reachable=ok, detail=f"{_line(reply)} in {ms:.0f} ms")
        if u.scheme in ("http", "https"):
            try:
                with urllib.request.urlopen(url, timeout=timeout) as r:
                    status = r.status
            except urllib.error.HTTPError as e:  # a 403/404 on the root is still a server that answers
                status = e.code
            ms = (time.perf_counter() - t0) * 1000
            return RemoteProbe(url=shown, reachable=True, detail=f"HTTP {status} in {ms:.0f} ms")
        return RemoteProbe(url=shown, reachable=False, detail=f"scheme {u.scheme!r} is not probed")
    except (OSError, urllib.error.URLError) as e:
        return RemoteProbe(url=shown, reachable=False, detail=f"{type(e).__name__}: {e}")


def _resp(parts: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def _line(reply: bytes) -> str:
    return reply.decode(errors="replace").strip().lstrip("+-") or "no reply"


def remote_status(env: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``harness host`` shows: the setting (redacted) and each remote's probe."""
    setting = remote_storage(env)
    if not setting:
        return {"configured": False, "setting": None, "remotes": []}
    return {"configured": True, "setting": redact(setting),
            "remotes": [asdict(probe_remote(url)) for url in _urls(setting)]}
