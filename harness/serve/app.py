"""The Starlette application: OpenAI routes over loaded engines, admission, streaming, metrics.

Admission (:mod:`harness.serve.admission`): each model hands ``capacity`` requests to its engine
at once (its parallel sequences plus a short list the engine keeps waiting itself), straight into
its continuous batching; a burst beyond that waits in the model's queue, bounded by memory, by the
expected wait at the measured drain rate and, where asked, by count. A request over a bound is
answered 429 at once, never left hanging, with a ``Retry-After`` from the drain rate, spread over
the refused clients. A client that goes away cancels its request: a stream when its response is
torn down, a request still queued or a non-streaming one when the disconnect is noticed while it
waits (checked every second in the queue, every quarter second in the engine).

The engine is an :class:`~harness.runtime.aio.AsyncRuntime` (in this process) or a
:class:`~harness.serve.remote.WorkerRuntime` (in a worker process: ``harness serve``); an
engine that crashes ends each request in flight on it with an error (a 503, or an error event
in a stream), never a connection cut mid-answer.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.core import errors
from harness.runtime.aio import AsyncRuntime, AsyncStream
from harness.runtime.api import ChatDelta, ChatResult, Completion, coalesce
from harness.serve import protocol, responses
from harness.serve.admission import Admission, Place, QueueBounds
from harness.serve.body import BODY_TIMEOUT_S, read_json
from harness.serve.connection import CONNECTION_EXTENSION, BoundedH11Protocol
from harness.serve.protocol import APIError
from harness.serve.remote import RemoteStream, WorkerRuntime

#: A stream of engine deltas, in this process or from a worker.
EngineStream = AsyncStream[Any] | RemoteStream

T = TypeVar("T")

#: A non-streaming request checks for a vanished client this often while it waits.
DISCONNECT_POLL_S = 0.25
#: A request in the queue does so this often (a burst of thousands waits there).
QUEUE_POLL_S = 1.0
#: SSE events go out in writes of at most about this many bytes: a client far behind gets its
#: backlog in pieces, each waiting for the transport to drain (a connection never holds much more
#: than its high-water mark plus one write).
WRITE_BYTES = 64 << 10


@dataclass(kw_only=True)
class ServedModel:
    """One loaded config: its name (``model`` in requests), engine and admission."""

    name: str
    engine: AsyncRuntime | WorkerRuntime
    capacity: int
    """requests handed to the engine at once: its parallel sequences plus the engine's own waiting
    list (:func:`harness.serve.worker.capacity`); a burst beyond waits in the queue"""
    parallel: int = 0
    """the engine's parallel sequences (0: ``capacity``)"""
    queue: QueueBounds = field(default_factory=QueueBounds)
    """the bounds of the queue"""
    embeddings: bool = False
    """an embedding model: /v1/embeddings only"""
    config: str = ""
    context: int = 0
    """the engine's context in tokens (prompt and completion of a sequence together); 0: unknown"""
    sessions: Path | None = None
    """where this server keeps saved sessions (:mod:`harness.serve.sessions`); None: sessions are off"""
    context_shift: bool = False
    """the engine makes room when a sequence reaches the context: a max_tokens past it is no mistake"""
    created: int = field(default_factory=protocol.now)
    admission: Admission = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.admission = Admission(self.name, parallel=self.parallel or self.capacity, places=self.capacity,
                                   bounds=self.queue)

    @property
    def in_flight(self) -> int:
        """requests admitted: handed to the engine or waiting in the queue"""
        return self.admission.admitted

    @property
    def requests(self) -> dict[int, str]:
        """the requests handed to the engine, by admission: what a crash report names"""
        return self.admission.requests

    @property
    def admits(self) -> int | None:
        """requests admitted at most at once (parallel sequences + ``--max-queue``), None: no count bound"""
        bound = self.queue.max_requests
        return None if bound is None else self.admission.parallel + bound

    def admit(self, label: str = "", body_bytes: int = 0) -> Place:
        """A place (or a 429) for the request ``label`` names, whose body had ``body_bytes``: the
        engine's at once when it has room, else in the queue (:meth:`Place.wait`); give it back with
        :meth:`Place.release`."""
        return self.admission.admit(label, body_bytes)


