"""A burst queues: a model hands its engine what it takes at once and holds the rest in a queue
bounded by memory, by the expected wait at the measured drain rate and, where asked, by count;
a refusal's Retry-After is that drain time, different for each refused client.

The admission itself runs on a fake clock (each drain rate and wait exact); the app's part runs
over ASGI with the fake engine of ``test_serve_stream`` (plain iterators behind the real
:class:`AsyncRuntime`).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from typing import Any

import pytest

from harness.runtime.aio import AsyncRuntime
from harness.runtime.api import ChatDelta
from harness.serve.admission import BODY_FACTOR, REQUEST_OVERHEAD_BYTES, Admission, QueueBounds
from harness.serve.app import ServedModel, create_app
from harness.serve.protocol import APIError
from harness.serve.worker import capacity
from tests.unit.test_serve_stream import WAIT_S, Client, FakeEngine, FakeStream, _get


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _admission(parallel: int = 4, places: int = 20, seed: int = 1, **bounds: Any) -> tuple[Admission, Clock]:
    clock = Clock()
    bounds.setdefault("max_bytes", 1 << 30)
    return Admission("m", parallel=parallel, places=places, bounds=QueueBounds(**bounds), rng=random.Random(seed),
                     clock=clock), clock


def _refusal(a: Admission) -> APIError:
    with pytest.raises(APIError) as e:
        a.admit()
    assert e.value.status == 429 and e.value.code == "rate_limit_exceeded"
    return e.value


def _wait_ms(e: APIError) -> int:
    ms = int(e.headers["retry-after-ms"])
    assert e.headers["Retry-After"] == str(max(1, math.ceil(ms / 1000)))  # the same wait in whole seconds
    return ms


# ---------------------------------------------------------------- the admission, on a fake clock

def test_a_burst_far_above_4x_parallel_queues_and_drains_in_order() -> None:
    a, clock = _admission(parallel=4, places=20)  # the engine: 4 sequences + 16 waiting (4 x parallel)
    places = [a.admit(f"r{i}", body_bytes=100) for i in range(1000)]
    assert sum(p.granted for p in places) == 20 and a.admitted == 1000
    state = a.state()
    assert state.waiting == 980 and state.engine == 20
    assert state.bytes == 980 * (REQUEST_OVERHEAD_BYTES + BODY_FACTOR * 100)
    assert state.expected_wait_s is None  # nothing drained yet: no rate to tell
    granted, nxt = places[:20], 20
    while granted:
        clock.t += 0.1
        granted.pop(0).release()
        if nxt < len(places):  # the freed place goes to the oldest waiting, and to it alone
            assert places[nxt].granted and (nxt + 1 == len(places) or not places[nxt + 1].granted)
            granted.append(places[nxt])
            nxt += 1
    assert a.admitted == 0 and a.state().bytes == 0 and not a.requests
    assert a.refused == {"requests": 0, "memory": 0, "wait": 0}


def test_the_drain_rate_is_measured_while_every_sequence_is_busy() -> None:
    a, clock = _admission(parallel=2, places=2)
    places = [a.admit() for _ in range(5)]  # 2 run, 3 wait
    assert a.drain_rate() is None
    for p in places:  # each completes half a second after the one before
        clock.t += 0.5
        p.release()
    assert a.drain_rate() == pytest.approx(2.0)
    # an idle spell (no request at all) does not count: the clock of busy time stands still
    clock.t += 100
    busy = [a.admit(), a.admit()]
    clock.t += 0.5
    busy[0].release()
    assert a.drain_rate() == pytest.approx(2.0)
    # one running, then two more: one in the engine, one waiting; a request arriving now waits for two
    # completions (the one running and the one ahead) at that rate
    busy += [a.admit(), a.admit()]
    assert a.state().waiting == 1
    assert a.expected_wait_s() == pytest.approx(2 / 2.0)


def test_refused_by_count_where_max_queue_is_given() -> None:
    a, _ = _admission(parallel=1, places=2, max_requests=1)
    for _ in range(2):
        a.admit()
    e = _refusal(a)
    assert "--max-queue 1" in e.message and a.refused["requests"] == 1
    # no rate measured yet (a cold burst): one to two seconds, at random
    waits = [_wait_ms(e)] + [_wait_ms(_refusal(a)) for _ in range(20)]
    assert all(1000 <= w <= 2000 for w in waits) and len(set(waits)) > 10


def test_refused_by_memory() -> None:
    per = REQUEST_OVERHEAD_BYTES + BODY_FACTOR * (1 << 20)
    a, _ = _admission(parallel=1, places=1, max_bytes=3 * per)
    a.admit(body_bytes=1 << 20)  # the engine's
    queued = [a.admit(body_bytes=1 << 20) for _ in range(3)]
    assert a.state().bytes == 3 * per
    with pytest.raises(APIError) as e:
        a.admit(body_bytes=1 << 20)
    assert e.value.status == 429 and "--max-queue-memory" in e.value.message and a.refused["memory"] == 1
    # small requests still fit beside them? no: the budget is full
    with pytest.raises(APIError):
        a.admit(body_bytes=0)
    queued[0].release()  # a client that leaves the queue gives its bytes back
    assert a.state().bytes == 2 * per
    a.admit(body_bytes=1 << 20)


def test_an_empty_queue_takes_a_request_larger_than_its_budget() -> None:
    a, _ = _admission(parallel=1, places=1, max_bytes=1 << 20)
    a.admit()
    big = a.admit(body_bytes=8 << 20)  # alone in the queue: else it could never be served
    assert not big.granted and a.state().waiting == 1


def _measured(a: Admission, clock: Clock, rate: float) -> list[Any]:
    """Saturate ``a`` and complete requests at ``rate`` per second until it has measured it."""
    granted = [a.admit() for _ in range(a.places)]
    for _ in range(8):
        clock.t += 1 / rate
        granted.pop(0).release()
        granted.append(a.admit())
    assert a.drain_rate() == pytest.approx(rate)
    return granted


def test_refused_by_time_when_the_wait_at_the_drain_rate_passes_the_bound() -> None:
    a, clock = _admission(parallel=4, places=20, max_wait_s=1.95)
    _measured(a, clock, rate=10.0)
    # 20 in the engine, 4 of them running: a new request waits for 17 completions, 1.7 s at 10/s
    assert a.expected_wait_s() == pytest.approx(1.7)
    for _ in range(3):  # 1.7, 1.8, 1.9 s: within the bound
        a.admit()
    assert a.state().waiting == 3
    e = _refusal(a)
    assert a.refused["wait"] == 1 and "--max-queue-wait" in e.message and "10.00 requests/s" in e.message
    # 2.0 s: it fits once one more has drained (a tenth of a second), plus the jitter of up to half a second
    assert 100 <= _wait_ms(e) <= 600


def test_retry_after_is_spread_over_the_refused_and_follows_the_drain_rate() -> None:
    a, clock = _admission(parallel=4, places=20, max_requests=16, seed=7)
    _measured(a, clock, rate=10.0)
    waits = [_wait_ms(_refusal(a)) for _ in range(50)]
    # each refused client is told the next free moment: a drain interval (0.1 s) after the one before,
    # plus a jitter of up to half its wait (of at least a second)
    assert len(set(waits)) == 50
    for i, w in enumerate(waits):
        base = 100 * (i + 1)
        assert base <= w <= base + 500 * max(1, base / 1000) + 1, (i, w)
    assert len({math.ceil(w / 1000) for w in waits}) >= 5  # whole seconds spread too
    # at a slower drain the same refusals are told to wait longer
    slow, slow_clock = _admission(parallel=4, places=20, max_requests=16, seed=7)
    _measured(slow, slow_clock, rate=1.0)
    assert _wait_ms(_refusal(slow)) >= 1000


def test_retry_after_is_bounded() -> None:
    a, clock = _admission(parallel=1, places=1, max_requests=0)
    _measured(a, clock, rate=0.001)  # one a quarter of an hour
    e = _refusal(a)
    assert _wait_ms(e) <= 90_000  # 60 s and its jitter: the openai client still retries (it stops past 120 s)


def test_a_queued_place_waits_until_handed_over() -> None:
    async def run() -> tuple[bool, bool]:
        a, _ = _admission(parallel=1, places=1)
        first = a.admit()
        second = a.admit()
        waiter = asyncio.ensure_future(second.wait())
        await asyncio.sleep(0)
        before = waiter.done()
        first.release()
        await asyncio.wait_for(waiter, 1)
        third = a.admit()
        gone = asyncio.ensure_future(third.wait())
        await asyncio.sleep(0)
        third.release()  # its client left: the wait ends, nothing is handed to it
        with pytest.raises(asyncio.CancelledError):
            await gone
        return before, second.granted and a.admitted == 1
    before, after = asyncio.run(run())
    assert not before and after


# ---------------------------------------------------------------- through the app

CHAT = {"model": "fake", "messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 8}


def _served(parallel: int, tokens: int, token_s: float, **bounds: Any) -> tuple[ServedModel, FakeEngine]:
    eng = FakeEngine(lambda: FakeStream([ChatDelta(content=f"t{i} ") for i in range(tokens)],
                                        gate=lambda i: time.sleep(token_s)))
    _, places = capacity(parallel, bounds.get("max_requests"))
    m = ServedModel(name="fake", engine=AsyncRuntime(eng, max_concurrency=places), capacity=places,
                    parallel=parallel, queue=QueueBounds(max_bytes=1 << 30, **bounds))
    return m, eng


def _health(text: str) -> dict[str, Any]:
    return dict(json.loads(text)["models"]["fake"])


def test_64_streams_on_one_sequence_all_complete_and_health_shows_the_queue() -> None:
    m, eng = _served(parallel=1, tokens=8, token_s=0.001)
    app = create_app({"fake": m})
    seen: list[dict[str, Any]] = []

    async def run() -> list[Client]:
        clients = [Client(CHAT) for _ in range(64)]
        tasks = [asyncio.ensure_future(c.run(app, "/v1/chat/completions")) for c in clients]
        while not all(t.done() for t in tasks):
            seen.append(_health(await _get(app, "/health")))
            await asyncio.sleep(0.005)
        await asyncio.gather(*tasks)
        return clients

    try:
        clients = asyncio.run(run())
        assert [c.status for c in clients] == [200] * 64  # 64 far above 1 + 4 x 1: none refused
        assert all(c.events()[-1] == "[DONE]" for c in clients), clients[0].events()
        most = max(s["queue"]["waiting"] for s in seen)
        assert most >= 40, most  # the burst waited in the queue, not in the engine
        assert max(s["in_flight"] for s in seen) >= 45 and all(s["queue"]["engine"] <= 5 for s in seen)
        health = _health(asyncio.run(_get(app, "/health")))
        q = health["queue"]
        assert health["in_flight"] == 0 and health["capacity"] is None  # no count bound
        assert q["waiting"] == 0 and q["bytes"] == 0 and q["refused"] == {"requests": 0, "memory": 0, "wait": 0}
        assert q["drain_per_s"] > 0 and q["max_wait_s"] == 120.0 and q["max_bytes"] == 1 << 30
        metrics = asyncio.run(_get(app, "/metrics"))
        assert 'harness_queue_requests{model="fake"} 0.0' in metrics
        assert 'harness_queue_max_bytes{model="fake"} 1.073741824e+09' in metrics
        assert 'harness_capacity_requests{model="fake"} +Inf' in metrics
        assert 'harness_queue_refused_total{bound="wait",model="fake"} 0.0' in metrics
        assert 'harness_queue_wait_seconds_count{model="fake"} 64.0' in metrics
        assert 'harness_queue_drain_rate{model="fake"} NaN' not in metrics
    finally:
        m.engine._pool.shutdown(wait=True)  # type: ignore[union-attr]
    assert len(eng.streams) == 64


def test_refusals_show_in_health_and_metrics() -> None:
    m, _ = _served(parallel=1, tokens=8, token_s=0.001, max_requests=2)
    app = create_app({"fake": m})
    held = [m.admit() for _ in range(3)]  # 1 running + 2 waiting (in the engine's own list)
    try:
        c = Client(CHAT)
        asyncio.run(c.run(app, "/v1/chat/completions"))
        assert c.status == 429
        q = _health(asyncio.run(_get(app, "/health")))["queue"]
        assert q["refused"]["requests"] == 1 and q["max_requests"] == 2
        metrics = asyncio.run(_get(app, "/metrics"))
        assert 'harness_queue_refused_total{bound="requests",model="fake"} 1.0' in metrics
        assert 'harness_capacity_requests{model="fake"} 3.0' in metrics
        assert 'harness_requests_total{endpoint="chat",model="fake",status="429"} 1.0' in metrics
    finally:
        for p in held:
            p.release()
        m.engine._pool.shutdown(wait=True)  # type: ignore[union-attr]


def test_a_client_that_leaves_the_queue_gives_its_place_back() -> None:
    m, eng = _served(parallel=1, tokens=3000, token_s=0.005)  # 15 s unless cancelled
    app = create_app({"fake": m})

    async def run() -> Client:
        queued = [Client(CHAT) for _ in range(5)]  # they hold the engine's 5 places
        tail = Client(CHAT)
        tasks = [asyncio.ensure_future(c.run(app, "/v1/chat/completions")) for c in queued]
        tail_task = asyncio.ensure_future(tail.run(app, "/v1/chat/completions"))
        deadline = time.monotonic() + WAIT_S
        while m.admission.state().waiting < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert m.admission.state().waiting >= 1
        assert tail._gone is not None
        tail._gone.set()  # the queued client disconnects: noticed within a second
        await asyncio.wait_for(tail_task, WAIT_S)
        for c in queued:
            assert c._gone is not None
            c._gone.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        return tail

    try:
        tail = asyncio.run(run())
        assert tail.status == 499  # answered as gone (nobody reads it), never started
        assert len(eng.streams) == 5  # the tail never reached the engine
        deadline = time.monotonic() + WAIT_S
        while m.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert m.in_flight == 0 and m.admission.state().bytes == 0
    finally:
        for s in eng.streams:
            s.close()
        m.engine._pool.shutdown(wait=True)  # type: ignore[union-attr]
