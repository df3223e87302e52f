"""The engine-neutral runtime API: results, streams and their watchdog, error translation.

A backend module's request object (``req``) offers ``next()``, ``wait()``, ``cancel()``,
``done``, ``finish_reason``, ``text()`` and ``timings()``; everything here works on that
protocol, whatever engine made the request.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness import errors


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


@dataclass(frozen=True, kw_only=True)
class ChatResult:
    """A chat turn: the parsed assistant message plus the raw completion."""

    message: dict[str, Any]
    completion: Completion

    @property
    def content(self) -> str:
        return str(self.message.get("content") or "")

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        calls = []
        for c in self.message.get("tool_calls") or []:
            fn = dict(c.get("function", {}))
            args = fn.get("arguments")
            if isinstance(args, str):
                with contextlib.suppress(json.JSONDecodeError):
                    fn["arguments"] = json.loads(args)
            calls.append({**c, "function": fn})
        return calls


_CORE_ERRORS = {
    "ContextOverflowError": errors.ContextOverflowError,
    "KVCacheFullError": errors.KVCacheFullError,
    "EngineClosedError": errors.EngineClosedError,
    "ModelLoadError": errors.ModelError,
}


def _translate(e: BaseException) -> BaseException:
    cls = _CORE_ERRORS.get(type(e).__name__)
    if cls is not None:
        return cls(str(e))
    if isinstance(e, ValueError):
        return errors.InvalidRequestError(str(e))
    if isinstance(e, RuntimeError):
        return errors.EngineError(str(e))
    return e


#: A stream whose consumer has not asked for the next delta for this long, while its request
#: still runs, is cancelled and its slot freed (``Engine.load(..., stream_stall_timeout=S)``).
STREAM_STALL_TIMEOUT_S = 30.0


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
                 stall_timeout: float = STREAM_STALL_TIMEOUT_S) -> None:
        self._req = req
        self._started = started
        self._on_done = on_done
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
        finished = False
        try:
            while True:
                try:
                    delta = self.__next__()
                except StopIteration:
                    finished = True
                    return
                yield delta
        finally:
            if not finished:  # the loop ended early: nobody will read the rest
                self.close()

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
        self.result = _completion(self._req, self._started)
        if kind == "error":
            raise _CORE_ERRORS.get(etype, errors.EngineError)(text)
        raise StopIteration

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
            now = time.monotonic()
            with self._lock:
                live = list(self._streams)
            for st in live:
                with contextlib.suppress(Exception):
                    if st._stalled(now):
                        st.stalled = True
                        st.close()


_watchdog = _Watchdog()


def _completion(req: Any, started: float) -> Completion:
    t = req.timings()
    ttft = t["t_first_token"] - t["t_submit"] if t["t_first_token"] else 0.0
    return Completion(text=req.text(), finish_reason=req.finish_reason, n_prompt=t["n_prompt"],
                      n_cached=t["n_cached"], n_generated=t["n_generated"], ttft_s=max(ttft, 0.0),
                      total_s=max(t["t_done"] - t["t_submit"], 0.0), n_steps=int(t.get("n_steps", 0)),
                      n_drafted=int(t.get("n_drafted", 0)), n_accepted=int(t.get("n_accepted", 0)))


def _drain(req: Any) -> None:
    """Wait for a non-streaming request in C++ (GIL released): Python never loops per token."""
    kind, text, etype = req.wait()
    if kind == "error":
        raise _CORE_ERRORS.get(etype, errors.EngineError)(text)


class ChatStream(Stream):
    def __init__(self, req: Any, started: float, core: Any, stall_timeout: float = STREAM_STALL_TIMEOUT_S) -> None:
        super().__init__(req, started, stall_timeout=stall_timeout)
        self._core = core
        self.message: dict[str, Any] | None = None

    def __next__(self) -> str:
        try:
            return super().__next__()
        except StopIteration:
            if self.message is None and self._req.done and self._req.finish_reason != "error":
                self.message = json.loads(self._core.parse_chat(self._req))
            raise
