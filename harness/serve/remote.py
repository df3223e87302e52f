"""A served model whose engine runs in a worker process (:mod:`harness.serve.worker`).

:class:`WorkerRuntime` has the calls of :class:`harness.runtime.aio.AsyncRuntime` that the app
makes, over a socket pair read on the event loop itself: every message that arrived since the
last look is handled in one wake-up (a stream's deltas appended, its reader woken once), so a
client that keeps up gets each delta at once and one that falls behind gets them coalesced, as
in-process. When the worker dies, every request in flight on it ends at once with
:class:`~harness.core.errors.EngineCrashError` naming the signal and the CPU level (the worker's
crash note), and ``on_death`` is told, so that the server can say so and stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from harness.core import crash, errors, hugepages
from harness.core.pyexec import python_argv
from harness.runtime.api import STREAM_STALL_TIMEOUT_S, ChatResult, Completion
from harness.runtime.state import StateInfo
from harness.serve.worker import Frames, decode_delta, pack

#: Seconds the worker gets to load its model and answer.
LOAD_TIMEOUT_S = 600.0
#: Seconds a worker gets to exit once asked (then it is killed).
CLOSE_TIMEOUT_S = 10.0

_END = object()


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def rebuilt_error(name: str, message: str) -> BaseException:
    """The harness error the worker raised, as the same class here (else an EngineError naming it)."""
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, errors.HarnessError):
        e = cls.__new__(cls)  # some take more than a message (SubprocessError): the message is what travels
        e.args = (message,)
        return e
    return errors.EngineError(f"{name}: {message}")


class RemoteStream:
    """``batches()`` / ``async for`` over a stream in the worker, as :class:`~harness.runtime.aio.AsyncStream`.

    Leaving early, ``aclose()``, or taking nothing for the stall timeout while deltas arrive
    cancels the request in the worker.
    """

    def __init__(self, runtime: WorkerRuntime, rid: int, stall_timeout: float) -> None:
        self._runtime = runtime
        self.rid = rid
        self._buffer: list[Any] = []
        self._waiter: asyncio.Future[None] | None = None
        self._last_take = time.monotonic()
        self._stall_timeout = stall_timeout
        self._cancel_sent = False
        self.ended = False
        self.stalled = False
        self.result: Completion | None = None
        self.finish_reason: str | None = None
        self.message: dict[str, Any] | None = None
        self.direct = False
        """True for a stream opened to be handed over (:meth:`hand_over`) and not yet handed."""
        self.handed = False
        """True once the worker has the client's socket: until its end comes, only the worker writes it."""
        self.outcome = "done"
        """How a handed-over stream ended: ``done``, or ``gone`` / ``slow`` / ``cancelled`` (the worker
        stopped writing to the client: it closed the connection, did not read, or was cancelled)."""

    def hand_over(self, client_fd: int | None, spec: dict[str, Any] | None) -> None:
        """Tell the worker how to write a direct stream (once; the response head and every event
        before it must be written already): to ``client_fd`` itself with ``spec`` (``prefix``,
        ``suffix``, ``write_timeout_s``, ``chunked``): no message per delta comes here then, only the
        end; or, with None, as deltas to this process like any stream."""
        if not self.direct:
            return
        self.direct = False
        self.handed = self._runtime._go(self.rid, client_fd if spec is not None else None, spec)

    # -------------------------------------------------- fed by the runtime, on the loop
    def _put(self, item: Any) -> None:
        self._buffer.append(item)
        if self._waiter is not None:
            self._wake()
        elif not self._cancel_sent and time.monotonic() - self._last_take > self._stall_timeout:
            self.stalled = True  # nobody took a delta for the stall timeout: free the slot
            self.close()

    def _end(self, result: Completion | None, finish_reason: str | None, message: dict[str, Any] | None,
             outcome: str = "done") -> None:
        self.result, self.message, self.outcome = result, message, outcome
        self.finish_reason = finish_reason or (result.finish_reason if result is not None else None)
        self.ended = True
        self._buffer.append(_END)
        self._wake()

    def _fail(self, error: BaseException) -> None:
        self.ended = True
        self._buffer.append(_Raised(error))
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -------------------------------------------------- read by the app
    @property
    def pumped(self) -> bool:
        """True once the worker has handed out the stream's end (or the worker is gone)."""
        return self.ended

    async def batches(self) -> AsyncGenerator[list[Any], None]:
        """The deltas in lists: each list is all that arrived since the last one was taken."""
        finished = False
        try:
            while not finished:
                items, self._buffer = self._buffer, []
                self._last_take = time.monotonic()
                if not items:
                    self._waiter = asyncio.get_running_loop().create_future()
                    await self._waiter
                    continue
                batch: list[Any] = []
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
            self._waiter = None
            if not finished:
                self.close()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        batches = self.batches()
        try:
            async for batch in batches:
                for item in batch:
                    yield item
        finally:
            await batches.aclose()

    def close(self) -> None:
        if not self.ended and not self._cancel_sent:
            self._cancel_sent = True
            self._runtime._cancel(self.rid)

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> RemoteStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class _Link(asyncio.Protocol):
    """The loop's end of the socket pair: messages in, handed to the runtime as they come."""

    def __init__(self, runtime: WorkerRuntime) -> None:
        self.runtime = runtime

    def data_received(self, data: bytes) -> None:
        for message in self.runtime._frames.feed(data):
            self.runtime._handle(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.runtime._lost()


class WorkerRuntime:
    """A model config loaded in its own worker process: the app's engine calls, awaitable."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], sock: socket.socket,
                 note_dir: tempfile.TemporaryDirectory[str], info: dict[str, Any],
                 stall_timeout: float = STREAM_STALL_TIMEOUT_S, fds: socket.socket | None = None) -> None:
        self.name = name
        self.proc = proc
        self._sock = sock
        self._fds = fds  # client sockets handed to the worker (direct streams), each with its request id
        self._note_dir = note_dir
        self._info = info
        self._stall_timeout = stall_timeout
        self._stats: dict[str, int] = {}
        self._frames = Frames()
        self._transport: asyncio.Transport | None = None
        self._attaching: asyncio.Task[None] | None = None
        self._ids = 0
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._streams: dict[int, RemoteStream] = {}
        self._dead: BaseException | None = None
        self._closing = False
        self._reporting: asyncio.Task[None] | None = None
        self.on_death: Callable[[WorkerRuntime, BaseException], None] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def note(self) -> Path:
        return Path(self._note_dir.name) / "note.json"

    # ---------------------------------------------------------------- start
    @classmethod
    def start(cls, config: Path, *, name: str, models_dir: Path | None, variant: str | None,
              max_queue: int | None, timeout: float = LOAD_TIMEOUT_S,
              malloc_hugetlb: bool | None = None) -> WorkerRuntime:
        """Start a worker, have it load ``config``; returns once it is ready. A worker that fails to
        load raises the worker's error; one that dies while loading raises EngineCrashError.

        The worker is an engine process: it starts with glibc's malloc hugepages unless
        ``malloc_hugetlb`` is False (None: ``$HARNESS_MALLOC_HUGETLB``; :mod:`harness.core.hugepages`)."""
        ours, theirs = socket.socketpair()
        fds_ours, fds_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        note_dir = tempfile.TemporaryDirectory(prefix="harness-serve-")
        note = Path(note_dir.name) / "note.json"  # the worker notes its CPU level there once it has one
        try:
            # a session of its own: Ctrl-C at a terminal reaches the server, which closes its workers in order
            proc = subprocess.Popen([*python_argv("-m", "harness.serve.worker"), str(theirs.fileno()),
                                     str(fds_theirs.fileno())],
                                    pass_fds=(theirs.fileno(), fds_theirs.fileno()),
                                    env=hugepages.engine_env({**os.environ, crash.NOTE_ENV: str(note)},
                                                             enabled=malloc_hugetlb),
                                    start_new_session=True)
        except BaseException:
            ours.close()
            fds_ours.close()
            note_dir.cleanup()
            raise
        finally:
            theirs.close()
            fds_theirs.close()
        fds_ours.setblocking(False)  # written on the event loop: a full socket is a refusal, never a wait
        runtime = cls(name, proc, ours, note_dir, {}, fds=fds_ours)
        try:
            ours.sendall(pack(("load", {"config": str(config), "models_dir": str(models_dir) if models_dir else None,
                                        "variant": variant, "max_queue": max_queue})))
            runtime._info = runtime._await_ready(config, timeout)
        except BaseException:
            runtime.close()
            raise
        return runtime

    def _await_ready(self, config: Path, timeout: float) -> dict[str, Any]:
        self._sock.settimeout(timeout)
        try:
            while True:
                data = self._sock.recv(1 << 16)
                if not data:
                    raise self._death(f"while loading {config}")
                messages = self._frames.feed(data)
                for i, message in enumerate(messages):
                    if message[0] == "ready":
                        self._sock.settimeout(None)
                        for later in messages[i + 1:]:  # what came with it (the rest of a frame stays in _frames)
                            self._handle(later)
                        return dict(message[1])
                    if message[0] == "failed":
                        raise rebuilt_error(message[1], message[2])
        except TimeoutError:
            msg = (f"the engine worker of model {self.name} did not load {config} within {timeout:.0f} s; "
                   "expected a loaded model (a hung load: check the model file and the engine's output above)")
            raise errors.EngineError(msg) from None

    def _death(self, during: str = "") -> BaseException:
        """The error for a worker that went away (waits for it to exit); ``during`` says when."""
        when = f" {during}" if during else ""
        try:
            code = self.proc.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
            msg = f"the engine worker of model {self.name} closed its connection{when} and did not exit; killed"
            return errors.EngineError(msg)
        died = crash.crash_of(code, self.note)
        if died is not None:
            sep = "," if during else ""
            return errors.EngineCrashError(f"the engine of model {self.name} crashed: {died.describe()}{sep}{when}")
        msg = f"the engine worker of model {self.name} exited with code {code}{when}; expected it to keep running"
        return errors.EngineError(msg)

    async def attach(self) -> None:
        """Read the worker on the running loop (the server calls this before it serves)."""
        if self._transport is not None:
            return
        if self._dead is not None or self._closing:
            raise self._gone()
        if self._attaching is None:
            self._attaching = asyncio.get_running_loop().create_task(self._connect())
        await asyncio.shield(self._attaching)

    async def _connect(self) -> None:
        self._sock.setblocking(False)
        transport, _ = await asyncio.get_running_loop().connect_accepted_socket(lambda: _Link(self), sock=self._sock)
        self._transport = transport

    # ---------------------------------------------------------------- messages (on the loop)
    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "d":
            s = self._streams.get(message[1])
            if s is not None:
                s._put(decode_delta(message[2]))
        elif kind == "end":
            s = self._streams.pop(message[1], None)
            if s is not None:
                s._end(message[2], message[3], message[4], *message[5:6])
        elif kind in ("ok", "started"):
            fut = self._calls.pop(message[1], None)
            if fut is not None and not fut.done():
                fut.set_result(message[2] if kind == "ok" else None)
        elif kind == "err":
            error = rebuilt_error(message[2], message[3])
            fut = self._calls.pop(message[1], None)
            if fut is not None and not fut.done():
                fut.set_exception(error)
            s = self._streams.pop(message[1], None)
            if s is not None:
                s._fail(error)
        elif kind == "stats":
            self._stats = message[1]

    def _lost(self) -> None:
        """The socket closed: asked to (closing), or the worker died."""
        self._transport = None
        if self._closing or self._dead is not None:
            return
        self._dead = errors.EngineError(f"the engine worker of model {self.name} went away")
        self._reporting = asyncio.get_running_loop().create_task(self._report_death())

    async def _report_death(self) -> None:
        loop = asyncio.get_running_loop()
        error = await loop.run_in_executor(None, self._death)
        self._dead = error
        self._fail_all(error)
        if self.on_death is not None:
            self.on_death(self, error)

    def _fail_all(self, error: BaseException) -> None:
        calls, self._calls = self._calls, {}
        for fut in calls.values():
            if not fut.done():
                fut.set_exception(error)
        streams, self._streams = self._streams, {}
        for s in streams.values():
            s._fail(error)

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._transport is None or self._transport.is_closing():
            raise self._gone()
        self._transport.write(pack(message))

    def _gone(self) -> BaseException:
        if self._dead is not None:
            return self._dead
        return errors.EngineClosedError(f"the engine of model {self.name} is closed")

    def _go(self, rid: int, client_fd: int | None, spec: dict[str, Any] | None) -> bool:
        """Send a direct stream's go (with the client's socket when ``spec`` is given); True when the socket went."""
        if spec is not None and client_fd is not None and self._fds is not None:
            try:
                # before the go, on the other socket pair: the worker finds it there when it reads the go
                socket.send_fds(self._fds, [struct.pack("!Q", rid)], [client_fd])
            except OSError:
                spec = None  # the worker is going away: the go (if it gets there) says deltas
        else:
            spec = None
        self._send(("go", rid, spec))
        return spec is not None

    def _cancel(self, rid: int) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(pack(("cancel", rid)))

    # ---------------------------------------------------------------- the calls
    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        await self.attach()
        rid = self._next_id()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._send(("call", rid, method, args, kwargs))
        self._calls[rid] = fut
        try:
            return await fut
        except asyncio.CancelledError:
            if self._calls.pop(rid, None) is not None:
                self._cancel(rid)  # a client gone: the request stops in the worker
            raise

    async def _stream(self, method: str, *args: Any, direct: bool = False, **kwargs: Any) -> RemoteStream:
        await self.attach()
        rid = self._next_id()
        started: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        stream = RemoteStream(self, rid, self._stall_timeout)
        stream.direct = direct and self._fds is not None
        self._send(("dstream" if stream.direct else "stream", rid, method, args, kwargs))
        self._calls[rid] = started
        self._streams[rid] = stream
        try:
            await started
        except BaseException:
            self._streams.pop(rid, None)
            if self._calls.pop(rid, None) is not None:
                self._cancel(rid)
            raise
        return stream

    async def complete(self, prompt: str | Sequence[int], sampling: Any = None, **overrides: Any) -> Completion:
        result: Completion = await self._call("start", prompt, sampling, **overrides)
        return result

    async def stream(self, prompt: str | Sequence[int], sampling: Any = None, *, direct: bool = False,
                     **overrides: Any) -> RemoteStream:
        """A completion's text deltas; ``direct``: the stream may be handed over (:meth:`RemoteStream.hand_over`)."""
        return await self._stream("stream", prompt, sampling, direct=direct, **overrides)

    async def chat(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> ChatResult:
        result: ChatResult = await self._call("start_chat", list(messages), **kwargs)
        return result

    async def chat_stream(self, messages: Sequence[dict[str, Any]], *, direct: bool = False,
                          **kwargs: Any) -> RemoteStream:
        """A chat turn's parsed deltas; ``direct`` as for :meth:`stream`."""
        return await self._stream("chat_stream", list(messages), direct=direct, **kwargs)

    async def embed(self, texts: Sequence[str], **kwargs: Any) -> Any:
        return await self._call("embed", list(texts), **kwargs)

    async def tokenize(self, text: str, **kwargs: Any) -> list[int]:
        tokens: list[int] = await self._call("tokenize", text, **kwargs)
        return tokens

    async def save_state_file(self, path: str, history: Any = None) -> StateInfo:
        """The worker's engine writes a conversation's state to ``path`` (the bytes never cross the socket)."""
        info: StateInfo = await self._call("save_state_file", path, history)
        return info

    async def restore_state_file(self, path: str) -> StateInfo:
        info: StateInfo = await self._call("restore_state_file", path)
        return info

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    def stats(self) -> dict[str, int]:
        """The scheduler counters the worker last pushed (it pushes them as they change)."""
        return dict(self._stats)

    @property
    def closing(self) -> bool:
        """True once :meth:`aclose` (or :meth:`close`) has begun."""
        return self._closing

    @property
    def open_streams(self) -> int:
        """Streams whose end has not come from the worker yet."""
        return len(self._streams)

    # ---------------------------------------------------------------- close
    async def aclose(self, reason: str = "the server is stopping") -> None:
        """End what is in flight (EngineClosedError: ``reason``), ask the worker to close its engine
        and wait for it to exit (killed after :data:`CLOSE_TIMEOUT_S`)."""
        if self._closing:
            return
        self._closing = True
        await self._stop_writers()
        self._fail_all(errors.EngineClosedError(f"model {self.name}: {reason}"))
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(pack(("close",)))
        await asyncio.get_running_loop().run_in_executor(None, self._reap)
        if self._transport is not None:
            self._transport.close()
        if self._fds is not None:
            with contextlib.suppress(OSError):
                self._fds.close()

    async def _stop_writers(self, timeout: float = 2.0) -> None:
        """Cancel the streams the worker is writing to their clients and wait (``timeout`` at most) for
        their ends: the error event the server then writes must not interleave with the worker's."""
        handed = [s for s in self._streams.values() if s.handed and not s.ended]
        if not handed or self._transport is None or self._dead is not None:
            return
        for s in handed:
            s.close()
        deadline = time.monotonic() + timeout
        while any(not s.ended for s in handed) and time.monotonic() < deadline and self._dead is None:
            await asyncio.sleep(0.01)

    def close(self) -> None:
        """Close without an event loop (start-up failed, or after the loop ended)."""
        if not self._closing:
            self._closing = True
            with contextlib.suppress(OSError):
                self._sock.setblocking(True)
                self._sock.sendall(pack(("close",)))
        with contextlib.suppress(OSError):
            self._sock.close()  # the worker reads the end of its input if it missed the close
        if self._fds is not None:
            with contextlib.suppress(OSError):
                self._fds.close()
        self._reap()

    def _reap(self) -> None:
        try:
            self.proc.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._note_dir.cleanup()

