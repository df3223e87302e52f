"""Streams written to their client by the engine worker itself (harness.serve.app's direct streams):
the server writes the response head and the opening event, hands the client's socket to the worker,
and the binding writes each delta's event (no message per delta reaches the server); the server
writes the last events. Against a real uvicorn on loopback with harness serve's protocol and a real
worker process over the fake binding core (tests/fakes/binding_core.py: the same pump_sse contract
as the C++ core's), compared with the same requests streamed through the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from harness.serve import remote
from harness.serve.app import ServedModel, _split, create_app
from harness.serve.connection import ClientLimits, protocol_class
from harness.serve.remote import WorkerRuntime
from harness.serve.server import _loop_factory
from tests.unit.test_crash_reporting import fake_env  # noqa: F401 (fixture)

DELTAS = (" Paris", ", and", " more.")
USER = [{"role": "user", "content": "capital of France?"}]


class Served:
    """``harness serve``'s stack in a thread: uvicorn with the bounded protocol, the app, one worker."""

    def __init__(self, runtime: WorkerRuntime, limits: ClientLimits) -> None:
        self.runtime = runtime
        self.app = create_app({"tiny": ServedModel(name="tiny", engine=runtime, capacity=4, context=256)})
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        config = uvicorn.Config(self.app, http=protocol_class(limits), lifespan="off", log_config=None,
                                access_log=False, timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="uvicorn-test", daemon=True)

    def _run(self) -> None:
        async def main() -> None:  # as harness serve runs: the worker closed before the loop ends
            self.loop = asyncio.get_running_loop()
            try:
                await self.server.serve(sockets=[self.sock])
            finally:
                await self.runtime.aclose()
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(main())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def direct(self, on: bool) -> None:
        self.app.state.api.direct_streams = on


def _config(tmp_path: Path, model: Path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(f"name: tiny\nbackend: llamacpp\nparameters:\n  model: {model.name}\n")
    return p


@pytest.fixture
def served(fake_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Served]]:  # noqa: F811
    made: list[Served] = []

    def make(variant: str, limits: ClientLimits | None = None) -> Served:
        model = Path(fake_env["FAKE_MODEL"])
        rt = WorkerRuntime.start(_config(tmp_path, model), name="tiny", models_dir=model.parent, variant=variant,
                                 max_queue=2, timeout=60)
        s = Served(rt, limits or ClientLimits())
        made.append(s)
        s.thread.start()
        deadline = time.monotonic() + 10
        while not s.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return s
    yield make
    for s in made:
        s.server.should_exit = True
        s.thread.join(20)
        s.runtime.close()  # reaps it (closed already, on the server's loop)
        s.sock.close()