class Metrics:
    """Prometheus metrics of one app (its own registry: several apps in one process stay apart)."""

    def __init__(self, models: dict[str, ServedModel]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("harness_requests", "HTTP API requests by model, endpoint and status",
                                ["model", "endpoint", "status"], registry=self.registry)
        self.prompt_tokens = Counter("harness_prompt_tokens", "prompt tokens processed", ["model"],
                                     registry=self.registry)
        self.completion_tokens = Counter("harness_completion_tokens", "tokens generated", ["model"],
                                         registry=self.registry)
        self.ttft = Histogram("harness_time_to_first_token_seconds", "time from submission to the first token",
                              ["model"], registry=self.registry,
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.queue_wait = Histogram("harness_queue_wait_seconds", "time an admitted request waited in the queue "
                                    "for the engine", ["model"], registry=self.registry,
                                    buckets=(0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        self._models = models
        self.registry.register(self)

    def collect(self) -> Any:
        """Gauges read at scrape time from the engines and the admission counters."""
        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["model"])
        depth = gauge("harness_queue_depth", "requests waiting for a sequence slot (in the queue and the engine's list)")
        queued = gauge("harness_queue_requests", "requests waiting in the queue for the engine to take them")
        held = gauge("harness_queue_bytes", "bytes the queued requests hold (estimated from their bodies)")
        max_bytes = gauge("harness_queue_max_bytes", "the queue's memory bound (--max-queue-memory)")
        max_wait = gauge("harness_queue_max_wait_seconds", "the longest expected wait a request is queued for "
                                                           "(--max-queue-wait)")
        expected = gauge("harness_queue_expected_wait_seconds", "how long a request arriving now would wait for a "
                                                                "sequence (NaN: no drain rate measured yet)")
        rate = gauge("harness_queue_drain_rate", "requests completed per second while every sequence is busy "
                                                 "(NaN: not measured yet)")
        refused = CounterMetricFamily("harness_queue_refused", "requests refused (429) by bound: requests "
                                                               "(--max-queue), memory, wait", labels=["model", "bound"])
        active = gauge("harness_active_requests", "requests holding a sequence slot")
        admitted = gauge("harness_in_flight_requests", "requests admitted by the server (in the engine or queued)")
        capacity = gauge("harness_capacity_requests", "requests the server admits at once (+Inf: no --max-queue)")
        streams = gauge("harness_open_streams", "streamed requests whose engine events are still read")
        for m in self._models.values():
            streams.add_metric([m.name], float(getattr(m.engine, "open_streams", 0)))
            stats = m.engine.stats() if not m.embeddings else {}
            q = m.admission.state()
            depth.add_metric([m.name], float(stats.get("pending", 0) + q.waiting))
            queued.add_metric([m.name], float(q.waiting))
            held.add_metric([m.name], float(q.bytes))
            max_bytes.add_metric([m.name], float(m.queue.max_bytes))
            max_wait.add_metric([m.name], m.queue.max_wait_s)
            expected.add_metric([m.name], math.nan if q.expected_wait_s is None else q.expected_wait_s)
            rate.add_metric([m.name], math.nan if q.drain_per_s is None else q.drain_per_s)
            for bound, n in q.refused.items():
                refused.add_metric([m.name, bound], float(n))
            active.add_metric([m.name], float(stats.get("active", 0)))
            admitted.add_metric([m.name], float(m.in_flight))
            capacity.add_metric([m.name], math.inf if m.admits is None else float(m.admits))
        yield from (depth, queued, held, max_bytes, max_wait, expected, rate, refused, active, admitted, capacity,
                    streams)

    def done(self, model: str, c: Completion | None) -> None:
        if c is None:
            return
        self.prompt_tokens.labels(model).inc(c.n_prompt)
        self.completion_tokens.labels(model).inc(c.n_generated)
        if c.n_generated:
            self.ttft.labels(model).observe(c.ttft_s)


def _error_response(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


class _EventStream(StreamingResponse):
    """A streamed answer whose events are closed when it ends however it ends (a client gone
    mid-write included, or before the first event): ``on_close`` then cancels the engine request
    and gives its place back, not the garbage collector some time later."""

    def __init__(self, content: AsyncIterator[bytes], *, on_close: Callable[[], Awaitable[None]]) -> None:
        super().__init__(content, media_type="text/event-stream")
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            try:
                if close is not None:
                    await close()
            finally:
                await self._on_close()


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def _split(event: Callable[[Any], bytes]) -> tuple[bytes, bytes]:
    """(prefix, suffix) of the events ``event(value)`` makes: what comes before and after the value's JSON."""
    marker = "\x00"
    head, sep, tail = event(marker).partition(json.dumps(marker).encode())
    if not sep or sep in tail:
        msg = "the event does not hold its value once"
        raise ValueError(msg)
    return head, tail


@dataclass(frozen=True)
class _Direct:
    """How a stream's events are written by the engine worker once it has the client's socket:
    ``prefix + value + suffix`` each (:func:`_split` of the route's event), over ``connection``."""

    connection: BoundedH11Protocol
    prefix: bytes
    suffix: bytes

    def spec(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "suffix": self.suffix, "chunked": True,
                "write_timeout_s": self.connection.limits.write_timeout_s}


def _size(delta: Any) -> int:
    if isinstance(delta, str):
        return len(delta)
    if isinstance(delta, ChatDelta):
        return len(delta.content) + len(delta.reasoning_content) + sum(
            len(str((c.get("function") or {}).get("arguments") or "")) for c in delta.tool_calls)
    return 0


def _parts(batch: list[Any]) -> Iterator[list[Any]]:
    """``batch`` in consecutive pieces of about :data:`WRITE_BYTES` of text each (one write each)."""
    if len(batch) == 1:
        yield batch
        return
    start, n = 0, 0
    for i, d in enumerate(batch):
        n += _size(d)
        if n >= WRITE_BYTES:
            yield batch[start:i + 1]
            start, n = i + 1, 0
    if start < len(batch):
        yield batch[start:]


async def _until_done_or_gone(request: Request, work: Awaitable[T], poll_s: float = DISCONNECT_POLL_S) -> T:
    """Await ``work``; when the client disconnects first (looked at every ``poll_s``), cancel it (the
    engine request with it)."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=poll_s)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise APIError(499, "client closed the request", type="server_error")


class API:
    """Route handlers over the served models."""

    def __init__(self, models: dict[str, ServedModel], api_key: str | None, body_timeout_s: float,
                 direct_streams: bool = True) -> None:
        self.models = models
        self.api_key = api_key
        self.body_timeout_s = body_timeout_s
        self.direct_streams = direct_streams
        self.metrics = Metrics(models)

    # ------------------------------------------------------------ plumbing
    def _model(self, name: str, *, embeddings: bool) -> ServedModel:
        m = self.models.get(name)
        if m is None:
            raise APIError(404, f"model {name!r} is not served here (served: {', '.join(self.models)})",
                           param="model", code="model_not_found")
        if m.embeddings != embeddings:
            what = "an embedding model: use /v1/embeddings" if m.embeddings else "not an embedding model"
            raise APIError(400, f"model {name!r} is {what}", param="model", code="model_not_supported")
        return m

    @staticmethod
    def _fits(m: ServedModel, sampling: dict[str, Any], param: str = "max_tokens") -> None:
        """A max_tokens the model's context cannot hold (with at least one prompt token) is refused, unless
        the engine shifts its context (then a generation runs on past it)."""
        asked = sampling.get("max_tokens")
        if m.context and not m.context_shift and isinstance(asked, int) and asked >= m.context:
            raise APIError(400, f"{param} is too large: {asked}; model {m.name} has a context of {m.context} "
                                f"tokens for the prompt and the completion together: ask for at most {m.context - 1}",
                           param=param, code="context_length_exceeded")

    def _connection(self, request: Request, m: ServedModel) -> BoundedH11Protocol | None:
        """The client connection a stream of ``m`` may be written to by its engine worker directly, or None:
        only a model in a worker, an HTTP/1.1 client (chunked events), over harness serve's protocol."""
        if not self.direct_streams or not isinstance(m.engine, WorkerRuntime):
            return None
        if request.scope.get("http_version") != "1.1":
            return None
        conn = (request.scope.get("extensions") or {}).get(CONNECTION_EXTENSION)
        return conn if isinstance(conn, BoundedH11Protocol) else None

    def _direct(self, request: Request, m: ServedModel, event: Callable[[Any], bytes]) -> _Direct | None:
        """How the engine worker writes this request's stream itself (``event(value)``: the route's delta
        event), or None where it cannot (:meth:`_connection`)."""
        conn = self._connection(request, m)
        return _Direct(conn, *_split(event)) if conn is not None else None

    def _authorized(self, request: Request) -> None:
        if self.api_key is None:
            return
        auth = request.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.api_key.encode()):
            raise APIError(401, "missing or wrong API key: send Authorization: Bearer <key> (harness serve --api-key)",
                           code="invalid_api_key")

    def route(self, endpoint: str, handler: Callable[[Request], Awaitable[Response]],
              *, auth: bool = True) -> Callable[[Request], Awaitable[Response]]:
        async def wrapped(request: Request) -> Response:
            try:
                if auth:
                    self._authorized(request)
                response = await handler(request)
                status = response.status_code
            except APIError as e:
                response, status = _error_response(e), e.status
            # a served model's name, or "": a label never takes arbitrary client text
            model = getattr(request.state, "model", "")
            self.metrics.requests.labels(model if model in self.models else "", endpoint, str(status)).inc()
            return response
        return wrapped

    async def _body(self, request: Request) -> Any:
        body = await read_json(request, self.body_timeout_s)
        m = body.get("model") if isinstance(body, dict) else None
        request.state.model = m if isinstance(m, str) else ""
        return body

    async def _answer(self, request: Request, m: ServedModel, label: str, *, stream: bool,
                      open_stream: Callable[[], Awaitable[EngineStream]],
                      events: Callable[[EngineStream, Callable[[], None]], AsyncIterator[bytes]],
                      run: Callable[[], Awaitable[T]], answer: Callable[[T], dict[str, Any]]) -> Response:
        """Admit the request (``label`` names it while it runs; queued until the engine has room:
        :meth:`_place`), then stream its ``events`` or wait for
        the result of ``run`` (cancelled if the client leaves) and send ``answer(result)``; an
        engine error is the OpenAI error it maps to."""
        place = await self._place(request, m, label)
        release = place.release
        handed_over = False
        try:
            if stream:
                try:
                    s = await open_stream()
                except Exception as e:
                    raise protocol.from_engine_error(e) from e
                handed_over = True  # the stream releases its place when it ends

                async def close() -> None:
                    await s.aclose()
                    release()
                return _EventStream(events(s, release), on_close=close)
            try:
                result = await _until_done_or_gone(request, run())
            except APIError:
                raise
            except Exception as e:
                raise protocol.from_engine_error(e) from e
        finally:
            if not handed_over:
                release()
        return JSONResponse(answer(result))

    async def _place(self, request: Request, m: ServedModel, label: str) -> Place:
        """The request's place in ``m``'s engine, once it has one: admitted (or a 429), then waiting in the
        queue while its client is there (a client gone is a 499 and its place given back)."""
        place = m.admit(label, getattr(request.state, "body_bytes", 0))
        if not place.granted:
            try:
                await _until_done_or_gone(request, place.wait(), poll_s=QUEUE_POLL_S)
            except BaseException:
                place.release()
                raise
        self.metrics.queue_wait.labels(m.name).observe(place.waited_s)
        return place

    # ------------------------------------------------------------ routes
    async def health(self, request: Request) -> Response:
        models = {}
        for m in self.models.values():
            stats = m.engine.stats() if not m.embeddings else {}
            q = m.admission.state()
            models[m.name] = {
                "in_flight": m.in_flight, "capacity": m.admits, "active": stats.get("active", 0),
                "pending": stats.get("pending", 0),
                "queue": {"waiting": q.waiting, "engine": q.engine, "bytes": q.bytes, "max_bytes": m.queue.max_bytes,
                          "max_requests": m.queue.max_requests, "max_wait_s": m.queue.max_wait_s,
                          "expected_wait_s": None if q.expected_wait_s is None else round(q.expected_wait_s, 3),
                          "drain_per_s": None if q.drain_per_s is None else round(q.drain_per_s, 3),
                          "refused": q.refused}}
        return JSONResponse({"status": "ok", "models": models})

    async def metrics_route(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def list_models(self, request: Request) -> Response:
        data = [{"id": m.name, "object": "model", "created": m.created, "owned_by": "harness"}
                for m in self.models.values()]
        return JSONResponse({"object": "list", "data": data})

    async def chat(self, request: Request) -> Response:
        req = protocol.chat_request(await self._body(request))
        m = self._model(req.model, embeddings=False)
        self._fits(m, req.sampling)
        cid, created = protocol.new_id("chatcmpl"), protocol.now()

        def chunk(delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
            return _sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": m.name,
                         "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                         **extra})

        def last(s: EngineStream) -> bytes:
            result = s.result
            reason = s.finish_reason or (result.finish_reason if result else "stop")
            extra = {"timings": protocol.timings(result)} if result is not None else {}
            out = chunk({}, protocol.finish_reason(reason), **extra)
            if req.include_usage and result is not None:
                out += _sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": m.name,
                             "choices": [], "usage": result.usage.as_openai()})
            return out + b"data: [DONE]\n\n"

        def answer(result: ChatResult) -> dict[str, Any]:
            self.metrics.done(m.name, result.completion)
            message = {k: v for k, v in result.message.items()
                       if k in ("role", "content", "tool_calls", "reasoning_content")}
            message.setdefault("content", None)
            return {"id": cid, "object": "chat.completion", "created": created, "model": m.name,
                    "choices": [{"index": 0, "message": message, "logprobs": None,
                                 "finish_reason": protocol.finish_reason(result.finish_reason)}],
                    "usage": result.usage.as_openai(), "timings": protocol.timings(result.completion)}

        direct = self._direct(request, m, lambda v: chunk(v, None)) if req.stream else None

        def events(s: EngineStream, release: Callable[[], None]) -> AsyncIterator[bytes]:
            return self._events(m, s, release, opening=chunk({"role": "assistant", "content": ""}, None),
                                each=lambda ds: b"".join(chunk(d.as_openai(), None) for d in coalesce(ds)),
                                last=last, fail=lambda e: _sse(e.body()), direct=direct)
        kwargs = {**req.engine_kwargs(), **({"direct": True} if direct else {})}
        return await self._answer(
            request, m, _label(cid, "/v1/chat/completions", req.stream, req.messages), stream=req.stream,
            open_stream=lambda: m.engine.chat_stream(req.messages, **kwargs), events=events,
            run=lambda: m.engine.chat(req.messages, **req.engine_kwargs()), answer=answer)

    async def completions(self, request: Request) -> Response:
        req = protocol.completion_request(await self._body(request))
        m = self._model(req.model, embeddings=False)
        self._fits(m, req.sampling)
        cid, created = protocol.new_id("cmpl"), protocol.now()

        def chunk(text: str, finish: str | None, **extra: Any) -> bytes:
            return _sse({"id": cid, "object": "text_completion", "created": created, "model": m.name,
                         "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
                         **extra})

        def last(s: EngineStream) -> bytes:
            result = s.result
            extra = {"timings": protocol.timings(result)} if result is not None else {}
            out = chunk("", protocol.finish_reason(result.finish_reason if result else "stop"), **extra)
            if req.include_usage and result is not None:
                out += _sse({"id": cid, "object": "text_completion", "created": created, "model": m.name,
                             "choices": [], "usage": result.usage.as_openai()})
            return out + b"data: [DONE]\n\n"

        def answer(c: Completion) -> dict[str, Any]:
            self.metrics.done(m.name, c)
            return {"id": cid, "object": "text_completion", "created": created, "model": m.name,
                    "choices": [{"index": 0, "text": c.text, "logprobs": None,
                                 "finish_reason": protocol.finish_reason(c.finish_reason)}],
                    "usage": c.usage.as_openai(), "timings": protocol.timings(c)}

        direct = self._direct(request, m, lambda v: chunk(v, None)) if req.stream else None

        def events(s: EngineStream, release: Callable[[], None]) -> AsyncIterator[bytes]:
            return self._events(m, s, release, opening=b"", each=lambda ds: chunk("".join(ds), None), last=last,
                                fail=lambda e: _sse(e.body()), direct=direct)
        return await self._answer(
            request, m, _label(cid, "/v1/completions", req.stream, req.prompt), stream=req.stream,
            open_stream=lambda: m.engine.stream(req.prompt, req.sampling, **({"direct": True} if direct else {})),
            events=events, run=lambda: m.engine.complete(req.prompt, req.sampling), answer=answer)

    async def responses(self, request: Request) -> Response:
        req = responses.responses_request(await self._body(request))
        chat = req.chat
        m = self._model(chat.model, embeddings=False)
        self._fits(m, chat.sampling, param="max_output_tokens")
        out = responses.ResponseEvents(responses.new_id("resp"), m.name, req)

        def answer(result: ChatResult) -> dict[str, Any]:
            self.metrics.done(m.name, result.completion)
            return out.complete(result)

        def events(s: EngineStream, release: Callable[[], None]) -> AsyncIterator[bytes]:
            return self._events(m, s, release, opening=out.opening(), each=out.feed,
                                last=lambda s: out.finish(s.result, s.finish_reason), fail=out.fail)
        return await self._answer(
            request, m, _label(out.id, "/v1/responses", chat.stream, chat.messages), stream=chat.stream,
            open_stream=lambda: m.engine.chat_stream(chat.messages, **chat.engine_kwargs()), events=events,
            run=lambda: m.engine.chat(chat.messages, **chat.engine_kwargs()), answer=answer)

    async def _events(self, m: ServedModel, stream: EngineStream, release: Callable[[], None], *,
                      opening: bytes, each: Callable[[list[Any]], bytes], last: Callable[[EngineStream], bytes],
                      fail: Callable[[APIError], bytes], direct: _Direct | None = None) -> AsyncIterator[bytes]:
        """The SSE events of one streamed request: ``opening``, the events of each batch of deltas (all
        that arrived while the previous write was under way: one write, the deltas coalesced, in
        pieces of about :data:`WRITE_BYTES`), an engine error as ``fail`` says (and the end), else
        ``last``; the stream closed and the place released always.

        ``direct`` (a stream opened to be handed over): once the response head and ``opening`` are
        written, the client's socket goes to the engine worker, whose binding writes each delta's
        event itself (the same events, no Python per token in either process); the events after the
        last delta are written here again. A connection with bytes still unsent streams as usual."""
        try:
            if opening:
                yield opening
            if direct is not None and isinstance(stream, RemoteStream) and stream.direct:
                # the head went out with Starlette's first send (opening or not): only the transport
                # knows whether all of it has left
                fd = direct.connection.socket_to_hand_over()
                stream.hand_over(fd, direct.spec() if fd is not None else None)
            try:
                async for batch in stream.batches():
                    for part in _parts(batch):
                        yield each(part)
            except Exception as e:
                yield fail(protocol.from_engine_error(e))
                return
            closing = isinstance(m.engine, WorkerRuntime) and m.engine.closing
            if isinstance(stream, RemoteStream) and stream.handed and (
                    stream.outcome != "done" or (closing and stream.finish_reason == "cancelled")):
                # the worker stopped writing to the client: it left (gone), did not read (slow), or the
                # request was cancelled (the client left, or the server is stopping: that it is told, as
                # a stream through the server is)
                if stream.outcome == "slow" and direct is not None:
                    direct.connection.reset_slow_client(direct.connection.limits.write_timeout_s)
                elif closing:
                    yield fail(protocol.from_engine_error(
                        errors.EngineClosedError(f"model {m.name}: the server is stopping")))
                return
            self.metrics.done(m.name, stream.result)
            yield last(stream)
        finally:
            await stream.aclose()
            release()

    async def sessions(self, request: Request) -> Response:
        from harness.serve import sessions

        return await sessions.handle(request, await self._body(request), self.models)

    async def embeddings(self, request: Request) -> Response:
        req = protocol.embedding_request(await self._body(request))
        m = self._model(req.model, embeddings=True)
        place = await self._place(request, m, _label(protocol.new_id("embd"), "/v1/embeddings", False, req.inputs))
        try:
            try:
                vectors = await m.engine.embed(req.inputs, **req.engine_kwargs())
                n_tokens = 0
                for t in req.inputs:
                    n_tokens += len(await m.engine.tokenize(t))
            except Exception as e:
                raise protocol.from_embedding_error(e) from e
        finally:
            place.release()
        self.metrics.prompt_tokens.labels(m.name).inc(n_tokens)
        data = []
        for i, v in enumerate(np.asarray(vectors, dtype=np.float32)):
            emb: Any = base64.b64encode(v.tobytes()).decode() if req.encoding_format == "base64" else v.tolist()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        return JSONResponse({"object": "list", "data": data, "model": m.name,
                             "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})


def _label(rid: str, endpoint: str, stream: bool, prompt: Any) -> str:
    """How a crash report names a request: its id (the one its client sees), endpoint and size."""
    n = len(prompt)
    if isinstance(prompt, str):
        unit = "character"
    elif prompt and isinstance(prompt[0], dict):
        unit = "message"
    elif prompt and isinstance(prompt[0], int):
        unit = "token"
    else:
        unit = "input"
    return f"{rid} (POST {endpoint}{', streamed' if stream else ''}, {n} {unit}{'' if n == 1 else 's'})"


def create_app(models: dict[str, ServedModel], *, api_key: str | None = None,
               body_timeout_s: float = BODY_TIMEOUT_S, direct_streams: bool = True) -> Starlette:
    """The ASGI app serving ``models`` (name -> loaded model); ``api_key`` requires a bearer token; a
    request body that has not all arrived ``body_timeout_s`` after its headers is answered 408.
    ``direct_streams``: a stream of a model in an engine worker is written to its client by the worker
    (see ``API._events``); off, every delta comes through this process."""
    api = API(models, api_key, body_timeout_s, direct_streams)
    routes = [
        Route("/health", api.route("health", api.health, auth=False), methods=["GET"]),
        Route("/metrics", api.route("metrics", api.metrics_route), methods=["GET"]),
        Route("/v1/models", api.route("models", api.list_models), methods=["GET"]),
        Route("/v1/chat/completions", api.route("chat", api.chat), methods=["POST"]),
        Route("/v1/completions", api.route("completions", api.completions), methods=["POST"]),
        Route("/v1/responses", api.route("responses", api.responses), methods=["POST"]),
        Route("/v1/embeddings", api.route("embeddings", api.embeddings), methods=["POST"]),
        Route("/sessions/{name}", api.route("sessions", api.sessions), methods=["POST"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error_response(APIError(404, f"no route {request.method} {request.url.path}: the API has /v1/models, "
                                             "/v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /sessions/{name}, "
                                             "/health, /metrics",
                                        code="not_found"))

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return _error_response(APIError(405, f"{request.method} is not allowed on {request.url.path}"))

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
    app.state.api = api
    return app
