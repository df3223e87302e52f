"""Load and abuse of a real ``harness serve`` on loopback, at two sizes: the e2e spec
(engines/llamacpp/e2e/test_serve_load.py, the ``ci`` profile: seconds) and ``nox -s serve-load``
(full size, with a soak):

    python scripts/serve_load.py --model TINY.gguf [--profile soak10 | --hour] [--out DIR]

The phases, on one 4-slot model:

- burst: many concurrent streaming clients (256): each gets a complete, valid stream or a 429
  with Retry-After, none hangs, and the admission bound holds (/health polled meanwhile);
- per model (full size): a 1-slot config of the same model served beside it, both asked beyond
  their capacity at once: each admission bound holds on its own;
- leavers: clients that disconnect at random points (1,000): afterwards nothing is left behind
  (no request admitted or holding a slot, no stream read: /health and /metrics);
- abuse, while well-behaved clients are served: slowloris heads, slow readers (a byte at a time),
  slow bodies (each answered 408 or dropped in bounded time), malformed input (truncated JSON,
  a 100 MB body, deep nesting, wrong content type, invalid UTF-8, huge max_tokens, an unknown
  model: each an OpenAI-shaped 4xx naming the problem);
- soak: a steady mixed load for minutes (10; an hour with --hour) with the server's RSS
  (the HTTP process and its engine workers) sampled: its slope with a 95% interval; a slope
  whose interval lies above the leak bound fails.

Reported per phase: requests/s, time to first token and inter-token latency (p50, p99, seen by
the clients), 429s, RSS; JSON and Markdown under --out.

It stands alone (the standard library and httpx, nothing from tests/): the spec loads it by its
path, nox runs it as a script.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import resource
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

PROMPT = [{"role": "user", "content": "Count to ten."}]
START_TIMEOUT_S = 180.0
SLACK_S = 3.0  # scheduling slack on a busy host, for every bound checked
#: The RSS slope judges a leak only over this much soak after its warm-up (the first fifth, at
#: least a minute); a shorter soak reports it.
MIN_LEAK_WINDOW_S = 240.0


@dataclass(frozen=True, kw_only=True)
class Profile:
    name: str
    clients: int
    """concurrent streaming clients in the burst"""
    queue: int
    """--max-queue: places beyond the 4 slots"""
    leavers: int
    leavers_at_once: int
    max_tokens: int
    slowloris: int
    slow_readers: int
    big_body_mb: int
    soak_s: float
    soak_clients: int
    header_timeout_s: float = 2.0
    body_timeout_s: float = 2.0
    write_timeout_s: float = 3.0
    leak_mb_per_hour: float = 50.0
    second_model: bool = False
    """serve a 1-slot config of the same model beside it: each model's admission bound holds alone"""


#: The full-size profiles' header timeout: 48 leavers at once from one client process, each on a new
#: connection, on a host busy with other work, left a connection unwritten for over 2 s (the server then
#: closes it, as it must, and the client saw a ReadError); the server's default is 10 s.
SOAK_HEADER_TIMEOUT_S = 10.0

PROFILES = {
    "ci": Profile(name="ci", clients=64, queue=12, leavers=50, leavers_at_once=50, max_tokens=16, slowloris=16,
                  slow_readers=1, big_body_mb=40, soak_s=0, soak_clients=0),
    "soak10": Profile(name="soak10", clients=256, queue=60, leavers=1000, leavers_at_once=48, max_tokens=32,
                      slowloris=200, slow_readers=8, big_body_mb=100, soak_s=600, soak_clients=48,
                      second_model=True, header_timeout_s=SOAK_HEADER_TIMEOUT_S),
    "soak60": Profile(name="soak60", clients=256, queue=60, leavers=1000, leavers_at_once=48, max_tokens=32,
                      slowloris=200, slow_readers=8, big_body_mb=100, soak_s=3600, soak_clients=48,
                      second_model=True, header_timeout_s=SOAK_HEADER_TIMEOUT_S),
}

CONFIG = """\
name: {name}
backend: llamacpp
context_size: 1024
parameters:
  model: {model}
  temperature: 0
options:
  - n_parallel:{parallel}
  - threads:2
"""
#: the served configs: name -> parallel sequences
MODELS = {"tiny": 4, "tiny-1": 1}


# ---------------------------------------------------------------- measurements

