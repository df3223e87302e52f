"""The Starlette application: OpenAI routes over loaded engines, admission, streaming, metrics.

Admission: each model takes ``capacity`` requests at once (its engine's parallel sequences
plus a waiting queue); one more is answered 429 with ``Retry-After`` at once, never left
hanging. Admitted requests go straight into the engine's continuous batching. A client that
goes away cancels its request: a stream when its response is torn down, a non-streaming
request when the disconnect is noticed while it waits (checked every quarter second).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.runtime.aio import AsyncRuntime, AsyncStream
from harness.runtime.api import ChatDelta, Completion, coalesce
from harness.serve import protocol
from harness.serve.protocol import APIError

T = TypeVar("T")

#: A non-streaming request checks for a vanished client this often while it waits.
DISCONNECT_POLL_S = 0.25


@dataclass(kw_only=True)
class ServedModel:
    """One loaded config: its name (``model`` in requests), engine and admission bound."""

    name: str
    engine: AsyncRuntime
    capacity: int
    """requests admitted at once: the engine's parallel sequences plus the waiting queue"""
    embeddings: bool = False
    """an embedding model: /v1/embeddings only"""
    config: str = ""
    context: int = 0
    """the engine's context in tokens (prompt and completion of a sequence together); 0: unknown"""
    in_flight: int = 0
    created: int = field(default_factory=protocol.now)

    def admit(self) -> Callable[[], None]:
        """Take a place (or raise 429); returns the release, safe to call more than once."""
        if self.in_flight >= self.capacity:
            raise APIError(429, f"model {self.name} is at capacity ({self.capacity} requests running or queued); "
                                "retry after a second", type="server_error", code="rate_limit_exceeded",
                           headers={"Retry-After": "1"})
        self.in_flight += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1
        return release


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
        self._models = models
        self.registry.register(self)

    def collect(self) -> Any:
        """Gauges read at scrape time from the engines and the admission counters."""
        depth = GaugeMetricFamily("harness_queue_depth", "requests waiting for a sequence slot in the engine",
                                  labels=["model"])
        active = GaugeMetricFamily("harness_active_requests", "requests holding a sequence slot", labels=["model"])
        admitted = GaugeMetricFamily("harness_in_flight_requests", "requests admitted by the server",
                                     labels=["model"])
        capacity = GaugeMetricFamily("harness_capacity_requests", "requests the server admits at once",
                                     labels=["model"])
        streams = GaugeMetricFamily("harness_open_streams", "streamed requests whose engine events are still read",
                                    labels=["model"])
        for m in self._models.values():
            streams.add_metric([m.name], float(getattr(m.engine, "open_streams", 0)))
            stats = m.engine.stats() if not m.embeddings else {}
            depth.add_metric([m.name], float(stats.get("pending", 0)))
            active.add_metric([m.name], float(stats.get("active", 0)))
            admitted.add_metric([m.name], float(m.in_flight))
            capacity.add_metric([m.name], float(m.capacity))
        yield from (depth, active, admitted, capacity, streams)

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
    mid-write included): the engine request is cancelled then, not when the generator is
    garbage collected."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def _refuse_content_type(request: Request) -> None:
    """A body sent as something else than JSON is refused (415); no Content-Type at all is read as JSON."""
    ctype = request.headers.get("content-type")
    if ctype is None:
        return
    media, _, params = ctype.partition(";")
    media = media.strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise APIError(415, f"Content-Type {media or ctype!r} is not JSON: send the request body as application/json",
                       code="unsupported_media_type")
    charset = next((v.strip().strip('"').lower() for k, _, v in (p.partition("=") for p in params.split(";"))
                    if k.strip().lower() == "charset"), "utf-8")
    if charset not in ("utf-8", "utf8"):
        raise APIError(415, f"Content-Type charset {charset!r}: the request body must be UTF-8 JSON",
                       code="unsupported_media_type")


