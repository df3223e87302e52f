"""``harness serve`` under load and abuse, CI size (scripts/serve_load.py's ``ci`` profile;
``nox -s serve-load`` runs the same clients at full size with a soak): 64 concurrent streaming
clients on a 4-slot model, 50 clients that leave at random points, then slowloris heads, a slow
body, a reader of one byte at a time and malformed bodies while well-behaved clients are served,
all on the tiny model (HARNESS_TINY_MODEL) over loopback.

Every client gets a complete, valid stream or a 429 with Retry-After; none hangs (each is bounded);
each abuser gets a bounded answer (408, a dropped connection, a 4xx naming the problem) while the
others are served; afterwards the server is idle again (no request admitted or holding a slot,
no stream being read, as /health and /metrics say) and still answers. Seconds on two cores.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from harness.qualify.specs import model_path, require_variant

from .test_serve import Server, _config, _start


def _script(name: str) -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


serve_load = _script("serve_load")
P = serve_load.PROFILES["ci"]


@pytest.fixture(scope="module")
def loaded(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_variant(variant)
    tiny = model_path("HARNESS_TINY_MODEL").resolve()
    tmp = tmp_path_factory.mktemp("serve-load")
    cfg = _config(tmp, "tiny.yaml", serve_load.CONFIG.format(name="tiny", model=tiny.name, parallel=4))
    # 4 slots + 12 queued: a burst of 64 is mostly refused at once; short client bounds
    yield from _start(tmp, variant, [cfg], "--models-dir", str(tiny.parent), "--max-queue", str(P.queue),
                      "--header-timeout", str(P.header_timeout_s), "--body-timeout", str(P.body_timeout_s),
                      "--write-timeout", str(P.write_timeout_s))


def _wait_idle(server: Server) -> None:
    try:
        serve_load.wait_idle(server.root)
    except AssertionError as e:
        pytest.fail(f"{e}\n{server.log.read_text()[-2000:]}")


def test_64_streaming_clients_on_4_slots(loaded: Server) -> None:
    s, most = asyncio.run(serve_load.burst(loaded.base, loaded.root, P))  # a client that hangs: TimeoutError
    assert not s["bad"], s["bad"]
    assert s["ok"] >= 16, f"only {s['ok']} of {P.clients} admitted: the 16 places (4 slots + 12 queued) hold"
    assert s["ok"] + s["429"] == P.clients
    assert most <= 4 + P.queue, f"{most} requests admitted at once"
    _wait_idle(loaded)
    print(f"{P.clients} clients: {s}")


def test_clients_that_leave_at_random_points_leave_nothing_behind(loaded: Server) -> None:
    s = asyncio.run(serve_load.leavers(loaded.base, P))
    assert not s["bad"], s["bad"]
    assert s["left"] >= 16 and s["left"] + s["429"] == P.leavers
    _wait_idle(loaded)
    # and the server still answers in full
    with httpx.Client(timeout=60) as http:
        r = http.post(loaded.base + "/chat/completions", json={"model": "tiny", "messages": serve_load.PROMPT,
                                                                 "max_tokens": P.max_tokens, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == P.max_tokens


def test_slow_and_malformed_clients_are_bounded_while_others_are_served(loaded: Server) -> None:
    port = int(loaded.root.rsplit(":", 1)[1])
    a = asyncio.run(serve_load.abuse(loaded.base, port, P))
    failures = serve_load.abuse_failures(a, P)
    assert not failures, f"{failures}\n{loaded.log.read_text()[-2000:]}"
    assert "read too slowly" in loaded.log.read_text(), "the slow reader was not dropped by the write timeout"
    _wait_idle(loaded)
    print(f"abuse: {a}")


def _sse_texts(raw: bytes, chat: bool) -> list[str]:
    """The text of each event of a streamed answer read whole as ``raw`` (parsed with h11)."""
    import h11

    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="POST", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(raw)
    body = b""
    while True:
        ev = conn.next_event()
        if isinstance(ev, h11.Response):
            assert ev.status_code == 200, raw[:500]
        elif isinstance(ev, h11.Data):
            body += ev.data
        elif isinstance(ev, h11.EndOfMessage):
            break
        elif ev is h11.NEED_DATA:
            pytest.fail(f"the stream did not end: {raw[-300:]!r}")
    assert body.endswith(b"data: [DONE]\n\n")
    out = []
    for event in body.split(b"\n\n")[:-2]:
        chunk = json.loads(event.removeprefix(b"data: "))
        for c in chunk["choices"]:
            out.append((c["delta"].get("content") or "") if chat else c["text"])
    return out


@pytest.fixture(scope="module")
def long(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One sequence with room for 3,500 tokens: a stream of ~600 KB, more than a connection's
    socket buffers hold (the server caps its send buffer at 128 KiB)."""
    require_variant(variant)
    tiny = model_path("HARNESS_TINY_MODEL").resolve()
    tmp = tmp_path_factory.mktemp("serve-long")
    cfg = _config(tmp, "tiny.yaml", serve_load.CONFIG.format(name="tiny", model=tiny.name, parallel=1)
                  .replace("context_size: 1024", "context_size: 4096"))
    yield from _start(tmp, variant, [cfg], "--models-dir", str(tiny.parent))


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_a_reader_that_falls_behind_gets_every_token_in_order(long: Server, chat: bool) -> None:
    """While a client keeps up the engine's thread writes each delta itself; once the client's socket
    is full, the stream's writer takes over and coalesces what queued. Nothing lost, nothing reordered:
    the streamed text is the blocking answer's."""
    path = "/chat/completions" if chat else "/completions"
    body: dict[str, Any] = {"model": "tiny", "max_tokens": 3500, "temperature": 0, "ignore_eos": True}
    body.update({"messages": serve_load.PROMPT} if chat else {"prompt": "Once upon a time"})
    blocking = httpx.post(long.base + path, json=body, timeout=120).json()
    want = blocking["choices"][0]["message"]["content"] if chat else blocking["choices"][0]["text"]
    data = json.dumps({**body, "stream": True}).encode()
    port = int(long.root.rsplit(":", 1)[1])
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # a small window: the server's writes fill it
        s.settimeout(60)
        s.connect(("127.0.0.1", port))
        s.sendall(f"POST /v1{path} HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                  + data)
        time.sleep(3.0)  # not reading: the socket fills while the engine decodes (3,500 tokens in ~1.5 s)
        raw = b""
        for _ in range(50):  # then slowly, a little at a time
            raw += s.recv(256)
            time.sleep(0.01)
        while chunk := s.recv(65536):
            raw += chunk
    texts = _sse_texts(raw, chat)
    assert "".join(texts) == want
    # it fell behind, so some events carry several tokens: fewer text events than tokens
    assert len([t for t in texts if t]) < blocking["usage"]["completion_tokens"]
