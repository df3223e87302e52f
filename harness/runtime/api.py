"""The engine-neutral runtime API: results, streams and their watchdog, error translation.

A binding's request object (``req``) offers ``next()``, ``wait()``, ``cancel()``,
``done``, ``finish_reason``, ``text()`` and ``timings()``; everything here works on that
protocol, whatever engine made the request.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from harness.core import errors
from harness.runtime.native import CORE_ERRORS

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token counts of one request, as OpenAI's ``usage`` reports them."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    """prompt tokens reused from the prefix cache (OpenAI's ``prompt_tokens_details.cached_tokens``)"""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_openai(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens, "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}


@dataclass(frozen=True, kw_only=True)
class Completion:
    """A finished generation."""

    text: str
    finish_reason: str
    """stop | length | cancelled"""
    n_prompt: int
    n_cached: int
    n_generated: int
    ttft_s: float
    total_s: float
    n_steps: int = 0
    """Forward passes that produced this request's tokens (fewer than n_generated when drafts are accepted)."""
    n_drafted: int = 0
    """Speculative draft tokens verified for this request."""
    n_accepted: int = 0
    """Draft tokens the model accepted."""
    n_erased: int = 0
    """Tokens context shift erased: the prompt's oldest (after the system prompt) that did not fit, and
    the sequence's while it generated past the context."""

    @property
    def usage(self) -> Usage:
        return Usage(prompt_tokens=self.n_prompt, completion_tokens=self.n_generated, cached_tokens=self.n_cached)

    @property
    def decode_tokens_per_s(self) -> float:
        decode_s = self.total_s - self.ttft_s
        return (self.n_generated - 1) / decode_s if self.n_generated > 1 and decode_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens; None when nothing was drafted."""
        return self.n_accepted / self.n_drafted if self.n_drafted else None

    @property
    def tokens_per_step(self) -> float | None:
        """Generated tokens per forward pass (1.0 without speculation); None when not reported."""
        return self.n_generated / self.n_steps if self.n_steps else None


def parse_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call's ``function.arguments`` (OpenAI's JSON string form) as a dict.

    :raises EngineError: the model wrote arguments that are not a JSON object.
    """
    fn = call.get("function") or {}
    args = fn.get("arguments", "{}")
    if isinstance(args, dict):
        return args
    try:
        value = json.loads(args or "{}")
    except json.JSONDecodeError as e:
        msg = f"tool call {fn.get('name')!r}: arguments are not JSON ({e}): {args!r:.200}"
        raise errors.EngineError(msg) from None
    if not isinstance(value, dict):
        msg = f"tool call {fn.get('name')!r}: arguments must be a JSON object, got {args!r:.200}"
        raise errors.EngineError(msg)
    return value


@dataclass(frozen=True, kw_only=True)
class ChatResult:
    """A chat turn: the parsed assistant message (OpenAI's form) plus the raw completion."""

    message: dict[str, Any]
    completion: Completion

    @property
    def content(self) -> str:
        return str(self.message.get("content") or "")

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The message's tool calls; ``function.arguments`` is the JSON string (parse with
        :func:`parse_arguments`)."""
        return list(self.message.get("tool_calls") or [])

    @property
    def finish_reason(self) -> str:
        """``tool_calls`` when the model called a tool and finished, else the completion's
        (stop | length | cancelled)."""
        reason = self.completion.finish_reason
        return "tool_calls" if self.tool_calls and reason == "stop" else reason

    @property
    def usage(self) -> Usage:
        return self.completion.usage


@dataclass(frozen=True, kw_only=True)
class ChatDelta:
    """One step of a streamed chat turn, already parsed: text goes to ``content`` (or
    ``reasoning_content``), a tool call arrives as OpenAI ``tool_calls`` deltas (``index``, then
    ``id`` and ``function.name`` once, then ``function.arguments`` fragments)."""

    content: str = ""
    reasoning_content: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()

    def as_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.content:
            out["content"] = self.content
        if self.reasoning_content:
            out["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            out["tool_calls"] = [dict(c) for c in self.tool_calls]
        return out


def _tool_fragment(d: ChatDelta) -> dict[str, Any] | None:
    """The one tool-call delta of ``d`` when that is all it holds, else None."""
    if d.content or d.reasoning_content or len(d.tool_calls) != 1:
        return None
    return d.tool_calls[0]


def _merged(a: ChatDelta, b: ChatDelta) -> ChatDelta | None:
    """``a`` then ``b`` as one delta, or None where one delta could not say the same in the same order."""
    if not a.tool_calls and not b.tool_calls:
        if a.content and b.reasoning_content:  # reasoning after content: two deltas keep the order
            return None
        return ChatDelta(content=a.content + b.content, reasoning_content=a.reasoning_content + b.reasoning_content)
    ta, tb = _tool_fragment(a), _tool_fragment(b)
    if ta is None or tb is None or ta.get("index") != tb.get("index"):
        return None
    fn_b = tb.get("function") or {}
    if set(tb) - {"index", "function"} or set(fn_b) - {"arguments"}:  # b opens a call (id, name): its own delta
        return None
    fn_a = dict(ta.get("function") or {})
    fn_a["arguments"] = str(fn_a.get("arguments") or "") + str(fn_b.get("arguments") or "")
    return ChatDelta(tool_calls=({**ta, "function": fn_a},))


def coalesce(deltas: list[ChatDelta]) -> list[ChatDelta]:
    """Fewer deltas saying the same, in the same order: runs of text (content, reasoning) join,
    and argument fragments of one tool call join the delta before them; a new tool call, or text
    after a tool call, starts a new delta."""
    out: list[ChatDelta] = []
    for d in deltas:
        m = _merged(out[-1], d) if out else None
        if m is None:
            out.append(d)
        else:
            out[-1] = m
    return out


#: A stream whose consumer has not asked for the next delta for this long, while its request
#: still runs, is cancelled and its slot freed (``Runtime.load(..., stream_stall_timeout=S)``).
STREAM_STALL_TIMEOUT_S = 30.0


def _reading(next_item: Callable[[], T], close: Callable[[], None]) -> Iterator[T]:
    """Iterate ``next_item`` until StopIteration, in a generator CPython closes as soon as a ``for``
    loop drops it: when the loop ends early (``break``, an exception), ``close`` cancels the request,
    since nobody will read the rest."""
    finished = False
    try:
        while True:
            try:
                item = next_item()
            except StopIteration:
                finished = True
                return
            yield item
    finally:
        if not finished:
            close()


class Stream:
    """Iterator of text deltas; use it as ``with eng.stream(...) as s: for d in s: ...``.

    The request is cancelled (``finish_reason == "cancelled"``), freeing its slot, when:
    the ``with`` block ends or ``close()`` is called; a ``for`` loop over it ends early
    (``break``, an exception: iteration runs in a generator that CPython closes as soon as
    the loop drops it, even while this object is still referenced); the object is garbage
    collected; or the consumer stops asking for deltas for ``stream_stall_timeout`` seconds
    (default 30) while the request still runs (a watchdog thread checks twice a second).
    """

    def __init__(self, req: Any, started: float, on_done: Any = None,
                 stall_timeout: float = STREAM_STALL_TIMEOUT_S, core: Any = None) -> None:
        self._req = req
        self._started = started
        self._on_done = on_done
        self._core = core
        self.result: Completion | None = None
        self.stalled = False
        """True when the watchdog cancelled the request because nobody read it."""
        self._stall_timeout = stall_timeout
        self._last_read = time.monotonic()
        self._reading = False
        _watchdog.add(self)

    def __iter__(self) -> Iterator[str]:
        return self._deltas()

    def _deltas(self) -> Iterator[str]:
        return _reading(self.__next__, self.close)

    def __next__(self) -> str:
        self._reading = True
        try:
            ev = self._req.next()
        finally:
            self._reading = False
            self._last_read = time.monotonic()
        if ev is None:
            raise StopIteration
        kind, text, etype = ev
        if kind == "delta":
            return str(text)
        self.result = completion_from(self._req, self._started)
        if kind == "error":
            raise CORE_ERRORS.get(etype, errors.EngineError)(text)
        raise StopIteration

    @property
    def can_pump(self) -> bool:
        """True when the binding writes this stream to a client socket itself (:meth:`pump_sse`)."""
        return self._core is not None and hasattr(self._core, "pump_sse")

    def pump_sse(self, fd: int, prefix: bytes, suffix: bytes, *, write_timeout_s: float, chunked: bool,
                 chat: bool = False) -> tuple[str, int]:
        """Write the rest of the stream to the client socket ``fd`` as server-sent events, in C++ with
        the GIL released (``harness serve``'s engine worker, once the server has written the response
        head): each delta one event ``prefix + JSON value + suffix``, in HTTP/1.1 chunks when
        ``chunked``. While the client keeps up the engine's decode thread sends each delta itself (no
        thread wake per token); when the client's socket is full this call's thread takes over and
        puts every delta already there in one event. Returns (outcome, events written): ``done`` (``result``
        is set; an engine error is raised after the events before it, as iterating does), ``gone``
        (the client closed the connection), ``slow`` (an event waited ``write_timeout_s`` for the
        client to take it) or ``cancelled``; in those three the request is cancelled."""
        self._reading = True  # the watchdog leaves a stream being written alone
        try:
            outcome, events, end = self._core.pump_sse(self._req, fd, prefix, suffix, chat, write_timeout_s,
                                                       chunked)
        finally:
            self._reading = False
            self._last_read = time.monotonic()
        if end is not None:
            kind, text, etype = end
            self.result = completion_from(self._req, self._started)
            if kind == "error":
                raise CORE_ERRORS.get(etype, errors.EngineError)(text)
        return str(outcome), int(events)

    def _stalled(self, now: float) -> bool:
        return not self._reading and not self._req.done and now - self._last_read > self._stall_timeout

    def close(self) -> None:
        if not self._req.done:
            self._req.cancel()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class _Watchdog:
    """One daemon thread for all streams: cancels the ones nobody reads any more."""

    def __init__(self) -> None:
        self._streams: weakref.WeakSet[Stream] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, stream: Stream) -> None:
        with self._lock:
            self._streams.add(stream)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="harness-stream-watchdog", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(0.5)
            self._check(time.monotonic())

    def _check(self, now: float) -> None:
        # The strong references taken here end with this call: a list kept across the sleep kept
        # every stream it held alive, so the next look found them again and took them on, each
        # stream alive at any look lived for ever (its request and buffers with it: 7-10 KB per
        # request at 48 in flight).
        with self._lock:
            live = list(self._streams)
        for st in live:
            with contextlib.suppress(Exception):
                if st._stalled(now):
                    st.stalled = True
                    st.close()


_watchdog = _Watchdog()


def completion_from(req: Any, started: float) -> Completion:
    """The :class:`Completion` of a finished :class:`~harness.runtime.contract.NativeRequest`."""
    t = req.timings()
    ttft = t["t_first_token"] - t["t_submit"] if t["t_first_token"] else 0.0
    return Completion(text=req.text(), finish_reason=req.finish_reason, n_prompt=t["n_prompt"],
                      n_cached=t["n_cached"], n_generated=t["n_generated"], ttft_s=max(ttft, 0.0),
                      total_s=max(t["t_done"] - t["t_submit"], 0.0), n_steps=int(t.get("n_steps", 0)),
                      n_drafted=int(t.get("n_drafted", 0)), n_accepted=int(t.get("n_accepted", 0)),
                      n_erased=int(t.get("n_erased", 0)))


def _drain(req: Any) -> None:
    """Wait for a non-streaming request in C++ (GIL released): Python never loops per token."""
    kind, text, etype = req.wait()
    if kind == "error":
        raise CORE_ERRORS.get(etype, errors.EngineError)(text)


class Pending(Generic[T]):
    """A submitted non-streaming request: ``result()`` waits for it (in C++, the GIL released),
    ``cancel()`` stops it within one token (``finish_reason == "cancelled"``)."""

    def __init__(self, req: Any, started: float, finish: Callable[[Any, float], T]) -> None:
        self._req = req
        self._started = started
        self._finish = finish

    def result(self) -> T:
        _drain(self._req)
        return self._finish(self._req, self._started)

    def cancel(self) -> None:
        if not self._req.done:
            self._req.cancel()


class ChatStream:
    """Iterator of :class:`ChatDelta`: the assistant message parsed as it is written (the engine's
    partial chat parsing), so a tool call arrives as ``tool_calls`` deltas, never as raw text in
    ``content``. ``.message`` holds the whole parsed message at the end, ``.finish_reason`` is
    ``tool_calls`` when the model called a tool. Closing and cancelling work as for :class:`Stream`.
    """

    def __init__(self, req: Any, started: float, core: Any, stall_timeout: float = STREAM_STALL_TIMEOUT_S) -> None:
        self.raw = Stream(req, started, stall_timeout=stall_timeout, core=core)
        self._req = req
        self._core = core
        self._pending: deque[ChatDelta] = deque()
        self._ended = False
        self.message: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[ChatDelta]:
        return self._deltas()

    def _deltas(self) -> Iterator[ChatDelta]:
        return _reading(self.__next__, self.close)

    def __next__(self) -> ChatDelta:
        while not self._pending:
            if self._ended:
                raise StopIteration
            try:
                self.raw.__next__()
            except StopIteration:
                self._ended = True
                if self._req.done and self._req.finish_reason not in ("error", "cancelled"):
                    self._pending.extend(self._diffs(final=True))
                    self.message = json.loads(self._core.parse_chat(self._req))
                continue
            self._pending.extend(self._diffs(final=False))
        return self._pending.popleft()

    @property
    def can_pump(self) -> bool:
        """True when the binding writes this stream to a client socket itself (:meth:`pump_sse`)."""
        return self.raw.can_pump

    def pump_sse(self, fd: int, prefix: bytes, suffix: bytes, *, write_timeout_s: float,
                 chunked: bool) -> tuple[str, int]:
        """:meth:`Stream.pump_sse` with the parsed chat deltas (the engine's partial parse, as iterating
        gives them) as the events' values; ``message`` is set at the end, as iterating sets it."""
        if self._pending:
            msg = "pump_sse takes a chat stream whole: deltas were already read from it"
            raise RuntimeError(msg)
        outcome, events = self.raw.pump_sse(fd, prefix, suffix, write_timeout_s=write_timeout_s, chunked=chunked,
                                            chat=True)
        self._ended = True
        if outcome == "done" and self._req.done and self._req.finish_reason not in ("error", "cancelled"):
            self.message = json.loads(self._core.parse_chat(self._req))
        return outcome, events

    def _diffs(self, *, final: bool) -> list[ChatDelta]:
        out = []
        for d in json.loads(self._core.chat_diffs(self._req, final)):
            out.append(ChatDelta(content=d.get("content", ""), reasoning_content=d.get("reasoning_content", ""),
                                 tool_calls=tuple(d.get("tool_calls", ()))))
        return out

    @property
    def result(self) -> Completion | None:
        return self.raw.result

    @property
    def stalled(self) -> bool:
        return self.raw.stalled

    @property
    def finish_reason(self) -> str | None:
        """None until the stream ended; ``tool_calls`` when the message holds tool calls."""
        if self.raw.result is None:
            return None
        reason = self.raw.result.finish_reason
        if self.message and self.message.get("tool_calls") and reason == "stop":
            return "tool_calls"
        return reason

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