@dataclass
class Stream:
    """One streaming request as its client saw it."""

    kind: str
    """ok | 429 | 400 (a malformed body refused) | bad | left | reconnect (a reused connection closed
    before any answer)"""
    why: str = ""
    ttft_s: float = 0.0
    gaps_s: list[float] = field(default_factory=list)
    """between successive events that carried text (coalesced text is one gap)"""
    tokens: int = 0
    total_s: float = 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def summary(streams: list[Stream], wall_s: float) -> dict[str, Any]:
    ok = [s for s in streams if s.kind == "ok"]
    gaps = [g for s in ok for g in s.gaps_s]
    return {"requests": len(streams), "ok": len(ok), "429": sum(s.kind == "429" for s in streams),
            "left": sum(s.kind == "left" for s in streams), "400": sum(s.kind == "400" for s in streams),
            "bad": [s.why for s in streams if s.kind == "bad"][:10],
            "reconnects": sum(s.kind == "reconnect" for s in streams),
            "wall_s": round(wall_s, 2), "requests_per_s": round(len(ok) / wall_s, 2) if wall_s else 0.0,
            "tokens_per_s": round(sum(s.tokens for s in ok) / wall_s, 1) if wall_s else 0.0,
            "ttft_ms": {"p50": _ms(percentile([s.ttft_s for s in ok], 50)),
                        "p99": _ms(percentile([s.ttft_s for s in ok], 99))},
            "itl_ms": {"p50": _ms(percentile(gaps, 50)), "p99": _ms(percentile(gaps, 99))}}


def too_many_reconnects(phase: str, summary: dict[str, Any]) -> list[str]:
    """A failure when more than 1% of a phase's requests (at least 3) broke before any answer: more
    than the keep-alive race explains."""
    n, bound = summary["reconnects"], max(3, summary["requests"] // 100)
    return [f"{phase}: {n} of {summary['requests']} requests lost their connection before any answer"] if n > bound else []


def _ms(s: float) -> float:
    return round(1000 * s, 2) if not math.isnan(s) else float("nan")


def rss_parts(pid: int) -> tuple[int, int]:
    """Resident memory of the server process, and of its children (the engine workers)."""
    import psutil

    proc = psutil.Process(pid)
    children = 0
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            children += child.memory_info().rss
    return int(proc.memory_info().rss), children


def rss_bytes(pid: int) -> int:
    """Resident memory of the server process and its children (the engine workers)."""
    return sum(rss_parts(pid))


def slope(samples: list[tuple[float, int]]) -> dict[str, float]:
    """Least-squares RSS slope in MB/hour with a 95% interval (normal approximation)."""
    n = len(samples)
    if n < 3:
        return {"mb_per_hour": float("nan"), "low": float("nan"), "high": float("nan"), "samples": n}
    ts = [t for t, _ in samples]
    ys = [r / 1e6 for _, r in samples]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    sxx = sum((t - mt) ** 2 for t in ts)
    b = sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / sxx
    resid = [y - (my + b * (t - mt)) for t, y in zip(ts, ys, strict=True)]
    se = math.sqrt(sum(r * r for r in resid) / (n - 2) / sxx)
    h = 3600.0
    return {"mb_per_hour": round(b * h, 2), "low": round((b - 1.96 * se) * h, 2),
            "high": round((b + 1.96 * se) * h, 2), "samples": n}


# ---------------------------------------------------------------- clients

def body(max_tokens: int, model: str = "tiny", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": PROMPT, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}, **extra}


async def stream_once(http: httpx.AsyncClient, base: str, max_tokens: int, model: str = "tiny") -> Stream:
    """One streaming client, checked: a complete valid stream (ok), a proper 429, or bad (why); a
    request whose connection broke before any answer is a ``reconnect``: a pooled keep-alive connection
    the server closed as the client reused it (uvicorn closes idle ones after 5 s, and a client cannot
    see that close in time: the openai client retries these twice), counted and bounded by the caller."""
    answered = [False]
    try:
        return await _stream_once(http, base, max_tokens, model, answered)
    except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError) as e:
        if answered[0]:
            return Stream(kind="bad", why=f"the connection broke mid-stream: {e!r}")
        return Stream(kind="reconnect", why=repr(e))


async def truncated_once(http: httpx.AsyncClient, base: str) -> Stream:
    """A truncated JSON body, as the soak sends among its streams: a 400 ``invalid_json`` (kind
    ``400``), anything else ``bad``; a broken reused connection a ``reconnect``, as for
    :func:`stream_once` (the first hour-long soak stopped on one: the driver, not the server)."""
    try:
        r = await http.post(base + "/chat/completions", content=b'{"model": "tiny", "mess',
                            headers={"content-type": "application/json"})
    except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError) as e:
        return Stream(kind="reconnect", why=repr(e))
    if r.status_code != 400 or r.json().get("error", {}).get("code") != "invalid_json":
        return Stream(kind="bad", why=f"a truncated body got {r.status_code}: {r.text[:300]!r}")
    return Stream(kind="400")


