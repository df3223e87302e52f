"""The engine API for asyncio code (servers): ``AsyncRuntime`` wraps a loaded engine.

The engine's own calls block in C++ with the GIL released (``wait``, ``next``); here each one
runs on a thread of a pool owned by the ``AsyncRuntime``, so an event loop never blocks on a
token. The pool is sized for the requests that may wait at once (``max_concurrency``): a
stream holds one thread, its pump, from its first read to its end, and crosses to the loop
once per batch of deltas, not once per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

from harness.runtime.api import (
    STREAM_STALL_TIMEOUT_S,
    ChatDelta,
    ChatResult,
    ChatStream,
    Completion,
    Pending,
    Stream,
)
from harness.runtime.state import StateInfo

T = TypeVar("T")
_END = object()


class _Raised:
    """An exception the engine raised while a stream was pumped, handed to the consumer in order."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class AsyncStream(Generic[T]):
    """``async for`` over a :class:`Stream` (text deltas) or :class:`ChatStream` (chat deltas).

    One pool thread pumps the engine's events for the whole stream into a buffer (the engine call
    blocks in C++ with the GIL released), and wakes the event loop only when the consumer waits
    on an empty buffer: at most one cross-thread wake-up per batch, none per token while the
    consumer is busy. :meth:`batches` hands out everything that arrived since the consumer last
    looked (a consumer that keeps up gets each delta alone, as soon as it exists; one that falls
    behind gets them together, in order); ``async for`` hands them out one by one.

    Leaving the loop early, ``aclose()`` or the ``async with`` block ending cancels the request
    (its slot frees within one token), as closing the synchronous stream does; so does a
    consumer that takes nothing for the stream's stall timeout (default 30 s) while it runs.
    """

    def __init__(self, stream: Stream | ChatStream, pool: ThreadPoolExecutor,
                 pumps: set[AsyncStream[Any]] | None = None) -> None:
        self.stream = stream
        self._pool = pool
        self._pumps = pumps if pumps is not None else set()
        """the streams of one runtime whose pump runs (this one joins while its pump runs)"""
        self._lock = threading.Lock()
        self._buffer: list[Any] = []
        self._waiter: asyncio.Future[None] | None = None
        self._pumping = False
        self._pumped = threading.Event()
        self._last_take = time.monotonic()
        raw = stream.raw if isinstance(stream, ChatStream) else stream
        self._stall_timeout: float = getattr(raw, "_stall_timeout", STREAM_STALL_TIMEOUT_S)
        self._raw = raw

    @property
    def pumped(self) -> bool:
        """True once the pump thread has taken the stream's last event and let go of its thread."""
        return self._pumped.is_set()

    def _pump(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while True:
                try:
                    item: Any = self.stream.__next__()
                except StopIteration:
                    item = _END
                except BaseException as e:  # handed to the consumer, after what came before it
                    item = _Raised(e)
                with self._lock:
                    self._buffer.append(item)
                    waiter, self._waiter = self._waiter, None
                    stalled = waiter is None and time.monotonic() - self._last_take > self._stall_timeout
                if waiter is not None:
                    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                        loop.call_soon_threadsafe(_wake, waiter)
                if item is _END or isinstance(item, _Raised):
                    return
                if stalled:  # nobody took a delta for the stall timeout: free the slot
                    self._raw.stalled = True
                    self.stream.close()
        finally:
            self._pumps.discard(self)
            self._pumped.set()

    async def batches(self) -> AsyncGenerator[list[T], None]:
        """The deltas in lists: each list is all that arrived since the last one was taken."""
        loop = asyncio.get_running_loop()
        if not self._pumping:
            self._pumping = True
            self._pumps.add(self)
            try:
                self._pool.submit(self._pump, loop)
            except BaseException:
                self._pumps.discard(self)
                raise
        finished = False
        try:
            while not finished:
                with self._lock:
                    items, self._buffer = self._buffer, []
                    waiter = None
                    if not items:
                        waiter = self._waiter = loop.create_future()
                    self._last_take = time.monotonic()
                if waiter is not None:
                    await waiter
                    continue
                batch: list[T] = []
                for item in items:
                    if item is _END:
                        finished = True
                        break
                    if isinstance(item, _Raised):
                        finished = True
                        if batch:
                            yield batch
                        raise item.error
                    batch.append(item)
                if batch:
                    yield batch
        finally:
            with self._lock:
                self._waiter = None
            if not finished:
                self.stream.close()

    def __aiter__(self) -> AsyncIterator[T]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[T]:
        batches = self.batches()
        try:
            async for batch in batches:
                for item in batch:
                    yield item
        finally:
            await batches.aclose()

    @property
    def result(self) -> Completion | None:
        return self.stream.result

    @property
    def finish_reason(self) -> str | None:
        """The stream's own finish reason once it ended (a chat stream's ``tool_calls``), else None."""
        reason = getattr(self.stream, "finish_reason", None)
        return reason if isinstance(reason, str) else None

    async def aclose(self) -> None:
        self.stream.close()

    async def __aenter__(self) -> AsyncStream[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stream.close()


class AsyncRuntime:
    """A loaded engine for asyncio: the same calls as the engine, awaitable.

    ``await AsyncRuntime.load(model_or_config, ...)`` loads as :meth:`harness.runtime.Runtime.load`
    does; ``AsyncRuntime(engine)`` wraps one already loaded.
    """

    def __init__(self, engine: Any, *, max_concurrency: int = 64) -> None:
        if max_concurrency < 1:
            msg = f"max_concurrency must be >= 1, got {max_concurrency}"
            raise ValueError(msg)
        self.engine = engine
        # + 2: submissions and embeddings never wait behind a full set of streams
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency + 2, thread_name_prefix="harness-aio")
        self._pumps: set[AsyncStream[Any]] = set()

    @property
    def open_streams(self) -> int:
        """Streams whose engine events are still being read on a pool thread (0 when all are done)."""
        return len(self._pumps)

    @classmethod
    async def load(cls, model: str | Path | None = None, *, max_concurrency: int = 64, **kwargs: Any) -> AsyncRuntime:
        from harness.runtime.loader import Runtime

        loop = asyncio.get_running_loop()
        eng = await loop.run_in_executor(None, functools.partial(Runtime.load, model, **kwargs))
        return cls(eng, max_concurrency=max_concurrency)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def _result(self, pending: Pending[T]) -> T:
        """Wait for a submitted request; a cancelled wait (a client gone) cancels the request."""
        try:
            return await self._call(pending.result)
        except asyncio.CancelledError:
            pending.cancel()
            raise

    async def complete(self, prompt: str | Sequence[int], sampling: Any = None, **overrides: Any) -> Completion:
        """The completion; cancelling the awaiting task cancels the request."""
        return await self._result(await self._call(self.engine.start, prompt, sampling, **overrides))

    async def stream(self, prompt: str | Sequence[int], sampling: Any = None, **overrides: Any) -> AsyncStream[str]:
        """Submit (tokenizing off the loop) and return the stream of text deltas."""
        s = await self._call(self.engine.stream, prompt, sampling, **overrides)
        return AsyncStream(s, self._pool, self._pumps)

    async def chat(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> ChatResult:
        """The chat turn; cancelling the awaiting task cancels the request."""
        return await self._result(await self._call(self.engine.start_chat, messages, **kwargs))

    async def chat_stream(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> AsyncStream[ChatDelta]:
        """Submit (the template renders off the loop) and return the stream of chat deltas."""
        s = await self._call(self.engine.chat_stream, messages, **kwargs)
        return AsyncStream(s, self._pool, self._pumps)

    async def embed(self, texts: Sequence[str], **kwargs: Any) -> Any:
        return await self._call(self.engine.embed, texts, **kwargs)

    async def tokenize(self, text: str, **kwargs: Any) -> list[int]:
        return await self._call(self.engine.tokenize, text, **kwargs)

    async def save_state_file(self, path: str, history: Any = None) -> StateInfo:
        """The engine's ``save_state_file``: a conversation's state into a file."""
        return await self._call(self.engine.save_state_file, path, history)

    async def restore_state_file(self, path: str) -> StateInfo:
        """The engine's ``restore_state_file``: a saved state back into an idle sequence."""
        return await self._call(self.engine.restore_state_file, path)

    def info(self) -> dict[str, Any]:
        return dict(self.engine.info())

    def stats(self) -> dict[str, int]:
        return dict(self.engine.stats())

    async def aclose(self) -> None:
        await self._call(self.engine.close)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> AsyncRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
