"""The engine API for asyncio code (servers): ``AsyncRuntime`` wraps a loaded engine.

The engine's own calls block in C++ with the GIL released (``wait``, ``next``); here each one
runs on a thread of a pool owned by the ``AsyncRuntime``, so an event loop never blocks on a
token. The pool is sized for the requests that may wait at once (``max_concurrency``): a
stream holds one thread only while it waits for its next delta.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

from harness.runtime.api import ChatDelta, ChatResult, ChatStream, Completion, Pending, Stream

T = TypeVar("T")
_END = object()


class AsyncStream(Generic[T]):
    """``async for`` over a :class:`Stream` (text deltas) or :class:`ChatStream` (chat deltas).

    Leaving the loop early, ``aclose()`` or the ``async with`` block ending cancels the request
    (its slot frees within one token), as closing the synchronous stream does.
    """

    def __init__(self, stream: Stream | ChatStream, pool: ThreadPoolExecutor) -> None:
        self.stream = stream
        self._pool = pool

    def _next(self) -> Any:
        try:
            return self.stream.__next__()
        except StopIteration:
            return _END

    def __aiter__(self) -> AsyncIterator[T]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[T]:
        loop = asyncio.get_running_loop()
        finished = False
        try:
            while True:
                item = await loop.run_in_executor(self._pool, self._next)
                if item is _END:
                    finished = True
                    return
                yield item
        finally:
            if not finished:
                self.stream.close()

    @property
    def result(self) -> Completion | None:
        return self.stream.result

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
        return AsyncStream(s, self._pool)

    async def chat(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> ChatResult:
        """The chat turn; cancelling the awaiting task cancels the request."""
        return await self._result(await self._call(self.engine.start_chat, messages, **kwargs))

    async def chat_stream(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> AsyncStream[ChatDelta]:
        """Submit (the template renders off the loop) and return the stream of chat deltas."""
        s = await self._call(self.engine.chat_stream, messages, **kwargs)
        return AsyncStream(s, self._pool)

    async def embed(self, texts: Sequence[str], **kwargs: Any) -> Any:
        return await self._call(self.engine.embed, texts, **kwargs)

    async def tokenize(self, text: str, **kwargs: Any) -> list[int]:
        return await self._call(self.engine.tokenize, text, **kwargs)

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
