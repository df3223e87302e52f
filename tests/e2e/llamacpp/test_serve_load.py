"""``harness serve`` under load: 64 concurrent streaming clients on a 4-slot model, then 50
clients that leave at random points, all on the tiny model (HARNESS_TINY_MODEL), over loopback.

Every client gets a complete, valid stream or a 429 with Retry-After; none hangs (each is bounded);
afterwards the server is idle again (no request admitted or holding a slot, no stream being read,
as /health and /metrics say) and still answers. Small enough for CI (seconds on two cores).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ..conftest import model_path, require_variant
from .test_serve import Server, _config, _start

CLIENTS = 64
LEAVERS = 50
MAX_TOKENS = 16
CLIENT_TIMEOUT_S = 60.0
PROMPT = [{"role": "user", "content": "Count to ten."}]

TINY_CONFIG = """\
name: tiny
backend: llamacpp
context_size: 1024
parameters:
  model: {model}
  temperature: 0
options:
  - n_parallel:4
  - threads:2
"""


@pytest.fixture(scope="module")
def loaded(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_variant(variant)
    tiny = model_path("HARNESS_TINY_MODEL").resolve()
    tmp = tmp_path_factory.mktemp("serve-load")
    cfg = _config(tmp, "tiny.yaml", TINY_CONFIG.format(model=tiny.name))
    # 4 slots + 12 queued: a burst of 64 is mostly refused at once
    yield from _start(tmp, variant, [cfg], "--models-dir", str(tiny.parent), "--max-queue", "12")


def _body(max_tokens: int) -> dict[str, Any]:
    return {"model": "tiny", "messages": PROMPT, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}


async def _one(http: httpx.AsyncClient, base: str) -> tuple[str, Any]:
    """One streaming client: ("ok", text), ("429", None), or ("bad", why)."""
    async with http.stream("POST", base + "/chat/completions", json=_body(MAX_TOKENS)) as r:
        if r.status_code == 429:
            body = json.loads(await r.aread())
            if r.headers.get("retry-after") != "1" or body["error"]["code"] != "rate_limit_exceeded":
                return "bad", f"429 without Retry-After or code: {r.headers} {body}"
            return "429", None
        if r.status_code != 200:
            return "bad", f"status {r.status_code}: {(await r.aread())[:300]!r}"
        events: list[Any] = []
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
            elif line:
                return "bad", f"not an SSE data line: {line!r}"
    if not events or events[-1] != "[DONE]":
        return "bad", f"the stream did not end with [DONE]: {events[-3:]}"
    chunks = events[:-1]
    if len({c["id"] for c in chunks}) != 1 or any("error" in c for c in chunks):
        return "bad", f"ids or an error event: {chunks}"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    usage = chunks[-1].get("usage")
    if finishes[-1] != "length" or any(finishes[:-1]) or not usage or usage["completion_tokens"] != MAX_TOKENS:
        return "bad", f"no finishing chunk of {MAX_TOKENS} tokens: {finishes[-2:]} {usage}"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    return "ok", text


async def _leaver(base: str, rng: random.Random) -> str:
    """A client that goes away after a random number of lines (0: right after the headers)."""
    leave_after = rng.randrange(0, 12)
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as http, \
            http.stream("POST", base + "/chat/completions", json=_body(400)) as r:
        if r.status_code != 200:
            return str(r.status_code)
        n = 0
        async for _ in r.aiter_lines():
            if n >= leave_after:
                break
            n += 1
    return "left"


def _idle(server: Server) -> tuple[bool, str]:
    health = server.health()["models"]["tiny"]
    metrics = httpx.get(server.root + "/metrics", timeout=10).text
    streams = [ln for ln in metrics.splitlines() if ln.startswith('harness_open_streams{model="tiny"}')]
    idle = (health["in_flight"] == 0 and health["active"] == 0 and health["pending"] == 0
            and streams == ['harness_open_streams{model="tiny"} 0.0'])
    return idle, f"{health} {streams}"


def _wait_idle(server: Server, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        idle, state = _idle(server)
        if idle:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the server is not idle {timeout} s after its clients: {state}\n"
                        f"{server.log.read_text()[-2000:]}")
        time.sleep(0.1)


def test_64_streaming_clients_on_4_slots(loaded: Server) -> None:
    async def run() -> list[tuple[str, Any]]:
        limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
        async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S, limits=limits) as http:
            tasks = [asyncio.wait_for(_one(http, loaded.base), CLIENT_TIMEOUT_S) for _ in range(CLIENTS)]
            return await asyncio.gather(*tasks)

    t0 = time.monotonic()
    results = asyncio.run(run())  # a client that hangs fails here with TimeoutError
    took = time.monotonic() - t0
    bad = [why for kind, why in results if kind == "bad"]
    assert not bad, bad[:5]
    ok = [text for kind, text in results if kind == "ok"]
    assert len(ok) >= 16, f"only {len(ok)} of {CLIENTS} admitted: the 16 places (4 slots + 12 queued) hold"
    assert len(ok) + sum(kind == "429" for kind, _ in results) == CLIENTS
    _wait_idle(loaded)
    print(f"{CLIENTS} clients: {len(ok)} streams, {CLIENTS - len(ok)} refused with 429, {took:.2f} s")


def test_clients_that_leave_at_random_points_leave_nothing_behind(loaded: Server) -> None:
    rng = random.Random(33)

    async def run() -> list[str]:
        return await asyncio.gather(*(asyncio.wait_for(_leaver(loaded.base, rng), CLIENT_TIMEOUT_S)
                                      for _ in range(LEAVERS)))

    outcomes = asyncio.run(run())
    assert set(outcomes) <= {"left", "429"}, outcomes
    assert outcomes.count("left") >= 16
    _wait_idle(loaded)
    # and the server still answers in full
    with httpx.Client(timeout=CLIENT_TIMEOUT_S) as http:
        r = http.post(loaded.base + "/chat/completions", json={"model": "tiny", "messages": PROMPT, "max_tokens": MAX_TOKENS,
                                                                  "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == MAX_TOKENS

