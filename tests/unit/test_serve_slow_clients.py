"""Slow clients against a real uvicorn on loopback: slowloris headers, a slow body, a client that
reads one byte at a time. Each gets bounded time and memory (harness.serve.connection and the
app's body timeout); the clients served meanwhile are not slowed down.

The server runs in a thread with the bounds made short (fractions of a second) over the fake
engine of test_serve_stream (the real AsyncRuntime pump around plain iterators).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from harness.runtime.aio import AsyncRuntime
from harness.serve import app as app_module
from harness.serve.app import ServedModel, create_app
from harness.serve.connection import BoundedH11Protocol, ClientLimits, protocol_class
from harness.serve.server import _loop_factory
from tests.unit.test_serve_stream import FakeEngine, FakeStream

LIMITS = ClientLimits(header_timeout_s=0.5, body_timeout_s=0.5, write_timeout_s=0.5, max_header_bytes=8 << 10,
                      write_buffer_bytes=64 << 10)
SLACK_S = 1.5  # scheduling slack on a busy two-core host


class PromptEngine(FakeEngine):
    """Streams made per prompt: ``"flood"`` is 4 MiB as fast as it can go, anything else a short
    stream that takes about a second."""

    def stream(self, prompt: Any, sampling: Any = None, **kw: Any) -> FakeStream:
        if prompt == "flood":
            s = FakeStream(["x" * 1024] * 4096)
        else:
            s = FakeStream([f"{i} " for i in range(20)], gate=lambda i: time.sleep(0.05))
        self.streams.append(s)
        return s


class Live:
    """A uvicorn server in a thread: its address, its server object (connections), the model."""

    def __init__(self, model: ServedModel, engine: PromptEngine, limits: ClientLimits) -> None:
        self.model, self.engine = model, engine
        app = create_app({"fake": model}, body_timeout_s=limits.body_timeout_s)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        config = uvicorn.Config(app, http=protocol_class(limits), lifespan="off", log_config=None,
                                access_log=False, timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="uvicorn-test", daemon=True)

    def _run(self) -> None:
        # the event loop harness serve runs on (uvloop where installed): the socket options and the
        # write-buffer callbacks these specs rely on are the loop's transport's
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(self.server.serve(sockets=[self.sock]))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connections(self) -> list[BoundedH11Protocol]:
        return [c for c in list(self.server.server_state.connections) if isinstance(c, BoundedH11Protocol)]


@pytest.fixture
def live() -> Iterator[Live]:
    eng = PromptEngine(lambda: FakeStream([]))
    rt = AsyncRuntime(eng, max_concurrency=8)
    srv = Live(ServedModel(name="fake", engine=rt, capacity=8), eng, LIMITS)
    srv.thread.start()
    assert _until(lambda: srv.server.started, 10), "uvicorn did not start"
    yield srv
    srv.server.should_exit = True
    srv.thread.join(10)
    rt._pool.shutdown(wait=True)
    srv.sock.close()


def _until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _answer(sock: socket.socket, timeout: float) -> tuple[int, dict[str, Any], float]:
    """Read an answer to the end of the connection: (status, JSON body, seconds until closed)."""
    t0 = time.monotonic()
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower(), head
    return status, json.loads(body), time.monotonic() - t0


def _served_normally(live: Live, n: int) -> list[float]:
    """``n`` streamed completions one after another by a well-behaved client: their durations."""
    took = []
    with httpx.Client(base_url=live.url, timeout=10) as http:
        for _ in range(n):
            t0 = time.monotonic()
            r = http.post("/v1/completions", json={"model": "fake", "prompt": "hi", "stream": True})
            assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n"), r.text[-300:]
            took.append(time.monotonic() - t0)
    return took


def test_slowloris_heads_get_408_in_bounded_time_while_others_are_served(live: Live) -> None:
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + b"X-Pad: y\r\n" * 40
    socks = [socket.create_connection(("127.0.0.1", live.port)) for _ in range(20)]
    opened = time.monotonic()
    stop = threading.Event()

    def drip() -> None:  # one byte per socket every 50 ms: the head would take over 20 s
        answered: set[socket.socket] = set()
        for i in range(len(head)):
            # a socket the server answered takes no more bytes (they would only draw a reset)
            answered.update(select.select(socks, [], [], 0)[0])
            for s in socks:
                if s not in answered:
                    with contextlib.suppress(OSError):
                        s.send(head[i:i + 1])
            if stop.wait(0.05):
                return

    dripper = threading.Thread(target=drip)
    dripper.start()
    try:
        took = _served_normally(live, 3)
        answers = [_answer(s, LIMITS.header_timeout_s + SLACK_S + 5) for s in socks]
    finally:
        stop.set()
        dripper.join()
        for s in socks:
            s.close()
    for status, body, _ in answers:
        assert status == 408 and body["error"]["code"] == "request_timeout", body
        assert "did not arrive within 0.5 s" in body["error"]["message"]
    assert time.monotonic() - opened < LIMITS.header_timeout_s + SLACK_S + 5
    assert max(took) < 2.5, took  # a one-second stream, not held up by 20 slowloris connections
    assert _until(lambda: not live.connections(), 5), "a slowloris connection outlived its timeout"


def test_an_unfinished_head_beyond_the_size_bound_is_431_and_a_malformed_one_400(live: Live) -> None:
    with socket.create_connection(("127.0.0.1", live.port)) as s:  # a head that keeps coming
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (LIMITS.max_header_bytes + 100))
        status, body, _ = _answer(s, 5)
    assert status == 431 and body["error"]["code"] == "request_header_fields_too_large"
    assert str(LIMITS.max_header_bytes) in body["error"]["message"]
    with socket.create_connection(("127.0.0.1", live.port)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost x\r\n\r\n")
        status, body, _ = _answer(s, 5)
    assert status == 400 and body["error"]["code"] == "invalid_http"
    # and a head within the bound is answered
    assert httpx.get(live.url + "/health", headers={"X-Pad": "a" * 4000}).status_code == 200


def test_a_body_that_stops_coming_gets_408(live: Live) -> None:
    with socket.create_connection(("127.0.0.1", live.port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n" + b'{"model": "fake", ')
        status, body, took = _answer(s, LIMITS.body_timeout_s + SLACK_S + 5)
    assert status == 408 and body["error"]["code"] == "request_timeout"
    assert "18 of 1000 bytes came" in body["error"]["message"]
    assert took < LIMITS.body_timeout_s + SLACK_S
    assert live.model.in_flight == 0 and not live.engine.streams  # nothing reached the engine


def test_a_client_that_leaves_while_sending_its_body_is_no_server_error(live: Live,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    # seen in the full-size soak: starlette's ClientDisconnect escaped the body reader and uvicorn
    # logged "Exception in ASGI application" with a traceback for each such client
    caplog.set_level(logging.INFO)
    with socket.create_connection(("127.0.0.1", live.port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n" + b'{"model": "fake", ')
        time.sleep(0.2)
    assert _until(lambda: 'harness_requests_total{endpoint="completions",model="",status="400"} 1.0'
                  in httpx.get(live.url + "/metrics").text, 5)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    assert live.model.in_flight == 0 and not live.engine.streams


def test_a_reader_of_one_byte_at_a_time_is_dropped_and_its_place_freed(live: Live,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="uvicorn.error.harness")
    body = json.dumps({"model": "fake", "prompt": "flood", "stream": True}).encode()
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
    slow.connect(("127.0.0.1", live.port))
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    stop = threading.Event()
    most = [0]

    def read_slowly() -> None:
        with contextlib.suppress(OSError):
            while not stop.wait(0.02):
                if not slow.recv(1):
                    return

    def watch() -> None:  # the slow connection's unsent bytes, as often as the test can look
        while not stop.wait(0.005):
            for c in live.connections():
                with contextlib.suppress(Exception):
                    most[0] = max(most[0], c.transport.get_write_buffer_size())

    threads = [threading.Thread(target=read_slowly), threading.Thread(target=watch)]
    for t in threads:
        t.start()
    try:
        assert _until(lambda: bool(live.engine.streams), 5)
        flood = live.engine.streams[0]
        took = _served_normally(live, 3)  # meanwhile: served as usual
        assert flood.cancelled.wait(LIMITS.write_timeout_s + SLACK_S + 5), "the slow reader's request still runs"
        assert flood.ended.wait(5)
        assert _until(lambda: live.model.in_flight == 0 and live.model.engine.open_streams == 0, 5)
        assert _until(lambda: not live.connections(), 5), "the slow reader's connection is still open"
    finally:
        stop.set()
        for t in threads:
            t.join()
        slow.close()
    assert max(took) < 2.5, took
    # memory: the transport held at most its high-water mark plus one write
    assert 0 < most[0] <= LIMITS.write_buffer_bytes + app_module.WRITE_BYTES + 4096, most[0]
    assert "read too slowly" in caplog.text and "write timeout" in caplog.text