async def _stream_once(http: httpx.AsyncClient, base: str, max_tokens: int, model: str,
                       answered: list[bool]) -> Stream:
    t0 = time.monotonic()
    out = Stream(kind="ok")
    last = 0.0
    async with http.stream("POST", base + "/chat/completions", json=body(max_tokens, model)) as r:
        answered[0] = True
        if r.status_code == 429:
            data = json.loads(await r.aread())
            # Retry-After is the queue's drain time, in whole seconds, different for each refused client
            if not (r.headers.get("retry-after") or "").isdigit() or int(r.headers["retry-after"]) < 1 \
                    or data["error"]["code"] != "rate_limit_exceeded":
                return Stream(kind="bad", why=f"429 without Retry-After or code: {r.headers} {data}")
            return Stream(kind="429")
        if r.status_code != 200:
            return Stream(kind="bad", why=f"status {r.status_code}: {(await r.aread())[:300]!r}")
        events: list[Any] = []
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
                if data != "[DONE]" and "error" in events[-1]:
                    return Stream(kind="bad", why=f"an error event: {events[-1]['error']}")
                choices = events[-1]["choices"] if data != "[DONE]" else None
                text = choices[0]["delta"].get("content") if choices else None
                if text:
                    now = time.monotonic()
                    if not last:
                        out.ttft_s = now - t0
                    else:
                        out.gaps_s.append(now - last)
                    last = now
            elif line:
                return Stream(kind="bad", why=f"not an SSE data line: {line!r}")
    out.total_s = time.monotonic() - t0
    why = check_events(events, max_tokens)
    if why:
        return Stream(kind="bad", why=why)
    out.tokens = max_tokens
    return out


def check_events(events: list[Any], max_tokens: int) -> str:
    """Why a chat stream is not complete and valid ("" when it is)."""
    if not events or events[-1] != "[DONE]":
        return f"the stream did not end with [DONE]: {events[-3:]}"
    chunks = events[:-1]
    if len({c["id"] for c in chunks}) != 1 or any("error" in c for c in chunks):
        return f"ids or an error event: {chunks[-3:]}"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    usage = chunks[-1].get("usage")
    if finishes[-1] != "length" or any(finishes[:-1]) or not usage or usage["completion_tokens"] != max_tokens:
        return f"no finishing chunk of {max_tokens} tokens: {finishes[-2:]} {usage}"
    return ""


async def leave_at_random(base: str, rng: random.Random, timeout: float) -> Stream:
    """A client that goes away after a random number of lines (0: right after the headers)."""
    leave_after = rng.randrange(0, 12)
    # 200 tokens: a client slower than the engine may not leave before its request has run out, and
    # four of those still fit the tiny model's shared 1,024-token KV cache
    async with httpx.AsyncClient(timeout=timeout) as http, \
            http.stream("POST", base + "/chat/completions", json=body(200)) as r:
        if r.status_code == 429:
            return Stream(kind="429")
        if r.status_code != 200:
            return Stream(kind="bad", why=f"status {r.status_code}")
        n = 0
        async for _ in r.aiter_lines():
            if n >= leave_after:
                break
            n += 1
    return Stream(kind="left")


def idle_state(root: str) -> tuple[bool, str]:
    """Whether nothing is left behind in any model: no request admitted, holding a slot or waiting,
    no stream read."""
    health = httpx.get(root + "/health", timeout=10).json()["models"]
    metrics = httpx.get(root + "/metrics", timeout=10).text
    streams = [ln for ln in metrics.splitlines() if ln.startswith("harness_open_streams{")]
    idle = (all(h["in_flight"] == 0 and h["active"] == 0 and h["pending"] == 0 for h in health.values())
            and len(streams) == len(health) and all(ln.endswith(" 0.0") for ln in streams))
    return idle, f"{health} {streams}"


