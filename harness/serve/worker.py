"""The engine worker: one process per served model, so that an engine that dies by a signal
(a SIGSEGV in native code, a SIGILL from a miscompiled CPU level) takes no HTTP connection with it.

``harness serve`` starts ``python -m harness.serve.worker FD`` with one end of a socket pair as
``FD`` and a crash note (:mod:`harness.core.crash`) in its environment; the server's side is
:class:`harness.serve.remote.WorkerRuntime`. The worker loads the model config, answers
``("ready", info)`` (or ``("failed", error class, message)``), then runs each call it is sent on
a thread of its own, the engine blocking in C++ with the GIL released as in-process:

- ``("call", id, method, args, kwargs)``: ``start`` / ``start_chat`` (a request, answered when it
  is done), ``embed``, ``tokenize``: answered ``("ok", id, value)`` or ``("err", id, class, message)``;
- ``("stream", id, method, args, kwargs)``: ``stream`` / ``chat_stream``: ``("started", id)`` once
  submitted, then ``("d", id, delta)`` per delta as the engine hands it out, and ``("end", id,
  completion, finish_reason, message)`` (or ``err``) at the end;
- ``("dstream", id, method, args, kwargs)``: a stream the server may hand to the worker whole: after
  ``("started", id)`` the worker waits for ``("go", id, spec)``. With a spec (a dict: ``prefix``,
  ``suffix``, ``write_timeout_s``, ``chunked``) the client's socket has come first on the second
  socket pair (``FDS``, with the id) and the binding writes every delta to it as a server-sent
  event itself (:meth:`harness.runtime.api.Stream.pump_sse`: no Python per token, here or in the
  server), then the worker answers ``("end", id, completion, finish_reason, message, outcome)``; a
  binding that cannot (or ``spec`` None) streams ``("d", ...)`` as for ``stream``;
- ``("cancel", id)`` cancels a request (its slot frees within one token); ``("close",)`` closes
  the engine and ends the worker, as does the server going away (end of file).

The worker pushes the engine's scheduler counters (``("stats", {...})``) when those the server
shows (active, pending) change, so the server answers /health and /metrics without a round trip.
Messages are pickles behind a 4-byte length: both ends are this package, on one machine.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness.runtime.api import ChatDelta

_LENGTH = struct.Struct("!I")
#: Bytes of queued messages above which a sending thread waits for the writing one.
OUTBOX_BYTES = 1 << 20
#: How often the worker looks at the engine's scheduler counters (pushed only when they change).
STATS_INTERVAL_S = 0.05
#: The counters the server shows (/health, /metrics): a change of these is pushed; the others
#: (tokens decoded, ...) change at every step and would wake both processes 20 times a second.
SERVED_STATS = ("active", "pending")


def capacity(parallel: int, max_queue: int | None) -> tuple[int, int]:
    """(the engine's own waiting list, requests handed to the engine at once) of a model running
    ``parallel`` sequences: four per sequence wait in the engine, so that a freed sequence is
    refilled within a decode step (fewer where ``--max-queue`` allows fewer to wait at all); the
    rest of a burst waits in the server (:mod:`harness.serve.admission`). The second sizes the
    worker's threads (one per request handed to it, and a few more)."""
    queue = min(4 * parallel, max_queue) if max_queue is not None else 4 * parallel
    return queue, parallel + queue


def pack(message: tuple[Any, ...]) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


class Frames:
    """Messages out of a byte stream that arrives in arbitrary pieces."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        buf = self._buffer
        buf += data
        out: list[Any] = []
        pos, size = 0, len(buf)
        while size - pos >= 4:
            (n,) = _LENGTH.unpack_from(buf, pos)
            if size - pos - 4 < n:
                break
            out.append(pickle.loads(memoryview(buf)[pos + 4:pos + 4 + n]))
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out


def encode_delta(d: Any) -> Any:
    """A delta as plain data (cheaper to pickle per token than the dataclass)."""
    if isinstance(d, ChatDelta):
        return (d.content, d.reasoning_content, d.tool_calls)
    return d


def decode_delta(d: Any) -> Any:
    if isinstance(d, tuple):
        return ChatDelta(content=d[0], reasoning_content=d[1], tool_calls=d[2])
    return d


class Worker:
    """The worker's side: the loaded engine and the calls in flight on it."""

    def __init__(self, sock: socket.socket, fds: socket.socket | None = None) -> None:
        self.sock = sock
        self.fds = fds  # client sockets handed over for direct streams, each with its request id
        # direct streams waiting for their go, and the go each got (a socket and a spec, or None: no
        # socket), under _go_ready
        self._awaiting: set[int] = set()
        self._go: dict[int, tuple[int, dict[str, Any]] | None] = {}
        self._go_ready = threading.Condition()
        self.engine: Any = None
        self._wlock = threading.Lock()
        self._outbox: list[bytes] = []  # frames packed but not yet written (under _wlock)
        self._queued = 0  # their bytes
        self._writing = False  # a thread is writing the outbox (under _wlock)
        self._drained = threading.Condition(self._wlock)
        self._lock = threading.Lock()
        # id -> how to cancel it (None until the call has made its request); ids cancelled early
        self._live: dict[int, Callable[[], None] | None] = {}
        self._cancelled: set[int] = set()
        self._closed = threading.Event()

    def send(self, message: tuple[Any, ...]) -> None:
        """Write one message; messages of other threads that queued meanwhile go in the same write.

        Every stream has its thread, and at 16 streams all 16 get a token per decode step at once: the
        first thread to find nobody writing writes everything queued, in order, until the outbox is
        empty, and the others only queue (one system call per batch, not per token; alone, a thread
        writes its own message at once, as before). A thread that queued returns before its message
        is written: order is kept, and a write error reaches the writing thread (the server is gone).
        """
        data = pack(message)
        with self._wlock:
            # a server that stops reading stops the senders here, as a blocking write did
            while self._writing and self._queued > OUTBOX_BYTES:
                self._drained.wait()
            self._outbox.append(data)
            self._queued += len(data)
            if self._writing:
                return
            self._writing = True
        try:
            while True:
                with self._wlock:
                    batch, self._outbox, self._queued = self._outbox, [], 0
                    self._drained.notify_all()
                    if not batch:
                        self._writing = False
                        return
                self.sock.sendall(batch[0] if len(batch) == 1 else b"".join(batch))
        except BaseException:
            with self._wlock:
                self._writing = False
                self._drained.notify_all()
            raise

    # ---------------------------------------------------------------- requests
    def _register(self, rid: int, cancel: Callable[[], None]) -> None:
        with self._lock:
            early = rid in self._cancelled
            self._live[rid] = cancel
        if early:
            cancel()

    def _done(self, rid: int) -> None:
        with self._lock:
            self._live.pop(rid, None)
            self._cancelled.discard(rid)

    def cancel(self, rid: int) -> None:
        with self._go_ready:  # a direct stream waiting for its go is let go (to find its request cancelled)
            if rid in self._awaiting and rid not in self._go:
                self._go[rid] = None
                self._go_ready.notify_all()
        with self._lock:
            if rid not in self._live:  # already answered
                return
            cancel = self._live[rid]
            if cancel is None:
                self._cancelled.add(rid)
        if cancel is not None:
            cancel()

    def call(self, rid: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            if method in ("start", "start_chat"):
                pending = getattr(self.engine, method)(*args, **kwargs)
                self._register(rid, pending.cancel)
                value = pending.result()
            elif method in ("embed", "tokenize", "save_state_file", "restore_state_file"):
                value = getattr(self.engine, method)(*args, **kwargs)
            else:
                msg = f"the engine worker has no call {method!r}"
                raise ValueError(msg)
        except BaseException as e:
            self._reply(("err", rid, type(e).__name__, str(e)))
        else:
            self._reply(("ok", rid, value))
        finally:
            self._done(rid)

    def go(self, rid: int, spec: dict[str, Any] | None) -> None:
        """The server's go for direct stream ``rid``: with a spec, its client socket is the next on ``fds``."""
        handed: tuple[int, dict[str, Any]] | None = None
        if spec is not None and self.fds is not None:
            # the server wrote the socket before the go: it is there already
            data, fds, _, _ = socket.recv_fds(self.fds, 8, 1)
            if len(data) == 8 and len(fds) == 1 and struct.unpack("!Q", data)[0] == rid:
                handed = (fds[0], spec)
            else:  # not this stream's socket (never, between this package's two ends): it streams as any other
                for fd in fds:
                    os.close(fd)
        with self._go_ready:
            if rid not in self._awaiting or rid in self._go:  # ended or cancelled first: nobody takes the socket
                if handed is not None:
                    os.close(handed[0])
                return
            self._go[rid] = handed
            self._go_ready.notify_all()

    def _await_go(self, rid: int) -> tuple[int, dict[str, Any]] | None:
        with self._go_ready:
            while rid not in self._go and not self._closed.is_set():
                self._go_ready.wait(1.0)
            self._awaiting.discard(rid)
            return self._go.pop(rid, None)

    def _forget_go(self, rid: int) -> None:
        """A direct stream that ended before it took its go: a socket that came for it is closed."""
        with self._go_ready:
            self._awaiting.discard(rid)
            handed = self._go.pop(rid, None)
        if handed is not None:
            os.close(handed[0])

    def _pump(self, rid: int, s: Any, fd: int, spec: dict[str, Any]) -> None:
        """Stream ``s`` written to the client socket ``fd`` by the binding, then its end to the server."""
        try:
            outcome, _ = s.pump_sse(fd, spec["prefix"], spec["suffix"], write_timeout_s=spec["write_timeout_s"],
                                    chunked=spec["chunked"])
        except BaseException as e:  # an engine error: after the events before it, as in-process
            self.send(("err", rid, type(e).__name__, str(e)))
            return
        finally:
            os.close(fd)
        self.send(("end", rid, s.result, getattr(s, "finish_reason", None), getattr(s, "message", None), outcome))

    def stream(self, rid: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
               direct: bool = False) -> None:
        try:
            if method not in ("stream", "chat_stream"):
                msg = f"the engine worker has no stream {method!r}"
                raise ValueError(msg)
            s = getattr(self.engine, method)(*args, **kwargs)
        except BaseException as e:
            self._reply(("err", rid, type(e).__name__, str(e)))
            self._done(rid)
            if direct:
                self._forget_go(rid)
            return
        self._register(rid, s.close)
        try:
            self.send(("started", rid))
            if direct:
                handed = self._await_go(rid)
                if handed is not None:
                    fd, spec = handed
                    if getattr(s, "can_pump", False):
                        self._pump(rid, s, fd, spec)
                        return
                    os.close(fd)  # a binding that cannot: the deltas go to the server as for any stream
            while True:
                try:
                    item = s.__next__()
                except StopIteration:
                    break
                except BaseException as e:  # after the deltas before it, as in-process
                    self.send(("err", rid, type(e).__name__, str(e)))
                    return
                self.send(("d", rid, encode_delta(item)))
            self.send(("end", rid, s.result, getattr(s, "finish_reason", None), getattr(s, "message", None)))
        except OSError:  # the server is gone: nobody reads the rest
            s.close()
        finally:
            self._done(rid)
            if direct:
                self._forget_go(rid)

    def _reply(self, message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # the server went away: the worker ends with it
            self.send(message)

    def _stats(self) -> None:
        last: tuple[int, ...] | None = None
        while not self._closed.wait(STATS_INTERVAL_S):
            try:
                now = dict(self.engine.stats())
            except Exception:  # an engine without scheduler counters (embeddings)
                return
            shown = tuple(now.get(k, 0) for k in SERVED_STATS)
            if shown != last:
                last = shown
                self._reply(("stats", now))

    # ---------------------------------------------------------------- the process
    def load(self, request: dict[str, Any]) -> bool:
        from harness.core import crash
        from harness.runtime import Runtime

        try:
            self.engine = Runtime.load(config=request["config"], models_dir=request.get("models_dir"),
                                       variant=request.get("variant"))
            info = dict(self.engine.info())
        except BaseException as e:
            self._reply(("failed", type(e).__name__, str(e)))
            return False
        crash.note(running=None)  # serving: the server names the requests in flight
        self.send(("ready", info))
        return True

    def run(self) -> int:
        frames = Frames()
        first = self._recv(frames)
        if not first or first[0][0] != "load":
            return 2
        if not self.load(first[0][1]):
            return 1
        _, admitted = capacity(int(self.engine.info().get("max_num_seqs", 1)), first[0][1].get("max_queue"))
        # a thread per admitted request, and as many again for streams whose client left but whose
        # cancel the engine has not taken yet (within a token), and embeddings' tokenize calls
        workers = 2 * admitted + 4
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="harness-worker")
        stats = threading.Thread(target=self._stats, name="harness-worker-stats", daemon=True)
        stats.start()
        pending = first[1:]
        try:
            while True:
                for message in pending:
                    kind = message[0]
                    if kind == "close":
                        return 0
                    if kind == "cancel":
                        self.cancel(message[1])
                        continue
                    if kind == "go":
                        self.go(message[1], message[2])
                        continue
                    _, rid, method, args, kwargs = message
                    with self._lock:
                        self._live[rid] = None
                    if kind == "call":
                        pool.submit(self.call, rid, method, args, kwargs)
                    else:
                        if kind == "dstream":
                            with self._go_ready:
                                self._awaiting.add(rid)
                        pool.submit(self.stream, rid, method, args, kwargs, kind == "dstream")
                pending = self._recv(frames)
                if not pending:  # the server went away
                    return 0
        finally:
            self._closed.set()
            with self._go_ready:
                self._go_ready.notify_all()
            with contextlib.suppress(Exception):
                self.engine.close()
            pool.shutdown(wait=False, cancel_futures=True)

    def _recv(self, frames: Frames) -> list[Any]:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except InterruptedError:
                continue
            except OSError:
                return []
            if not data:
                return []
            messages = frames.feed(data)
            if messages:
                return messages


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2) or not all(a.isdigit() for a in args):
        print("usage: python -m harness.serve.worker FD [FDS] (started by harness serve)", file=sys.stderr)
        return 2
    # the server stops the worker in order (Ctrl-C at a terminal reaches the whole process group)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=int(args[0]))
    fds = socket.socket(fileno=int(args[1])) if len(args) == 2 else None
    try:
        return Worker(sock, fds).run()
    finally:
        sock.close()
        if fds is not None:
            fds.close()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # leave at once: engine threads still winding down must not hold the exit
    os._exit(code)