@pytest.fixture
def deltas_through_server(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every delta message the server received from a worker."""
    seen: list[Any] = []
    put = remote.RemoteStream._put

    def counting(self: remote.RemoteStream, item: Any) -> None:
        seen.append(item)
        put(self, item)
    monkeypatch.setattr(remote.RemoteStream, "_put", counting)
    return seen


def _said(events: list[Any], field: Callable[[dict[str, Any]], str]) -> tuple[Any, str, list[Any]]:
    """What a stream says, however its deltas were split into events: (the opening event or None, the
    deltas' text joined, the events after the last delta)."""
    deltas = [e for e in events if isinstance(e, dict) and e["choices"] and e["choices"][0]["finish_reason"] is None]
    opening = deltas.pop(0) if deltas and deltas[0]["choices"][0].get("delta", {}).get("role") else None
    return opening, "".join(field(e) for e in deltas), events[events.index(deltas[-1]) + 1:]


def _events(text: str) -> list[Any]:
    """The stream's events, parsed, ids and times left out (they differ per request)."""
    out: list[Any] = []
    assert text.endswith("data: [DONE]\n\n"), text[-200:]
    for block in text.split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        body = block[len("data: "):]
        if body == "[DONE]":
            out.append(body)
            continue
        event = json.loads(body)
        for key in ("id", "created"):
            event.pop(key, None)
        out.append(event)
    return out


def _post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    r = httpx.post(url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    return r


def test_the_worker_writes_the_same_events_the_server_would(served: Callable[..., Served],
                                                            deltas_through_server: list[Any]) -> None:
    s = served("steady")
    chat = {"model": "tiny", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    completion = {"model": "tiny", "prompt": "capital of France?", "stream": True}
    direct_chat = _events(_post(s.url, "/v1/chat/completions", chat).text)
    direct_completion = _events(_post(s.url, "/v1/completions", completion).text)
    assert deltas_through_server == [], "a direct stream's deltas came through the server"
    s.direct(False)
    relayed_chat = _events(_post(s.url, "/v1/chat/completions", chat).text)
    relayed_completion = _events(_post(s.url, "/v1/completions", completion).text)
    assert deltas_through_server, "with direct streams off, the deltas come through the server"
    # the same said, however the deltas were split into events (the server coalesces what arrived
    # together, the worker what the engine had ready): the opening, the text, the end, usage, [DONE]
    content: Callable[[dict[str, Any]], str] = lambda e: e["choices"][0]["delta"].get("content", "")  # noqa: E731
    text: Callable[[dict[str, Any]], str] = lambda e: e["choices"][0]["text"]  # noqa: E731
    assert _said(direct_chat, content) == _said(relayed_chat, content)
    assert _said(direct_completion, text) == _said(relayed_completion, text)
    opening, said, tail = _said(direct_chat, content)
    assert opening["choices"][0]["delta"] == {"role": "assistant", "content": ""} and said == "".join(DELTAS)
    assert tail[0]["choices"][0]["finish_reason"] == "length" and tail[1]["usage"] and tail[2] == "[DONE]"
    assert _said(direct_completion, text)[1] == "".join(DELTAS)
    assert s.runtime.open_streams == 0


def test_the_openai_client_reads_a_direct_stream(served: Callable[..., Served]) -> None:
    openai = pytest.importorskip("openai")
    s = served("steady")
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
    chunks = list(client.chat.completions.create(model="tiny", messages=USER, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(DELTAS)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_an_engine_crash_mid_stream_is_an_error_event_after_the_deltas_written(
        served: Callable[..., Served], monkeypatch: pytest.MonkeyPatch, deltas_through_server: list[Any]) -> None:
    monkeypatch.setenv("FAKE_CRASH_SIGNAL", "SIGSEGV")
    monkeypatch.setenv("FAKE_CRASH_AFTER", "1")  # the worker dies after writing the first delta itself
    s = served("crashy")
    r = httpx.post(s.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "stream": True}, timeout=30)
    blocks = [b for b in r.text.split("\n\n") if b]
    assert json.loads(blocks[0][len("data: "):])["choices"][0]["text"] == DELTAS[0]
    error = json.loads(blocks[-1][len("data: "):])["error"]
    assert error["code"] == "engine_crashed" and "SIGSEGV" in error["message"], error
    assert deltas_through_server == [], "the delta before the crash was written by the worker"


def test_a_client_that_leaves_frees_the_stream(served: Callable[..., Served]) -> None:
    s = served("steady")
    body = json.dumps({"model": "tiny", "prompt": "x", "stream": True}).encode()
    for _ in range(5):  # leave right after the request, before or while the worker writes
        with socket.create_connection(("127.0.0.1", s.port)) as c:
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    deadline = time.monotonic() + 10
    while s.runtime.open_streams or s.app.state.api.models["tiny"].in_flight:
        assert time.monotonic() < deadline, "a stream whose client left is still open"
        time.sleep(0.02)
    assert _post(s.url, "/v1/completions", {"model": "tiny", "prompt": "x", "stream": True}).text


def test_split_finds_the_value_once() -> None:
    def event(v: Any) -> bytes:
        return b"data: " + json.dumps({"a": 1, "delta": v, "z": None}).encode() + b"\n\n"
    prefix, suffix = _split(event)
    assert prefix + json.dumps({"content": "x"}).encode() + suffix == event({"content": "x"})
    with pytest.raises(ValueError, match="once"):
        _split(lambda v: json.dumps([v, v]).encode())


def test_a_worker_without_a_pump_streams_through_the_server(served: Callable[..., Served],
                                                           deltas_through_server: list[Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # an engine whose core has no pump_sse (another engine, an older binding): the socket offered is
    # closed by the worker and the deltas come as messages, the events the same
    monkeypatch.setenv("FAKE_NO_PUMP", "1")
    s = served("steady")
    text = _post(s.url, "/v1/completions", {"model": "tiny", "prompt": "x", "stream": True}).text
    assert _said(_events(text), lambda e: e["choices"][0]["text"])[1] == "".join(DELTAS)
    assert deltas_through_server == list(DELTAS)
    assert os.environ["FAKE_NO_PUMP"] == "1"


def test_a_client_that_does_not_read_is_reset_and_its_stream_freed(served: Callable[..., Served],
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("FAKE_FLOOD", "4096")  # 4 MiB of events: far more than the socket buffers hold
    caplog.set_level(logging.WARNING, logger="uvicorn.error.harness")
    s = served("steady", ClientLimits(write_timeout_s=0.5, socket_buffer_bytes=32 << 10))
    body = json.dumps({"model": "tiny", "prompt": "x", "stream": True}).encode()
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", s.port))
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    t0 = time.monotonic()
    try:
        deadline = t0 + 10
        while s.runtime.open_streams or s.app.state.api.models["tiny"].in_flight or "read too slowly" not in caplog.text:
            assert time.monotonic() < deadline, "the stream of a client that does not read is still open"
            time.sleep(0.02)
        took = time.monotonic() - t0
        # the server reset the connection: what the client reads ends in a reset or an end of file
        slow.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            while slow.recv(1 << 16):
                pass
    finally:
        slow.close()
    assert took < 0.5 + 3, took
    assert "write timeout" in caplog.text
    # and the next client, one that reads, gets the whole stream
    text = _post(s.url, "/v1/completions", {"model": "tiny", "prompt": "x", "stream": True}).text
    assert len(_said(_events(text), lambda e: e["choices"][0]["text"])[1]) == 4096 * 1024


def test_a_worker_closed_mid_stream_stops_writing_before_the_server_says_so(served: Callable[..., Served],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # the server stopping (another model's engine died, or SIGTERM) while the worker writes a stream:
    # the worker is told to stop first, then the server writes the error event: never both at once
    monkeypatch.setenv("FAKE_DELTAS", "50")
    monkeypatch.setenv("FAKE_DELTA_S", "0.05")
    s = served("steady")
    got: list[str] = []
    with httpx.stream("POST", s.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "stream": True},
                      timeout=30) as r:
        for line in r.iter_lines():
            got.append(line)
            if len([g for g in got if g.startswith("data: ")]) == 5:
                asyncio.run_coroutine_threadsafe(s.runtime.aclose("a test closes it"), s.loop)
    events = [json.loads(g[len("data: "):]) for g in got if g.startswith("data: ")]
    texts = [e["choices"][0]["text"] for e in events[:-1]]
    assert texts == [f" {i}" for i in range(len(texts))] and 5 <= len(texts) < 50, texts
    assert events[-1]["error"]["code"] == "engine_closed", events[-1]