def wait_idle(root: str, timeout: float = 15.0) -> float:
    """Seconds until the server is idle; AssertionError naming its state when it is not in time."""
    t0 = time.monotonic()
    while True:
        idle, state = idle_state(root)
        if idle:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"the server is not idle {timeout} s after its clients: {state}")
        time.sleep(0.1)


# ---------------------------------------------------------------- abusers (raw sockets, in threads)

def _answer(sock: socket.socket, timeout: float) -> tuple[int, dict[str, Any]]:
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head:
        return 0, {}
    try:
        return int(head.split(b" ", 2)[1]), json.loads(rest)
    except ValueError:
        return int(head.split(b" ", 2)[1]), {}


def slowloris(port: int, n: int, timeout: float) -> list[tuple[int, str, float]]:
    """``n`` connections sending a request head one byte per 50 ms: (status, code, seconds to the answer)."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + b"X-Pad: y\r\n" * 40
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    t0 = time.monotonic()
    done: dict[socket.socket, tuple[int, str, float]] = {}
    poll = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for s in socks:
        poll.register(s, select.POLLIN)
    try:
        for i in range(len(head)):
            for fd, _ in poll.poll(0):
                s = by_fd[fd]
                if s not in done:
                    poll.unregister(s)
                    status, err = _answer(s, 1.0)
                    done[s] = (status, str(err.get("error", {}).get("code")), time.monotonic() - t0)
            if len(done) == n or time.monotonic() - t0 > timeout:
                break
            for s in socks:
                if s not in done:
                    with contextlib.suppress(OSError):
                        s.send(head[i:i + 1])
            time.sleep(0.05)
        for s in socks:
            if s not in done:
                status, err = _answer(s, max(0.1, timeout - (time.monotonic() - t0)))
                done[s] = (status, str(err.get("error", {}).get("code")), time.monotonic() - t0)
    finally:
        for s in socks:
            s.close()
    return [done[s] for s in socks]


def slow_body(port: int, timeout: float) -> tuple[int, str, float]:
    """A request whose body stops coming after 18 of 1000 bytes: (status, code, seconds)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        t0 = time.monotonic()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n" + b'{"model": "tiny", ')
        status, err = _answer(s, timeout)
        return status, str(err.get("error", {}).get("code")), time.monotonic() - t0


#: tcpi_state (the first byte of struct tcp_info) once the peer reset the connection or closed its side
_TCP_CLOSE, _TCP_CLOSE_WAIT = 7, 8


def _closed_by_peer(s: socket.socket) -> bool:
    """Whether the server reset or closed the connection, whatever is still unread in our buffer."""
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] in (_TCP_CLOSE, _TCP_CLOSE_WAIT)


def slow_reader(port: int, max_tokens: int, timeout: float, pipelined: int = 48) -> tuple[str, float]:
    """A client that sends ``pipelined`` streaming requests at once on one connection and reads the
    answers one byte per 50 ms through a 4 KiB window (more than the kernel's buffers on loopback
    hold, so the server's own buffer fills): ("dropped" when the server closed the connection before
    the end, "finished" when it read every answer, "open" at the timeout), and the seconds that took."""
    payload = json.dumps(body(max_tokens)).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    t0 = time.monotonic()
    try:
        s.sendall(request * pipelined)
        s.settimeout(timeout)
        seen = b""
        while time.monotonic() - t0 < timeout:
            if _closed_by_peer(s):
                return "dropped", time.monotonic() - t0
            try:
                b = s.recv(1)
            except ConnectionResetError:
                return "dropped", time.monotonic() - t0
            except TimeoutError:
                break
            if not b:
                return ("finished" if seen.endswith(b"0\r\n\r\n") else "dropped"), time.monotonic() - t0
            seen = (seen + b)[-8:]
            time.sleep(0.05)
        return "open", time.monotonic() - t0
    finally:
        s.close()


