"""``harness serve`` holds a burst in its queue, as llama-server and vLLM do, rather than refusing
all but 4 x n_parallel of it: on the small chat model with 4 sequences,

- 64 concurrent streams from the official ``openai`` client with its default settings (two
  retries, its 10-minute timeout) all complete, none refused;
- 256 all complete the same way (a 429 the client gave up on would be retried here after its
  ``Retry-After``: none comes);
- with a queue bounded at one second of expected wait (``--max-queue-wait 1``), a burst of 256 is
  partly refused up front, each refusal's ``Retry-After`` drawn from the measured drain rate and
  different across the refused clients, and every client that waits as it is told completes.

Each run prints its counts (completed, refused, retried) and wall time: the burst figures.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from harness.qualify.specs import model_path, require_variant

from .test_serve import CHAT_CONFIG, GEO, Server, _config, _start

openai = pytest.importorskip("openai")

MAX_TOKENS = 8
#: Seconds a whole burst may take: a client that hangs fails the spec (on 2 quiet cores 256 take
#: seconds; on a host busy with other work, minutes).
BURST_TIMEOUT_S = 300.0


def _server(variant: str, tmp_path_factory: pytest.TempPathFactory, name: str, *extra: str) -> Iterator[Server]:
    require_variant(variant)
    chat = model_path("HARNESS_CHAT_MODEL").resolve()
    tmp = tmp_path_factory.mktemp(name)
    cfg = _config(tmp, "smol.yaml", CHAT_CONFIG.format(model=chat.name, parallel=4))
    yield from _start(tmp, variant, [cfg], "--models-dir", str(chat.parent), *extra)


@pytest.fixture(scope="module")
def queued(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The defaults: no count bound, the queue bounded by memory and by 120 s of expected wait."""
    yield from _server(variant, tmp_path_factory, "serve-burst")


