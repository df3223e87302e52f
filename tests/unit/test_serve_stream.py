"""The per-token path: deltas batched per event-loop wake-up, coalesced for a slow reader, never
reordered or lost; and a client that leaves mid-stream cancels its request.

A fake engine stands in for the runtime: its streams are plain iterators run by the real
:class:`AsyncRuntime` (the same pump thread a loaded engine gets), producing tokens as fast as
a test wants, or in lockstep with what the reader has seen. The app is driven through ASGI
with a ``send`` that is as slow as the client it plays.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.requests import ClientDisconnect

from harness.runtime.aio import AsyncRuntime, AsyncStream
from harness.runtime.api import ChatDelta, Completion, coalesce
from harness.serve.app import ServedModel, create_app

WAIT_S = 10.0


class FakeStream:
    """A runtime stream of ``tokens``: ``gate(i)`` runs before token ``i`` is produced (it may block),
    ``close()`` cancels (the next read ends the stream with finish_reason ``cancelled``)."""

    def __init__(self, tokens: list[Any], gate: Callable[[int], None] | None = None) -> None:
        self.tokens = tokens
        self.gate = gate
        self.i = 0
        self.cancelled = threading.Event()
        self.ended = threading.Event()
        self.result: Completion | None = None
        self.stalled = False

    def _end(self, reason: str) -> None:
        self.result = Completion(text="", finish_reason=reason, n_prompt=1, n_cached=0, n_generated=self.i,
                                 ttft_s=0.0, total_s=0.0)
        self.ended.set()
        raise StopIteration

    def __next__(self) -> Any:
        if self.gate is not None and not self.cancelled.is_set() and self.i < len(self.tokens):
            self.gate(self.i)
        if self.cancelled.is_set():
            self._end("cancelled")
        if self.i >= len(self.tokens):
            self._end("length")
        self.i += 1
        return self.tokens[self.i - 1]

    def close(self) -> None:
        self.cancelled.set()


class FakeEngine:
    """The engine calls the app makes, each stream made by ``make``."""

    def __init__(self, make: Callable[[], FakeStream]) -> None:
        self.make = make
        self.streams: list[FakeStream] = []

    def stream(self, prompt: Any, sampling: Any = None, **kw: Any) -> FakeStream:
        self.streams.append(self.make())
        return self.streams[-1]

    def chat_stream(self, messages: Any, **kw: Any) -> FakeStream:
        return self.stream(messages)

    def stats(self) -> dict[str, int]:
        return {"active": sum(not s.ended.is_set() for s in self.streams), "pending": 0}

    def info(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


@pytest.fixture
def runtime() -> Iterator[Callable[[Callable[[], FakeStream]], tuple[ServedModel, FakeEngine]]]:
    made: list[AsyncRuntime] = []

    def make(factory: Callable[[], FakeStream]) -> tuple[ServedModel, FakeEngine]:
        eng = FakeEngine(factory)
        rt = AsyncRuntime(eng, max_concurrency=4)
        made.append(rt)
        return ServedModel(name="fake", engine=rt, capacity=4), eng
    yield make
    for rt in made:
        rt._pool.shutdown(wait=True)


# ---------------------------------------------------------------- AsyncStream.batches

def _lockstep(seen: list[threading.Event]) -> Callable[[int], None]:
    """A gate that produces token i only once the reader has token i - 1."""
    def gate(i: int) -> None:
        if i and not seen[i - 1].wait(WAIT_S):
            raise AssertionError(f"token {i - 1} was produced but never handed to the reader")
    return gate


def test_a_reader_that_keeps_up_gets_each_token_at_once() -> None:
    n = 50
    seen = [threading.Event() for _ in range(n)]
    fake = FakeStream([f"t{i} " for i in range(n)], gate=_lockstep(seen))

    async def read() -> list[list[str]]:
        out = []
        async for batch in AsyncStream[str](fake, pool).batches():  # type: ignore[arg-type]
            out.append(batch)
            for t in batch:
                seen[int(t[1:])].set()
        return out

    with _pool() as pool:
        batches = asyncio.run(asyncio.wait_for(read(), WAIT_S * 2))
    assert batches == [[f"t{i} "] for i in range(n)]


def test_a_slow_reader_gets_tokens_coalesced_in_order() -> None:
    n = 2000
    fake = FakeStream(list(range(n)))

    async def read() -> list[list[int]]:
        out = []
        async for batch in AsyncStream[int](fake, pool).batches():  # type: ignore[arg-type]
            out.append(batch)
            await asyncio.sleep(0.005)  # a reader slower than the engine
        return out

    with _pool() as pool:
        batches = asyncio.run(asyncio.wait_for(read(), WAIT_S * 2))
    assert [t for b in batches for t in b] == list(range(n))
    assert len(batches) < n // 4, len(batches)
    assert fake.result is not None and fake.result.finish_reason == "length"


def test_an_engine_error_comes_after_the_tokens_before_it() -> None:
    class Failing(FakeStream):
        def __next__(self) -> Any:
            if self.i == 3:
                raise RuntimeError("engine broke")
            return super().__next__()

    async def read() -> tuple[list[int], BaseException | None]:
        got: list[int] = []
        try:
            async for t in AsyncStream[int](Failing(list(range(10))), pool):  # type: ignore[arg-type]
                got.append(t)
        except RuntimeError as e:
            return got, e
        return got, None

    with _pool() as pool:
        got, err = asyncio.run(read())
    assert got == [0, 1, 2] and str(err) == "engine broke"


def test_leaving_the_loop_cancels_and_frees_the_pump() -> None:
    fake = FakeStream(list(range(10**6)), gate=lambda i: time.sleep(0.001))

    async def read() -> AsyncStream[int]:
        s = AsyncStream[int](fake, pool)  # type: ignore[arg-type]
        async for t in s:
            if t == 5:
                break
        return s

    with _pool() as pool:
        s = asyncio.run(read())
        assert fake.cancelled.is_set() and fake.ended.wait(WAIT_S)
        assert _until(lambda: s.pumped)


def test_coalesce_keeps_order_and_tool_call_boundaries() -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "get", "arguments": ""}}
    frag = [{"index": 0, "function": {"arguments": a}} for a in ('{"ci', 'ty": ', '"Paris"}')]
    call2 = {"index": 1, "id": "c2", "type": "function", "function": {"name": "now", "arguments": "{}"}}
    deltas = [ChatDelta(reasoning_content="hm"), ChatDelta(reasoning_content="m."), ChatDelta(content="I'll "),
              ChatDelta(content="look."), ChatDelta(reasoning_content="again"),
              ChatDelta(tool_calls=(call,)), *(ChatDelta(tool_calls=(f,)) for f in frag),
              ChatDelta(tool_calls=(call2,)), ChatDelta(content="done")]
    out = [d.as_openai() for d in coalesce(deltas)]
    assert out == [
        {"reasoning_content": "hmm.", "content": "I'll look."},
        {"reasoning_content": "again"},
        {"tool_calls": [{**call, "function": {"name": "get", "arguments": '{"city": "Paris"}'}}]},
        {"tool_calls": [call2]},
        {"content": "done"},
    ]
    assert call["function"]["arguments"] == ""  # the input deltas are not changed
    assert coalesce([]) == []


# ---------------------------------------------------------------- through the app, over ASGI

class Client:
    """One ASGI request: ``send`` sleeps ``write_s`` per body message (a slow socket); the client
    disconnects once it has ``leave_after`` body messages (as uvicorn reports it: spec 2.3 sends
    ``http.disconnect``; spec 2.4 makes the next ``send`` raise OSError)."""

    def __init__(self, body: dict[str, Any], *, write_s: float = 0.0, leave_after: int | None = None,
                 spec: str = "2.3", on_body: Callable[[bytes], None] | None = None) -> None:
        self.body = json.dumps(body).encode()
        self.write_s = write_s
        self.leave_after = leave_after
        self.spec = spec
        self.on_body = on_body
        self.status = 0
        self.messages: list[bytes] = []
        self._sent_body = False
        self._gone: asyncio.Event | None = None

    async def receive(self) -> dict[str, Any]:
        if not self._sent_body:
            self._sent_body = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        assert self._gone is not None
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        assert self._gone is not None
        if self._gone.is_set() and self.spec == "2.4":
            raise OSError("connection closed")
        if message["type"] == "http.response.start":
            self.status = message["status"]
            return
        if message.get("body"):
            self.messages.append(message["body"])
            if self.on_body is not None:
                self.on_body(message["body"])
            if self.leave_after is not None and len(self.messages) >= self.leave_after:
                self._gone.set()
        await asyncio.sleep(self.write_s)

    async def run(self, app: Any, path: str) -> None:
        self._gone = asyncio.Event()
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": self.spec}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "headers": [(b"content-type", b"application/json")],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
        await asyncio.wait_for(app(scope, self.receive, self.send), WAIT_S * 2)

    def events(self) -> list[Any]:
        text = b"".join(self.messages).decode()
        assert all(m.endswith(b"\n\n") for m in self.messages)  # each write holds whole events
        frames = [f for f in text.split("\n\n") if f]
        return [f.removeprefix("data: ") if f == "data: [DONE]" else json.loads(f.removeprefix("data: "))
                for f in frames]


COMPLETE = {"model": "fake", "prompt": "x", "stream": True}


def test_sse_to_a_slow_client_is_coalesced_in_order(runtime: Any) -> None:
    n = 400
    m, eng = runtime(lambda: FakeStream([f"{i} " for i in range(n)]))
    client = Client(COMPLETE, write_s=0.005)
    asyncio.run(client.run(create_app({"fake": m}), "/v1/completions"))
    ev = client.events()
    assert client.status == 200 and ev[-1] == "[DONE]"
    texts = [e["choices"][0]["text"] for e in ev[:-1]]
    assert "".join(texts) == "".join(f"{i} " for i in range(n))
    assert ev[-2]["choices"][0]["finish_reason"] == "length"
    assert len(client.messages) < n // 4, len(client.messages)  # fewer writes than tokens
    assert m.in_flight == 0 and eng.stats()["active"] == 0


def test_sse_to_a_client_that_keeps_up_gets_each_token_alone(runtime: Any) -> None:
    n = 30
    seen = [threading.Event() for _ in range(n)]

    def got(body: bytes) -> None:
        for f in body.decode().split("\n\n"):
            if f.startswith("data: {"):
                text = json.loads(f[6:])["choices"][0]["text"]
                if text:
                    seen[int(text[1:])].set()

    m, _ = runtime(lambda: FakeStream([f"t{i}" for i in range(n)], gate=_lockstep(seen)))
    client = Client(COMPLETE, on_body=got)
    asyncio.run(client.run(create_app({"fake": m}), "/v1/completions"))
    texts = [e["choices"][0]["text"] for e in client.events()[:-1]]
    assert texts == [f"t{i}" for i in range(n)] + [""]  # one event per token, then the finishing chunk


def test_chat_sse_coalesces_tool_call_fragments(runtime: Any) -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "get", "arguments": ""}}
    deltas = [ChatDelta(tool_calls=(call,))] + [ChatDelta(tool_calls=({"index": 0, "function": {"arguments": a}},))
                                                for a in ('{"city"', ': "Paris"', "}")]
    m, _ = runtime(lambda: FakeStream(deltas))
    client = Client({"model": "fake", "messages": [{"role": "user", "content": "x"}], "stream": True}, write_s=0.01)
    asyncio.run(client.run(create_app({"fake": m}), "/v1/chat/completions"))
    calls = [c for e in client.events()[:-1] for c in e["choices"][0]["delta"].get("tool_calls", [])]
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Paris"}'
    assert [c.get("id") for c in calls if "id" in c] == ["c1"]


def _until(cond: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("spec", ["2.3", "2.4"])
def test_a_client_that_leaves_mid_stream_cancels_its_request(runtime: Any, spec: str) -> None:
    m, eng = runtime(lambda: FakeStream([f"{i} " for i in range(10**6)], gate=lambda i: time.sleep(0.002)))
    app = create_app({"fake": m})

    gone = Client(COMPLETE, leave_after=3, spec=spec)
    try:
        asyncio.run(gone.run(app, "/v1/completions"))
    except ClientDisconnect:  # spec 2.4: the failed write ends the response with it, as under a server
        assert spec == "2.4"
    assert gone.status == 200 and len(gone.messages) >= 3
    (s,) = eng.streams
    assert s.cancelled.is_set(), "the disconnect never reached the runtime"
    assert s.ended.wait(WAIT_S) and s.result is not None and s.result.finish_reason == "cancelled"
    assert s.i < 10**6
    assert _until(lambda: eng.stats()["active"] == 0)
    assert m.in_flight == 0
    assert _until(lambda: m.engine.open_streams == 0)  # the pump let go of its thread
    metrics = asyncio.run(_get(app, "/metrics"))
    assert 'harness_open_streams{model="fake"} 0.0' in metrics and 'harness_in_flight_requests{model="fake"} 0.0' in metrics


async def _get(app: Any, path: str) -> str:
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        out.append(message.get("body", b""))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    return b"".join(out).decode()


class _pool:
    """A thread pool for AsyncStreams made outside a runtime, shut down (and waited for) on exit."""

    def __enter__(self) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=2)
        return self.pool

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True)


def test_a_consumer_that_stops_taking_is_cancelled_after_the_stall_timeout() -> None:
    fake = FakeStream(list(range(10**6)), gate=lambda i: time.sleep(0.005))
    fake._stall_timeout = 0.2  # type: ignore[attr-defined]

    async def read() -> AsyncStream[int]:
        s = AsyncStream[int](fake, pool)  # type: ignore[arg-type]
        batches = s.batches()
        got = list(await batches.__anext__())
        await asyncio.sleep(1.0)  # takes nothing more, without leaving
        assert fake.cancelled.is_set() and fake.stalled
        got += [t for b in [b async for b in batches] for t in b]
        assert got == list(range(len(got))) and len(got) < 10**6  # what came before the cancel, in order
        return s

    with _pool() as pool:
        s = asyncio.run(read())
        assert fake.ended.wait(WAIT_S) and _until(lambda: s.pumped)


class _DoneReq:
    """A runtime request that has already ended: the stall watchdog has nothing to cancel."""

    done = True

    def next(self) -> None:
        return None

    def cancel(self) -> None:
        pass


def test_the_stall_watchdog_keeps_no_stream_alive() -> None:
    import gc
    import weakref

    from harness.runtime.api import Stream

    s = Stream(_DoneReq(), time.perf_counter())
    gone = weakref.ref(s)
    time.sleep(1.2)  # the watchdog looks at least twice while the stream lives
    del s
    time.sleep(1.2)  # and at least twice after
    gc.collect()
    assert gone() is None, "the watchdog still holds a stream nobody uses"