def _big(total: int) -> tuple[int, Iterator[bytes]]:
    """A chat body of about ``total`` bytes, sent in 1 MiB pieces (never held whole): (length, pieces)."""
    head, tail, block = b'{"model": "tiny", "messages": [{"role": "user", "content": "', b'"}]}', b" " * (1 << 20)
    blocks = max(1, total // len(block))

    def pieces() -> Iterator[bytes]:
        yield head
        for _ in range(blocks):
            yield block
        yield tail
    return len(head) + blocks * len(block) + len(tail), pieces()


def malformed(base: str, big_mb: int) -> list[dict[str, Any]]:
    """Each kind of malformed input: its answer, and whether it is the 4xx that names the problem."""
    json_ct = {"content-type": "application/json"}
    ok = json.dumps({"model": "tiny", "messages": PROMPT, "max_tokens": 4}).encode()
    sized = _big(big_mb << 20)
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("truncated JSON", {"content": ok[: len(ok) // 2], "headers": json_ct}, 400, "invalid_json"),
        (f"{big_mb} MB body (Content-Length)", {"content": sized[1], "headers": {**json_ct,
                                                                                 "content-length": str(sized[0])}},
         413, "request_too_large"),
        (f"{big_mb} MB body (chunked)", {"content": _big(big_mb << 20)[1], "headers": json_ct}, 413,
         "request_too_large"),
        ("deep nesting", {"content": b'{"model": "tiny", "messages": ' + b"[" * 100000 + b"]" * 100000 + b"}",
                          "headers": json_ct}, 400, "too_deep"),
        ("wrong content type", {"content": ok, "headers": {"content-type": "text/plain"}}, 415,
         "unsupported_media_type"),
        ("invalid UTF-8", {"content": ok.replace(b"Count", b"C\xffount"), "headers": json_ct}, 400, "invalid_utf8"),
        ("huge max_tokens", {"json": {"model": "tiny", "messages": PROMPT, "max_tokens": 10**6}}, 400,
         "context_length_exceeded"),
        ("unknown model", {"json": {"model": "gpt-9", "messages": PROMPT}}, 404, "model_not_found"),
    ]
    out = []
    with httpx.Client(timeout=60) as http:
        for name, kw, status, code in cases:
            try:
                r = http.post(base + "/chat/completions", **kw)
                err = r.json().get("error", {})
                good = (r.status_code == status and err.get("code") == code and bool(err.get("message"))
                        and set(err) == {"message", "type", "param", "code"})
                out.append({"case": name, "status": r.status_code, "code": err.get("code"), "ok": good,
                            "message": str(err.get("message"))[:160]})
            except httpx.HTTPError as e:
                out.append({"case": name, "status": 0, "code": None, "ok": False, "message": repr(e)[:160]})
    return out


# ---------------------------------------------------------------- phases

class Watch:
    """The most requests each model held admitted while the block ran, from /health polled every
    20 ms on a thread of its own (the clients' event loop is too busy to look in time)."""

    def __init__(self, root: str, names: list[str]) -> None:
        self.root, self.most = root, dict.fromkeys(names, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-watch", daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as h:
            while not self._stop.wait(0.02):
                health = h.get(self.root + "/health").json()["models"]
                for name in self.most:
                    self.most[name] = max(self.most[name], health[name]["in_flight"])

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def burst(base: str, root: str, p: Profile) -> tuple[dict[str, Any], int]:
    """``p.clients`` streams at once; returns the summary and the most requests seen admitted."""
    limits = httpx.Limits(max_connections=p.clients, max_keepalive_connections=p.clients)
    t0 = time.monotonic()
    with Watch(root, ["tiny"]) as watch:
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:
            results = await asyncio.gather(*(asyncio.wait_for(stream_once(http, base, p.max_tokens), 120)
                                             for _ in range(p.clients)))
    return summary(list(results), time.monotonic() - t0), watch.most["tiny"]


async def per_model(base: str, root: str, p: Profile) -> dict[str, Any]:
    """Both models at once, each asked beyond its capacity: each admission bound holds on its own
    (the 1-slot model's refusals take no place of the 4-slot one, and the reverse)."""
    capacity = {name: parallel + p.queue for name, parallel in MODELS.items()}
    n = p.clients // 2
    limits = httpx.Limits(max_connections=2 * n, max_keepalive_connections=2 * n)
    t0 = time.monotonic()
    with Watch(root, list(MODELS)) as watch:
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:
            results = await asyncio.gather(*(asyncio.wait_for(stream_once(http, base, p.max_tokens, name), 120)
                                             for name in MODELS for _ in range(n)))
    wall = time.monotonic() - t0
    out: dict[str, Any] = {name: summary(list(results[i * n:(i + 1) * n]), wall) for i, name in enumerate(MODELS)}
    out["most_admitted"], out["capacity"] = watch.most, capacity
    return out


async def leavers(base: str, p: Profile, seed: int = 33) -> dict[str, Any]:
    rng = random.Random(seed)
    gate = asyncio.Semaphore(p.leavers_at_once)

    async def one() -> Stream:
        async with gate:
            return await asyncio.wait_for(leave_at_random(base, rng, 120), 120)

    t0 = time.monotonic()
    results = await asyncio.gather(*(one() for _ in range(p.leavers)))
    return summary(list(results), time.monotonic() - t0)


async def abuse(base: str, port: int, p: Profile) -> dict[str, Any]:
    """The abusers, all at once, while a few well-behaved clients stream one after another."""
    t0 = time.monotonic()
    bound_head = p.header_timeout_s + SLACK_S
    tasks = {
        "slowloris": asyncio.to_thread(slowloris, port, p.slowloris, bound_head + 5),
        "slow_body": asyncio.to_thread(slow_body, port, p.body_timeout_s + SLACK_S + 5),
        # 48 answers of 160 tokens each (1.5 MB): a connection takes one slot at a time, and four
        # of them fit the tiny model's shared 1,024-token KV cache beside the clients served meanwhile
        "slow_readers": asyncio.gather(*(asyncio.to_thread(slow_reader, port, 160, 60.0)
                                         for _ in range(p.slow_readers))),
        "malformed": asyncio.to_thread(malformed, base, p.big_body_mb),
    }

    async def served() -> list[Stream]:
        out = []
        async with httpx.AsyncClient(timeout=120) as http:
            while time.monotonic() - t0 < bound_head + 2:
                out.append(await stream_once(http, base, p.max_tokens))
        return out

    names = list(tasks)
    values = await asyncio.gather(*tasks.values(), served())
    got = dict(zip(names, values[:-1], strict=True))
    normal = summary(values[-1], time.monotonic() - t0)
    heads = got["slowloris"]
    return {
        "slowloris": {"n": len(heads), "408": sum(s == 408 for s, _, _ in heads),
                      "max_s": round(max((t for _, _, t in heads), default=0.0), 2), "bound_s": bound_head},
        "slow_body": {"status": got["slow_body"][0], "code": got["slow_body"][1], "s": round(got["slow_body"][2], 2)},
        "slow_readers": [{"outcome": o, "s": round(t, 2)} for o, t in got["slow_readers"]],
        "malformed": got["malformed"],
        "served_meanwhile": normal,
    }


async def soak(base: str, pid: int, p: Profile) -> dict[str, Any]:
    """``p.soak_clients`` clients looping for ``p.soak_s``: mostly complete streams, some leavers and
    malformed bodies; RSS sampled every 2 s (the first fifth is warm-up, left out of the slope)."""
    rng = random.Random(60)
    end = time.monotonic() + p.soak_s
    results: list[Stream] = []
    samples: list[tuple[float, int, int]] = []
    t0 = time.monotonic()

    async def client() -> None:
        async with httpx.AsyncClient(timeout=120) as http:
            while time.monotonic() < end:
                roll = rng.random()
                if roll < 0.1:
                    results.append(await leave_at_random(base, rng, 120))
                elif roll < 0.15:
                    results.append(await truncated_once(http, base))
                else:
                    results.append(await stream_once(http, base, p.max_tokens))

    async def sample() -> None:
        while time.monotonic() < end:
            samples.append((time.monotonic() - t0, *rss_parts(pid)))
            await asyncio.sleep(2.0)

    await asyncio.gather(sample(), *(client() for _ in range(p.soak_clients)))
    warm = max(p.soak_s / 5, 60.0)
    out = summary(results, time.monotonic() - t0)
    out["rss_mb"] = {"start": round(sum(samples[0][1:]) / 1e6, 1), "end": round(sum(samples[-1][1:]) / 1e6, 1)}
    kept = [s for s in samples if s[0] >= warm]
    out["rss_slope"] = slope([(t, server + workers) for t, server, workers in kept])
    out["rss_slope"]["window_s"] = round(max(0.0, p.soak_s - warm))
    # which process grows, for whoever looks into a leak
    out["rss_slope_server"] = slope([(t, server) for t, server, _ in kept])
    out["rss_slope_workers"] = slope([(t, workers) for t, _, workers in kept])
    return out


# ---------------------------------------------------------------- the server

class Server:
    """``harness serve`` of the tiny model on a free loopback port, the profile's bounds on."""

    def __init__(self, model: Path, tmp: Path, p: Profile, variant: str | None = None) -> None:
        configs = []
        for name, parallel in list(MODELS.items())[:2 if p.second_model else 1]:
            configs.append(tmp / f"{name}.yaml")
            configs[-1].write_text(CONFIG.format(name=name, model=model.name, parallel=parallel))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.root = f"http://127.0.0.1:{self.port}"
        self.base = self.root + "/v1"
        self.log = tmp / "serve.log"
        argv = [sys.executable, "-m", "harness", "serve", *map(str, configs), "--models-dir", str(model.parent),
                "--port", str(self.port), "--max-queue", str(p.queue), "--header-timeout", str(p.header_timeout_s),
                "--body-timeout", str(p.body_timeout_s), "--write-timeout", str(p.write_timeout_s)]
        if variant:
            argv += ["--variant", variant]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"harness serve exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.root + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"harness serve did not answer /health in {START_TIMEOUT_S} s")
            time.sleep(0.2)

    def close(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=30)


def run(model: Path, tmp: Path, p: Profile, variant: str | None = None) -> dict[str, Any]:
    """Every phase of ``p`` against a fresh server: the report, with ``failures`` (empty: passed)."""
    server = Server(model, tmp, p, variant)
    failures: list[str] = []
    report: dict[str, Any] = {"profile": asdict(p), "capacity": 4 + p.queue}
    try:
        report["rss_mb_start"] = round(rss_bytes(server.proc.pid) / 1e6, 1)
        report["rss_mb_start_server_workers"] = [round(x / 1e6, 1) for x in rss_parts(server.proc.pid)]
        report["burst"], most = asyncio.run(burst(server.base, server.root, p))
        report["burst"]["most_admitted"] = most
        if report["burst"]["bad"]:
            failures.append(f"burst: {report['burst']['bad'][:3]}")
        failures += too_many_reconnects("burst", report["burst"])
        if most > 4 + p.queue:
            failures.append(f"burst: {most} admitted at once, beyond the bound of {4 + p.queue}")
        report["burst"]["idle_after_s"] = round(wait_idle(server.root), 2)
        if p.second_model:
            report["per_model"] = pm = asyncio.run(per_model(server.base, server.root, p))
            for name in MODELS:
                if pm[name]["bad"]:
                    failures.append(f"per model, {name}: {pm[name]['bad'][:3]}")
                if pm["most_admitted"][name] > pm["capacity"][name]:
                    failures.append(f"per model: {pm['most_admitted'][name]} requests admitted at once by {name}, "
                                    f"beyond its bound of {pm['capacity'][name]}")
            report["per_model"]["idle_after_s"] = round(wait_idle(server.root), 2)
        report["leavers"] = asyncio.run(leavers(server.base, p))
        if report["leavers"]["bad"]:
            failures.append(f"leavers: {report['leavers']['bad'][:3]}")
        report["leavers"]["idle_after_s"] = round(wait_idle(server.root), 2)
        report["rss_mb_after_leavers"] = round(rss_bytes(server.proc.pid) / 1e6, 1)
        report["abuse"] = a = asyncio.run(abuse(server.base, server.port, p))
        failures += abuse_failures(a, p)
        report["abuse"]["idle_after_s"] = round(wait_idle(server.root, 30), 2)
        if p.soak_s:
            report["soak"] = s = asyncio.run(soak(server.base, server.proc.pid, p))
            if s["bad"]:
                failures.append(f"soak: {s['bad'][:3]}")
            failures += too_many_reconnects("soak", s)
            # the allocators warm up for a minute or two: a shorter window says nothing about a leak
            if s["rss_slope"]["window_s"] >= MIN_LEAK_WINDOW_S and s["rss_slope"]["low"] > p.leak_mb_per_hour:
                failures.append(f"soak: RSS grows {s['rss_slope']['mb_per_hour']} MB/hour (95% interval "
                                f"[{s['rss_slope']['low']}, {s['rss_slope']['high']}]), above the leak bound of "
                                f"{p.leak_mb_per_hour} MB/hour")
            report["soak"]["idle_after_s"] = round(wait_idle(server.root, 30), 2)
        report["rss_mb_end"] = round(rss_bytes(server.proc.pid) / 1e6, 1)
        report["rss_mb_end_server_workers"] = [round(x / 1e6, 1) for x in rss_parts(server.proc.pid)]
    except AssertionError as e:
        failures.append(str(e))
    finally:
        code = server.close()
        if code != 0:
            failures.append(f"harness serve exited with {code}: {server.log.read_text()[-2000:]}")
    report["failures"] = failures
    return report


def abuse_failures(a: dict[str, Any], p: Profile) -> list[str]:
    out = []
    heads = a["slowloris"]
    if heads["408"] != heads["n"] or heads["max_s"] > heads["bound_s"]:
        out.append(f"slowloris: {heads}")
    if a["slow_body"]["status"] != 408 or a["slow_body"]["s"] > p.body_timeout_s + SLACK_S:
        out.append(f"slow body: {a['slow_body']}")
    for r in a["slow_readers"]:
        if r["outcome"] != "dropped":
            out.append(f"slow reader: {r} (expected the server to drop it)")
    out += [f"malformed: {m}" for m in a["malformed"] if not m["ok"]]
    if a["served_meanwhile"]["bad"] or not a["served_meanwhile"]["ok"]:
        out.append(f"clients served during the abuse: {a['served_meanwhile']}")
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# harness serve under load and abuse: profile {report['profile']['name']}", ""]
    lines += ["| phase | requests | ok | left | 429 | req/s | tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms |",
              "|---|---|---|---|---|---|---|---|---|"]
    for phase in ("burst", "leavers", "soak"):
        s = report.get(phase)
        if s:
            lines.append(f"| {phase} | {s['requests']} | {s['ok']} | {s['left']} | {s['429']} | {s['requests_per_s']} | "
                         f"{s['tokens_per_s']} | {s['ttft_ms']['p50']} / {s['ttft_ms']['p99']} | "
                         f"{s['itl_ms']['p50']} / {s['itl_ms']['p99']} |")
    pm = report.get("per_model")
    if pm:
        lines += ["", "Two models at once (per-model capacity): " + ", ".join(
            f"{name}: {pm[name]['ok']} streams, {pm[name]['429']} refused, at most {pm['most_admitted'][name]} "
            f"admitted of {pm['capacity'][name]}" for name in MODELS)]
    a = report.get("abuse")
    if a:
        m = a["served_meanwhile"]
        lines += ["", f"Abuse: slowloris {a['slowloris']}, slow body {a['slow_body']}, slow readers "
                      f"{a['slow_readers']}; clients served meanwhile: {m['ok']} ok, TTFT p99 {m['ttft_ms']['p99']} ms.",
                  "", "| malformed input | status | code | ok |", "|---|---|---|---|"]
        lines += [f"| {c['case']} | {c['status']} | {c['code']} | {c['ok']} |" for c in a["malformed"]]
    s = report.get("soak")
    judged = s and s["rss_slope"]["window_s"] >= MIN_LEAK_WINDOW_S
    lines += ["", f"RSS (server + engine worker): start {report.get('rss_mb_start')} MB, after the leavers "
                  f"{report.get('rss_mb_after_leavers')} MB, end {report.get('rss_mb_end')} MB"
              + (f"; soak slope {s['rss_slope']} MB/hour (server {s['rss_slope_server']['mb_per_hour']}, engine "
                 f"workers {s['rss_slope_workers']['mb_per_hour']})"
                 + ("" if judged else f" (not judged: under {MIN_LEAK_WINDOW_S:.0f} s after the warm-up)") if s else "")]
    lines += ["", "Failures: " + ("; ".join(report["failures"]) if report["failures"] else "none")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/serve_load.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=os.environ.get("HARNESS_TINY_MODEL"),
                    help="the tiny model (default $HARNESS_TINY_MODEL)")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="soak10")
    ap.add_argument("--hour", action="store_true", help="the hour-long soak (profile soak60)")
    ap.add_argument("--soak-minutes", type=float, default=None, help="override the profile's soak length")
    ap.add_argument("--variant", default=None)
    ap.add_argument("--out", type=Path, default=None, help="report directory (default reports/<time>-serve-load)")
    args = ap.parse_args(argv)
    if args.model is None:
        ap.error("give --model (the tiny model) or set HARNESS_TINY_MODEL")
    p = PROFILES["soak60" if args.hour else args.profile]
    if args.soak_minutes is not None:
        p = Profile(**{**asdict(p), "soak_s": 60 * args.soak_minutes})
    # 256 clients, 200 slowloris connections and the server's side of each
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    out = args.out or Path("reports") / f"{time.strftime('%Y%m%d-%H%M%S')}-serve-load"
    out.mkdir(parents=True, exist_ok=True)
    report = run(args.model.resolve(), out, p, args.variant)
    (out / "results.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "report.md").write_text(markdown(report))
    print(markdown(report))
    print(f"report: {out / 'report.md'}")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