@pytest.fixture(scope="module")
def tight(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A queue that holds one second of work: a burst of 256 is mostly refused at first."""
    yield from _server(variant, tmp_path_factory, "serve-burst-tight", "--max-queue-wait", "1")


@dataclass
class Burst:
    """What a burst's clients saw."""

    completed: int = 0
    refused_to_us: int = 0
    """429s the openai client handed back (its own retries spent), each then retried here"""
    most_refused: int = 0
    """the most 429s handed back for one request before it completed"""
    retry_after: list[int] = field(default_factory=list)
    """the Retry-After of every 429 the client got (those it retried itself too), seconds"""
    retry_after_ms: list[int] = field(default_factory=list)
    """and its retry-after-ms"""
    wall_s: float = 0.0
    refused: int = 0
    """429s the server answered, the openai client's own retries included (from /metrics)"""


def _refusals(server: Server) -> int:
    text = httpx.get(server.root + "/metrics", timeout=10).text
    m = re.search(r'^harness_requests_total\{endpoint="chat",model="smol",status="429"\} (\S+)$', text, re.M)
    return int(float(m.group(1))) if m else 0


async def _one(client: Any, burst: Burst) -> None:
    """One streamed chat completion of MAX_TOKENS tokens; a 429 is waited out as its Retry-After says."""
    refused = 0
    while True:
        try:
            stream = await client.chat.completions.create(
                model="smol", messages=GEO, max_tokens=MAX_TOKENS, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        except openai.RateLimitError as e:
            burst.refused_to_us += 1
            refused += 1
            burst.most_refused = max(burst.most_refused, refused)
            await asyncio.sleep(int(e.response.headers["retry-after"]))
            continue
        usage = None
        async for chunk in stream:
            usage = chunk.usage or usage
        assert usage is not None and usage.completion_tokens == MAX_TOKENS, usage
        burst.completed += 1
        return


def _burst(server: Server, n: int) -> Burst:
    """``n`` streams at once from one openai client with its default settings (its HTTP client given a
    hook that notes each 429's Retry-After, nothing else)."""
    before = _refusals(server)
    burst = Burst()

    async def note(response: Any) -> None:
        if response.status_code == 429:
            burst.retry_after.append(int(response.headers["retry-after"]))
            burst.retry_after_ms.append(int(response.headers["retry-after-ms"]))

    async def run() -> None:
        http = openai.DefaultAsyncHttpxClient(event_hooks={"response": [note]})
        async with openai.AsyncOpenAI(base_url=server.base, api_key="unused", http_client=http) as c:
            await asyncio.wait_for(asyncio.gather(*(_one(c, burst) for _ in range(n))), BURST_TIMEOUT_S)

    t0 = time.monotonic()
    asyncio.run(run())
    burst.wall_s = round(time.monotonic() - t0, 2)
    burst.refused = _refusals(server) - before
    return burst


def _idle(server: Server) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        smol = dict(httpx.get(server.root + "/health", timeout=10).json()["models"]["smol"])
        if (smol["in_flight"] == 0 and smol["active"] == 0) or time.monotonic() > deadline:
            return smol


def test_64_streams_from_the_default_openai_client_all_complete(queued: Server) -> None:
    async def run() -> int:
        # the client exactly as a user makes it: default retries and timeout, no retry loop of ours
        async with openai.AsyncOpenAI(base_url=queued.base, api_key="unused") as c:
            async def one() -> int:
                stream = await c.chat.completions.create(model="smol", messages=GEO, max_tokens=MAX_TOKENS, stream=True,
                                                         stream_options={"include_usage": True},
                                                         extra_body={"ignore_eos": True})
                usage = None
                async for chunk in stream:
                    usage = chunk.usage or usage
                return usage.completion_tokens if usage is not None else 0
            return sum(await asyncio.wait_for(asyncio.gather(*(one() for _ in range(64))), BURST_TIMEOUT_S))

    before = _refusals(queued)
    t0 = time.monotonic()
    tokens = asyncio.run(run())
    wall = time.monotonic() - t0
    assert tokens == 64 * MAX_TOKENS
    refused = _refusals(queued) - before
    assert refused == 0, f"{refused} of 64 refused: the queue should hold them"
    health = _idle(queued)
    assert health["in_flight"] == 0 and health["queue"]["waiting"] == 0
    assert health["queue"]["drain_per_s"] > 0  # measured while the burst kept every sequence busy
    print(f"64 streams, default openai client: 64 completed, {refused} refused, 0 retried, {wall:.2f} s; "
          f"drain {health['queue']['drain_per_s']} requests/s")


def test_256_streams_complete_with_the_default_openai_client(queued: Server) -> None:
    b = _burst(queued, 256)
    health = _idle(queued)
    # on two quiet cores none is refused (256 x 8 tokens drain well within 120 s); on a slow host some
    # may be, and each is then retried, by the client or here, after its Retry-After
    print(f"256 streams, default openai client: {b.completed} completed, {b.refused} refused "
          f"({b.refused - b.refused_to_us} retried by the client, {b.refused_to_us} here after Retry-After), "
          f"{b.wall_s} s; drain {health['queue']['drain_per_s']} requests/s")
    assert b.completed == 256
    assert health["in_flight"] == 0


def test_a_tight_queue_refuses_with_spread_retry_after_and_retried_clients_complete(tight: Server) -> None:
    warm = _burst(tight, 16)  # the drain rate is measured while every sequence is busy
    assert warm.completed == 16
    rate = _idle(tight)["queue"]["drain_per_s"]
    assert rate, "no drain rate after 16 requests on 4 sequences"
    # each 429 is retried after its Retry-After: by the openai client (twice at most: it honors
    # retry-after-ms, the same wait in milliseconds), then by the loop here
    b = _burst(tight, 256)
    health = _idle(tight)
    print(f"256 streams, --max-queue-wait 1, each 429 retried after its Retry-After: {b.completed} completed, "
          f"{b.refused} refused ({b.refused - b.refused_to_us} retried by the client, {b.refused_to_us} here, at most "
          f"{b.most_refused} here for one request), {b.wall_s} s; Retry-After {len(set(b.retry_after))} distinct values "
          f"from {min(b.retry_after, default=0)} to {max(b.retry_after, default=0)} s; drain {rate} -> {health['queue']['drain_per_s']} requests/s; "
          f"refused by bound {health['queue']['refused']}")
    assert b.completed == 256
    assert b.refused > 0 and health["queue"]["refused"]["wait"] >= b.refused
    assert len(b.retry_after) == b.refused
    # spread, never one value for everyone: refused clients do not come back together (the whole
    # seconds of Retry-After can only be as spread as the drain rate lets them: their milliseconds differ)
    assert all(math.ceil(ms / 1000) == s for s, ms in zip(b.retry_after, b.retry_after_ms, strict=True))
    assert len(set(b.retry_after_ms)) >= 0.9 * b.refused, sorted(b.retry_after_ms)
    assert health["in_flight"] == 0
