"""Time and memory bounds per HTTP connection: slow clients cannot hold the server.

uvicorn bounds a connection's *memory* (h11 buffers at most ``max_incomplete_event_size`` bytes
of an unfinished request head; a response's writes wait while the transport holds more than
its high-water mark) but not its *time*: a client may send its headers a byte at a time for
ever (slowloris), and a response waits for ever on a client that does not read. The protocol
here is uvicorn's own (:class:`uvicorn.protocols.http.h11_impl.H11Protocol`) with those bounds:

- the request head must be complete within ``header_timeout_s`` of the connection (or of its
  first byte on a kept-alive one), else 408; a head still incomplete past ``max_header_bytes``
  is 431 (h11's bound: a head that arrives whole in one read is bounded by the read, 256 KiB);
  each an OpenAI-shaped JSON error, and the connection is closed;
- a response whose unsent bytes stay above the high-water mark (``write_buffer_bytes``) for
  ``write_timeout_s`` (the client took less than three quarters of that buffer in that time)
  is reset: the connection is dropped, the app sees a disconnect (the engine request is
  cancelled, its place freed), and the log says which client and how much was left unsent;
  the kernel's send buffer is capped too (``socket_buffer_bytes``), so a connection holds at
  most about the high-water mark, one write of the app and that buffer.

The body is the app's to read, so its bound (``body_timeout_s``) is applied there
(:func:`harness.serve.app.create_app`). Nothing here runs per token: the timers move only when
the transport pauses or resumes writing, and when a request head starts or ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# a child of uvicorn's error log: formatted and filtered (--log-level) as the server's own lines
log = logging.getLogger("uvicorn.error.harness")


@dataclass(frozen=True, kw_only=True)
class ClientLimits:
    """How long and how much one client connection may take."""

    header_timeout_s: float = 10.0
    """the request line and headers arrive within this many seconds, else 408"""
    body_timeout_s: float = 30.0
    """the request body arrives within this many seconds of the headers, else 408"""
    write_timeout_s: float = 30.0
    """a response whose unsent bytes stay above ``write_buffer_bytes`` this long is dropped"""
    max_header_bytes: int = 16 << 10
    """an unfinished request head beyond this is refused (431)"""
    write_buffer_bytes: int = 64 << 10
    """unsent response bytes a connection holds before the app's writes wait (the high-water mark)"""
    socket_buffer_bytes: int = 128 << 10
    """the kernel's send buffer per connection (SO_SNDBUF; Linux books twice this). Left to
    autotuning, it grows to tcp_wmem's maximum (4 MiB) on loopback and holds a whole answer for
    a client that does not read, out of reach of the write timeout"""

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "write_timeout_s"):
            if not getattr(self, name) > 0:
                msg = f"{name} must be > 0, got {getattr(self, name)}"
                raise ValueError(msg)


#: The ASGI scope's ``extensions`` key under which a request finds its connection
#: (:class:`BoundedH11Protocol`), to hand a streamed response's socket to the engine worker.
CONNECTION_EXTENSION = "harness.connection"


def error_body(status: int, message: str, code: str) -> bytes:
    """OpenAI's error shape, for the answers written before the app sees a request."""
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": code}}).encode()


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the bounds of :class:`ClientLimits` (``limits``, a class attribute:
    :func:`protocol_class` makes a subclass per set of limits, since uvicorn instantiates the class)."""

    limits = ClientLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # h11's own bound on an unfinished request head
        self.conn = h11.Connection(h11.SERVER, self.limits.max_header_bytes)
        self._head_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None

    # ---------------------------------------------------------------- the request head
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        transport.set_write_buffer_limits(high=self.limits.write_buffer_bytes)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.limits.socket_buffer_bytes)
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _waiting_for_head(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self._waiting_for_head():
            # the first bytes of the next request on a kept-alive connection (while it is idle,
            # uvicorn's keep-alive timeout closes it)
            self._arm_head_timer()
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self._head_timer is not None and not self._waiting_for_head():
            self._cancel_head_timer()
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            # the request's ASGI task has not run yet: the app finds this connection in its scope
            extensions: dict[str, Any] = cycle.scope.setdefault("extensions", {})
            extensions[CONNECTION_EXTENSION] = self

    # ---------------------------------------------------------------- a response written by another process
    def socket_to_hand_over(self) -> int | None:
        """The connection's socket (its file descriptor) for an engine worker to write the rest of a
        streamed response to, or None while that would not be safe: the transport closing, or
        holding bytes not yet sent (they must go first, and only the transport knows them)."""
        if self.transport.is_closing() or self.flow.write_paused or self.transport.get_write_buffer_size():
            return None
        sock = self.transport.get_extra_info("socket")
        return None if sock is None else int(sock.fileno())

    def reset_slow_client(self, timeout_s: float) -> None:
        """The engine worker writing this connection's stream gave up on a client that did not read
        for ``timeout_s``: reset the connection, as the write timeout does here."""
        log.warning("%s read too slowly: an event waited %g s for it to read (write timeout): connection reset",
                    _peer(self.client), timeout_s)
        self._reset()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._waiting_for_head():
            return
        received = len(self.conn.trailing_data[0])
        log.warning("%s sent %d bytes of a request head in %g s: closed (header timeout)",
                    _peer(self.client), received, self.limits.header_timeout_s)
        self._refuse(408, f"the request line and headers did not arrive within {self.limits.header_timeout_s:g} s "
                          f"({received} bytes came): send the whole request head at once", "request_timeout")

    def send_400_response(self, msg: str) -> None:
        """h11 refused the request head: unfinished past the size bound (431) or malformed (400), in
        OpenAI's shape."""
        self._cancel_head_timer()
        if len(self.conn.trailing_data[0]) > self.limits.max_header_bytes:
            self._refuse(431, f"the request line and headers are larger than {self.limits.max_header_bytes} bytes",
                         "request_header_fields_too_large")
        else:
            self._refuse(400, "invalid HTTP/1.1 request: the request line or a header is malformed", "invalid_http")

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer ``status`` and close: written as bytes, since h11 may be mid-head or in its error state."""
        body = error_body(status, message, code)
        head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
        self.transport.write(head + body)
        self.transport.close()

    # ---------------------------------------------------------------- the response
    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.limits.write_timeout_s, self._write_timed_out)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timed_out(self) -> None:
        self._write_timer = None
        if self.transport.is_closing() or not self.flow.write_paused:
            return
        log.warning("%s read too slowly: %d response bytes unsent after %g s above %d: connection reset "
                    "(write timeout)", _peer(self.client), self.transport.get_write_buffer_size(),
                    self.limits.write_timeout_s, self.limits.write_buffer_bytes)
        self._reset()

    def _reset(self) -> None:
        # a reset, not a close: a close would leave what the kernel still holds to be sent to a client
        # that does not read (the socket orphaned in FIN-WAIT-1 for minutes); as nginx's
        # reset_timedout_connection, linger 0 drops it and tells the client at once
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().connection_lost(exc)


def _peer(client: tuple[str, int] | None) -> str:
    return f"client {client[0]}:{client[1]}" if client else "a client"


def protocol_class(limits: ClientLimits) -> type[BoundedH11Protocol]:
    """The protocol class for uvicorn's ``Config(http=...)`` bounded by ``limits``."""

    class Bounded(BoundedH11Protocol):
        pass

    Bounded.limits = limits
    return Bounded
