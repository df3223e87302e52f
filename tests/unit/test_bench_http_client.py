"""The server arms' client (engines/llamacpp/plugin/bench_http.py): it reads and stamps a stream's bytes
while the stream runs and parses them after; fed by a real socket server writing the two framings
the arms meet (llama-server's and uvicorn's chunked server-sent events), cut at arbitrary points."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from harness.core.errors import BenchError
from harness_plugins.llamacpp import bench_http


def _event(text: str, *, crlf: bool = False) -> bytes:
    body = json.dumps({"id": "cmpl-1", "object": "text_completion", "model": "bench",
                       "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": None}]})
    end = "\r\n\r\n" if crlf else "\n\n"
    return f"data: {body}{end}".encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n")


class Server:
    """``connections`` connections, each served on a thread of its own; each answer is a list of
    (seconds to wait, bytes to send)."""

    def __init__(self, script: list[tuple[float, bytes]], *, close: bool = True, connections: int = 1) -> None:
        self.script, self.close, self.connections = script, close, connections
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def request(self) -> bytes:
        return self.requests[0]

    def _accept(self) -> None:
        with self.sock:
            for _ in range(self.connections):
                conn, _ = self.sock.accept()
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
            while len(body) < length:
                body += conn.recv(65536)
            self.requests.append(head + b"\r\n\r\n" + body)
            for wait, data in self.script:
                time.sleep(wait)
                conn.sendall(data)
            if not self.close:
                time.sleep(5)


def _arm(port: int) -> bench_http.ServerArm:
    arm = object.__new__(bench_http.ServerArm)
    arm.port = port
    return arm


def _stream(texts: list[str], gap: float, *, crlf: bool = False, cut: int = 0) -> list[tuple[float, bytes]]:
    raw = [(0.0, HEAD)] + [(gap if i else 0.0, _chunk(_event(t, crlf=crlf))) for i, t in enumerate(texts)]
    raw.append((0.0, _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"))
    if not cut:
        return raw
    # the same bytes, cut every `cut` bytes across the framing (each piece sent at its chunk's time)
    out: list[tuple[float, bytes]] = []
    for wait, data in raw:
        for i in range(0, len(data), cut):
            out.append((wait if i == 0 else 0.0, data[i:i + cut]))
    return out


@pytest.mark.parametrize(("crlf", "cut"), [(False, 0), (True, 0), (False, 7), (True, 3)])
def test_times_the_first_and_last_text_and_sends_the_request(crlf: bool, cut: int) -> None:
    server = Server(_stream(["", "a", "b", "c", "d"], 0.05, crlf=crlf, cut=cut))
    ttft, decode, n = _arm(server.port)._one([1, 2, 3], 4)
    assert n == 4
    # the empty first event does not count as text: first text at ~0.05 s, then 3 more 0.05 s apart
    assert 0.04 <= ttft < 1.0
    assert 3 / 0.5 < decode < 3 / 0.1
    head, _, body = server.request.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/completions HTTP/1.1\r\n")
    sent = json.loads(body)
    assert sent["prompt"] == [1, 2, 3] and sent["max_tokens"] == 4 and sent["stream"] is True


def test_ends_at_the_last_chunk_when_the_server_keeps_the_connection() -> None:
    server = Server(_stream(["a", "b"], 0.01), close=False)
    t0 = time.perf_counter()
    _arm(server.port)._one([1], 2)
    assert time.perf_counter() - t0 < 3.0


def test_an_http_error_is_a_bench_error_with_its_body() -> None:
    body = b'{"error":{"message":"model not found","type":"invalid_request_error"}}'
    head = (b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
    server = Server([(0.0, head + body)])
    with pytest.raises(BenchError, match=r"HTTP 404.*model not found"):
        _arm(server.port)._one([1], 2)


def test_an_error_event_in_the_stream_is_a_bench_error() -> None:
    err = b'data: {"error": {"message": "engine crashed", "type": "engine_crashed"}}\n\n'
    server = Server([(0.0, HEAD + _chunk(_event("a")) + _chunk(err) + b"0\r\n\r\n")])
    with pytest.raises(BenchError, match="engine crashed"):
        _arm(server.port)._one([1], 2)


def test_a_stream_without_text_is_a_bench_error() -> None:
    server = Server(_stream([""], 0.0))
    with pytest.raises(BenchError, match="carried no text"):
        _arm(server.port)._one([1], 2)


def test_garbage_instead_of_http_is_a_bench_error() -> None:
    server = Server([(0.0, b"SSH-2.0-OpenSSH_9.6\r\n\r\n")])
    with pytest.raises(BenchError, match="not an HTTP response"):
        _arm(server.port)._one([1], 2)


def test_several_streams_at_once_are_read_by_one_thread() -> None:
    server = Server(_stream(["a", "b", "c", "d", "e"], 0.04, cut=5), connections=3)
    results, wall = _arm(server.port)._streams([[1], [2, 2], [3, 3, 3]], 5)
    assert len(results) == 3
    for ttft, decode, n in results:
        assert n == 5 and 0.0 < ttft < 1.0
        assert 4 / 0.5 < decode < 4 / 0.1  # 4 gaps of 0.04 s between the first and the last text
    assert 0.16 <= wall < 0.4  # together, not one after the other (3 x 0.16 s)
    assert sorted(json.loads(r.partition(b"\r\n\r\n")[2])["prompt"] for r in server.requests) == [[1], [2, 2], [3, 3, 3]]


def test_the_servers_own_timings_are_read_beside_the_clients() -> None:
    """llama-server's ``timings`` on the last event (both servers send it) gives the engine's TTFT and
    decode rate, over the n - 1 tokens after the first as the client's; a stream without it gives none."""
    timings = {"prompt_n": 3, "prompt_ms": 12.5, "predicted_n": 5, "predicted_ms": 40.0}
    last = json.dumps({"id": "cmpl-1", "object": "text_completion", "model": "bench", "timings": timings,
                       "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}]})
    script = _stream(["a", "b", "c", "d", "e"], 0.01)
    script.insert(-1, (0.0, _chunk(f"data: {last}\n\n".encode())))
    arm = _arm(Server(script).port)
    arm._one([1], 5)
    assert arm.engine_side == [pytest.approx((0.0125, 4 / 0.040))]
    plain = _arm(Server(_stream(["a", "b"], 0.01)).port)
    plain._one([1], 2)
    assert plain.engine_side == [None]
    assert bench_http._engine_side({"prompt_ms": "x", "predicted_n": 2, "predicted_ms": 1}) is None