async def _raw_body(request: Request) -> bytes:
    """The body, refused (413) by its Content-Length before a byte is read, or as soon as the bytes
    read pass :data:`protocol.MAX_BODY_BYTES` (a chunked body): never buffered past the bound."""
    limit = protocol.MAX_BODY_BYTES
    size = request.headers.get("content-length")
    if size is not None:
        if not size.strip().isdigit():
            raise APIError(400, f"Content-Length {size!r} is not a byte count")
        if int(size) > limit:
            raise APIError(413, f"request body of {int(size)} bytes is larger than the limit of {limit} bytes",
                           code="request_too_large")
    chunks: list[bytes] = []
    n = 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise APIError(413, f"request body is larger than the limit of {limit} bytes", code="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays/objects more than ``limit`` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return True
        children = v.values() if isinstance(v, dict) else v
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return False


async def _body(request: Request) -> Any:
    """The request's JSON body; each way it can be malformed is a 4xx naming the problem."""
    _refuse_content_type(request)
    raw = await _raw_body(request)
    if not raw.strip():
        raise protocol.invalid(None, "the request body is empty: send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise protocol.invalid(None, f"the request body is not valid UTF-8: byte 0x{raw[e.start]:02x} at offset "
                                     f"{e.start} ({e.reason})", code="invalid_utf8") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as e:
        # the input ran out inside a value (a string never closed is one too)
        if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string"):
            raise protocol.invalid(None, f"the request body is truncated JSON: it ends after {len(raw)} bytes "
                                         f"before the value is complete ({e.msg})", code="invalid_json") from None
        raise protocol.invalid(None, f"the request body is not JSON: {e}", code="invalid_json") from None
    except RecursionError:
        deep = True
    else:
        deep = _depth_over(body, protocol.MAX_JSON_DEPTH)
    if deep:
        raise protocol.invalid(None, f"the request body nests arrays/objects deeper than {protocol.MAX_JSON_DEPTH} "
                                     "levels", code="too_deep")
    return body


def _model_name(body: Any) -> str:
    m = body.get("model") if isinstance(body, dict) else None
    return m if isinstance(m, str) else ""


async def _until_done_or_gone(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; when the client disconnects first, cancel it (the engine request with it)."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise APIError(499, "client closed the request", type="server_error")


class API:
    """Route handlers over the served models."""

    def __init__(self, models: dict[str, ServedModel], api_key: str | None) -> None:
        self.models = models
        self.api_key = api_key
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
    def _fits(m: ServedModel, sampling: dict[str, Any]) -> None:
        """A max_tokens the model's context cannot hold (with at least one prompt token) is refused."""
        asked = sampling.get("max_tokens")
        if m.context and isinstance(asked, int) and asked >= m.context:
            raise APIError(400, f"max_tokens is too large: {asked}; model {m.name} has a context of {m.context} "
                                f"tokens for the prompt and the completion together: ask for at most {m.context - 1}",
                           param="max_tokens", code="context_length_exceeded")

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

    # ------------------------------------------------------------ routes
    async def health(self, request: Request) -> Response:
        models = {}
        for m in self.models.values():
            stats = m.engine.stats() if not m.embeddings else {}
            models[m.name] = {"in_flight": m.in_flight, "capacity": m.capacity,
                              "active": stats.get("active", 0), "pending": stats.get("pending", 0)}
        return JSONResponse({"status": "ok", "models": models})

    async def metrics_route(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def list_models(self, request: Request) -> Response:
        data = [{"id": m.name, "object": "model", "created": m.created, "owned_by": "harness"}
                for m in self.models.values()]
        return JSONResponse({"object": "list", "data": data})

    async def chat(self, request: Request) -> Response:
        body = await _body(request)
        request.state.model = _model_name(body)
        req = protocol.chat_request(body)
        m = self._model(req.model, embeddings=False)
        self._fits(m, req.sampling)
        release = m.admit()
        handed_over = False
        try:
            if req.stream:
                try:
                    stream = await m.engine.chat_stream(req.messages, **req.engine_kwargs())
                except Exception as e:
                    raise protocol.from_engine_error(e) from e
                handed_over = True  # the stream releases its place when it ends
                return _EventStream(self._chat_chunks(m, req, stream, release), media_type="text/event-stream",
                                         background=BackgroundTask(release))
            try:
                work = m.engine.chat(req.messages, **req.engine_kwargs())
                result = await _until_done_or_gone(request, work)
            except APIError:
                raise
            except Exception as e:
                raise protocol.from_engine_error(e) from e
        finally:
            if not handed_over:
                release()
        self.metrics.done(m.name, result.completion)
        message = {k: v for k, v in result.message.items() if k in ("role", "content", "tool_calls", "reasoning_content")}
        message.setdefault("content", None)
        body = {"id": protocol.new_id("chatcmpl"), "object": "chat.completion", "created": protocol.now(),
                "model": m.name, "choices": [{"index": 0, "message": message, "logprobs": None,
                                              "finish_reason": protocol.finish_reason(result.finish_reason)}],
                "usage": result.usage.as_openai()}
        return JSONResponse(body)

    async def _chat_chunks(self, m: ServedModel, req: protocol.ChatRequest, stream: AsyncStream[ChatDelta],
                           release: Callable[[], None]) -> AsyncIterator[bytes]:
        cid, created = protocol.new_id("chatcmpl"), protocol.now()

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": m.name,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        def last(result: Any) -> dict[str, Any]:
            reason = getattr(stream.stream, "finish_reason", None) or (result.finish_reason if result else "stop")
            return chunk({}, protocol.finish_reason(reason))
        async for event in self._events(m, stream, release, opening=chunk({"role": "assistant", "content": ""}, None),
                                        each=lambda ds: [chunk(d.as_openai(), None) for d in coalesce(ds)], last=last,
                                        usage=(cid, created, "chat.completion.chunk") if req.include_usage else None):
            yield event

    async def completions(self, request: Request) -> Response:
        body = await _body(request)
        request.state.model = _model_name(body)
        req = protocol.completion_request(body)
        m = self._model(req.model, embeddings=False)
        self._fits(m, req.sampling)
        release = m.admit()
        handed_over = False
        try:
            if req.stream:
                try:
                    stream = await m.engine.stream(req.prompt, req.sampling)
                except Exception as e:
                    raise protocol.from_engine_error(e) from e
                handed_over = True
                return _EventStream(self._completion_chunks(m, req, stream, release),
                                         media_type="text/event-stream", background=BackgroundTask(release))
            try:
                c = await _until_done_or_gone(request, m.engine.complete(req.prompt, req.sampling))
            except APIError:
                raise
            except Exception as e:
                raise protocol.from_engine_error(e) from e
        finally:
            if not handed_over:
                release()
        self.metrics.done(m.name, c)
        body = {"id": protocol.new_id("cmpl"), "object": "text_completion", "created": protocol.now(),
                "model": m.name, "choices": [{"index": 0, "text": c.text, "logprobs": None,
                                              "finish_reason": protocol.finish_reason(c.finish_reason)}],
                "usage": c.usage.as_openai()}
        return JSONResponse(body)

    async def _completion_chunks(self, m: ServedModel, req: protocol.CompletionRequest, stream: AsyncStream[str],
                                 release: Callable[[], None]) -> AsyncIterator[bytes]:
        cid, created = protocol.new_id("cmpl"), protocol.now()

        def chunk(text: str, finish: str | None) -> dict[str, Any]:
            return {"id": cid, "object": "text_completion", "created": created, "model": m.name,
                    "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
        async for event in self._events(m, stream, release, opening=None, each=lambda ds: [chunk("".join(ds), None)],
                                        last=lambda r: chunk("", protocol.finish_reason(r.finish_reason if r else "stop")),
                                        usage=(cid, created, "text_completion") if req.include_usage else None):
            yield event

    async def _events(self, m: ServedModel, stream: AsyncStream[Any], release: Callable[[], None], *,
                      opening: dict[str, Any] | None, each: Callable[[list[Any]], list[dict[str, Any]]],
                      last: Callable[[Any], dict[str, Any]], usage: tuple[str, int, str] | None) -> AsyncIterator[bytes]:
        """The SSE events of one streamed request: ``opening``, the chunks of each batch of deltas (all
        that arrived while the previous write was under way: one write, the deltas coalesced), an
        engine error as an OpenAI error event (and the end), else the finishing chunk, the usage chunk
        when asked (``usage``: id, created, object) and ``[DONE]``; the stream closed and the place
        released always."""
        try:
            if opening is not None:
                yield _sse(opening)
            try:
                async for batch in stream.batches():
                    yield b"".join(_sse(c) for c in each(batch))
            except Exception as e:
                yield _sse(protocol.from_engine_error(e).body())
                return
            result = stream.result
            self.metrics.done(m.name, result)
            yield _sse(last(result))
            if usage is not None and result is not None:
                cid, created, obj = usage
                yield _sse({"id": cid, "object": obj, "created": created, "model": m.name,
                            "choices": [], "usage": result.usage.as_openai()})
            yield b"data: [DONE]\n\n"
        finally:
            await stream.aclose()
            release()

    async def embeddings(self, request: Request) -> Response:
        body = await _body(request)
        request.state.model = _model_name(body)
        req = protocol.embedding_request(body)
        m = self._model(req.model, embeddings=True)
        release = m.admit()
        try:
            try:
                vectors = await m.engine.embed(req.inputs)
                n_tokens = 0
                for t in req.inputs:
                    n_tokens += len(await m.engine.tokenize(t))
            except Exception as e:
                raise protocol.from_engine_error(e) from e
        finally:
            release()
        self.metrics.prompt_tokens.labels(m.name).inc(n_tokens)
        data = []
        for i, v in enumerate(np.asarray(vectors, dtype=np.float32)):
            emb: Any = base64.b64encode(v.tobytes()).decode() if req.encoding_format == "base64" else v.tolist()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        return JSONResponse({"object": "list", "data": data, "model": m.name,
                             "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})


def create_app(models: dict[str, ServedModel], *, api_key: str | None = None) -> Starlette:
    """The ASGI app serving ``models`` (name -> loaded model); ``api_key`` requires a bearer token."""
    api = API(models, api_key)
    routes = [
        Route("/health", api.route("health", api.health, auth=False), methods=["GET"]),
        Route("/metrics", api.route("metrics", api.metrics_route), methods=["GET"]),
        Route("/v1/models", api.route("models", api.list_models), methods=["GET"]),
        Route("/v1/chat/completions", api.route("chat", api.chat), methods=["POST"]),
        Route("/v1/completions", api.route("completions", api.completions), methods=["POST"]),
        Route("/v1/embeddings", api.route("embeddings", api.embeddings), methods=["POST"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error_response(APIError(404, f"no route {request.method} {request.url.path}: the API has /v1/models, "
                                             "/v1/chat/completions, /v1/completions, /v1/embeddings, /health, /metrics",
                                        code="not_found"))

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return _error_response(APIError(405, f"{request.method} is not allowed on {request.url.path}"))

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
    app.state.api = api
    return app
