"""Admission: the requests a served model hands to its engine, and the queue that holds a burst.

The engine takes ``places`` requests at once: its parallel sequences and a short waiting list of
its own (:func:`harness.serve.worker.capacity`), so that a freed sequence is refilled within a
decode step. The others wait here, first come first served, as vLLM's scheduler and llama-server
hold theirs, each handed on as a place frees. The queue is bounded

- by memory: the bytes its requests hold (the parsed body and the request's own state, estimated
  from the body's size) against ``max_bytes`` (``--max-queue-memory``; by default a share of the
  memory available when the server starts);
- by time: a request the queue would hold longer than ``max_wait_s`` (``--max-queue-wait``) at the
  measured drain rate is refused at once rather than left to time out in the client;
- by count, where asked: ``max_requests`` (``--max-queue``) requests waiting beyond the parallel
  sequences, in the engine's list and here together.

A request over a bound is refused at once (429) with ``Retry-After`` (and OpenAI's
``retry-after-ms``): the time the queue is expected to take to drain the requests ahead of it
beyond the bound, at the drain rate measured while every sequence was busy. Refused clients are
told different times: each is given the next free moment after the previous one (one drain
interval apart), plus a random jitter of up to half its wait, so that they come back spread
rather than together. Before any rate is measured (the first instants of a cold burst) the wait
is one to two seconds, spread at random.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command line reads the defaults here before it needs any of these
    import asyncio
    import random
    from collections.abc import Callable

#: Bytes a waiting request holds beyond its body: its task, the request and connection objects
#: (measured: the server grew by 27 KiB per queued request of a 100-byte body, 130 KiB of a 100 KB one).
REQUEST_OVERHEAD_BYTES = 32 << 10
#: A body parsed into Python objects holds up to this many times its size (a long text about once; many
#: small messages and tool schemas more).
BODY_FACTOR = 2
#: The default memory budget of a model's queue: this share of the memory available at start ...
MEMORY_SHARE = 8
#: ... and the budget when the available memory cannot be read.
FALLBACK_MAX_BYTES = 1 << 30
#: The default longest expected wait a request is queued for.
DEFAULT_MAX_WAIT_S = 120.0
#: The drain rate is measured over this many completions.
RATE_SAMPLES = 128
#: Until a drain rate is measured (the first completions of a cold burst), a refused request is
#: told to come back within this many seconds and twice that, spread: a guessed rate would either
#: keep it away while the engine idles or bring everyone back at once, and a refusal is cheap; the
#: time bound refuses nothing until then.
UNMEASURED_RETRY_S = 1.0
#: A Retry-After's wait before its jitter is at most this: the openai client does not retry past
#: 120 s, and one refused that long would rather hear so.
MAX_RETRY_AFTER_S = 60.0
#: The jitter: uniform over this fraction of the wait (of at least a second).
JITTER = 0.5
#: The bounds, by the name /health and the metrics give them.
BOUNDS = ("requests", "memory", "wait")


def available_memory() -> int | None:
    """Bytes of memory available for new allocations (psutil: Linux's MemAvailable), or None if unknown."""
    import psutil

    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError, AttributeError):
        return None


def default_max_bytes() -> int:
    """A model's queue budget by default: 1/:data:`MEMORY_SHARE` of the memory available now."""
    avail = available_memory()
    return avail // MEMORY_SHARE if avail else FALLBACK_MAX_BYTES


def request_bytes(body_bytes: int) -> int:
    """The bytes a waiting request with a body of ``body_bytes`` is counted as holding."""
    return REQUEST_OVERHEAD_BYTES + BODY_FACTOR * max(0, body_bytes)


@dataclass(frozen=True, kw_only=True)
class QueueBounds:
    """How much of a burst a model's queue holds."""

    max_requests: int | None = None
    """requests that may wait beyond the parallel sequences (``--max-queue``); None: no count bound"""
    max_bytes: int = field(default_factory=default_max_bytes)
    """bytes the waiting requests may hold (``--max-queue-memory``)"""
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    """the longest expected wait a request is queued for (``--max-queue-wait``)"""


@dataclass(frozen=True, kw_only=True)
class QueueState:
    """The queue as /health and the metrics show it."""

    admitted: int
    """requests admitted: handed to the engine or waiting here"""
    engine: int
    """requests handed to the engine (running or in its own waiting list)"""
    waiting: int
    """requests waiting here for the engine"""
    bytes: int
    """what those hold (estimated)"""
    expected_wait_s: float | None
    """how long a request arriving now would wait for a sequence (None: no rate measured yet)"""
    drain_per_s: float | None
    """requests completed per second while every sequence is busy (None: not measured yet)"""
    refused: dict[str, int]
    """requests refused so far, by bound"""


class Place:
    """An admitted request's place: waiting until the engine has room, then the engine's; give it
    back with :meth:`release` (safe to call more than once, waiting or not)."""

    def __init__(self, admission: Admission, key: int, label: str, cost: int, now: float) -> None:
        self._admission = admission
        self.key = key
        self.label = label
        self.cost = cost
        self.queued_at = now
        self.waited_s = 0.0
        """seconds it waited in the queue (0 when the engine had room at once)"""
        self.granted = False
        self.released = False
        self._waiter: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        """Return once the request holds a place in the engine."""
        if self.granted:
            return
        import asyncio

        if self.released:
            msg = "the request left the queue"
            raise asyncio.CancelledError(msg)
        self._waiter = asyncio.get_running_loop().create_future()
        await self._waiter

    def release(self) -> None:
        self._admission._release(self)

    def _grant(self, now: float) -> None:
        self.granted = True
        self.waited_s = max(0.0, now - self.queued_at)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _drop(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()


class Admission:
    """One model's admission: ``places`` requests in its engine of ``parallel`` sequences, the rest
    queued within ``bounds`` (see the module's docstring). Runs on the event loop: no locks."""

    def __init__(self, name: str, *, parallel: int, places: int, bounds: QueueBounds,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.parallel = max(1, parallel)
        self.places = max(1, places)
        self.bounds = bounds
        if rng is None:
            import random

            rng = random.Random()
        self.rng = rng
        self.clock = clock
        self.requests: dict[int, str] = {}
        """the requests handed to the engine, by admission: what a crash report names"""
        self.refused = dict.fromkeys(BOUNDS, 0)
        self._keys = 0
        self._engine = 0
        self._queue: deque[Place] = deque()
        self._bytes = 0
        # the drain rate: seconds during which every sequence was busy, and that clock's reading at
        # each completion that freed a place then
        self._busy = 0.0
        self._busy_at = clock()
        self._drained: deque[float] = deque(maxlen=RATE_SAMPLES)
        self._next_retry = 0.0  # when the last refused request was told to come back

    # ------------------------------------------------------------ counts
    @property
    def admitted(self) -> int:
        return self._engine + len(self._queue)

    def drain_rate(self) -> float | None:
        """Requests completed per second while every sequence was busy, over the last
        :data:`RATE_SAMPLES` completions; None until two moments apart have been seen."""
        d = self._drained
        if len(d) < 2 or d[-1] <= d[0]:
            return None
        # the completions at the window's first moment began before it
        return sum(1 for t in d if t > d[0]) / (d[-1] - d[0])

    def _ahead(self) -> int:
        """Completions a request arriving now waits for before it has a sequence."""
        return max(0, self._engine + len(self._queue) + 1 - self.parallel)

    def expected_wait_s(self) -> float | None:
        ahead = self._ahead()
        if not ahead:
            return 0.0
        rate = self.drain_rate()
        return ahead / rate if rate else None

    def state(self) -> QueueState:
        rate = self.drain_rate()
        return QueueState(admitted=self.admitted, engine=self._engine, waiting=len(self._queue), bytes=self._bytes,
                          expected_wait_s=self.expected_wait_s(), drain_per_s=rate, refused=dict(self.refused))

    # ------------------------------------------------------------ admission
    def admit(self, label: str = "", body_bytes: int = 0) -> Place:
        """A place for the request ``label`` names (of a body of ``body_bytes``), in the engine at once
        when it has room and nobody waits, else in the queue; a request over a bound raises a 429."""
        now = self.clock()
        self._tick(now)
        cost = request_bytes(body_bytes)
        self._keys += 1
        place = Place(self, self._keys, label, cost, now)
        if not self._queue and self._engine < self.places:
            self._hand(place, now)
            return place
        self._check(cost, now)
        self._queue.append(place)
        self._bytes += cost
        return place

    def _check(self, cost: int, now: float) -> None:
        b = self.bounds
        ahead = self._ahead()
        rate = self.drain_rate()
        if b.max_requests is not None and ahead > b.max_requests:
            self._refuse("requests", ahead - b.max_requests, now,
                         f"{ahead - 1} requests wait for a sequence, the bound (--max-queue {b.max_requests})")
        if self._queue and self._bytes + cost > b.max_bytes:
            mean = self._bytes / len(self._queue)
            over = min(len(self._queue), math.ceil((self._bytes + cost - b.max_bytes) / mean))
            self._refuse("memory", over, now,
                         f"its queue holds {len(self._queue)} requests of {self._bytes / 2**20:.1f} MiB, and this "
                         f"one would pass the bound of {b.max_bytes / 2**20:.1f} MiB (--max-queue-memory)")
        if rate is not None and ahead / rate > b.max_wait_s:
            self._refuse("wait", ahead - math.floor(b.max_wait_s * rate), now,
                         f"this request would wait about {ahead / rate:.0f} s for a sequence ({ahead} requests ahead "
                         f"at {rate:.2f} requests/s), longer than the bound of {b.max_wait_s:g} s (--max-queue-wait)")

    def _refuse(self, bound: str, over: int, now: float, why: str) -> None:
        """Raise the 429 for a request that fits once ``over`` more requests have drained."""
        from harness.serve.protocol import APIError

        self.refused[bound] += 1
        wait = self.retry_after(over, now)
        raise APIError(429, f"model {self.name} is busy: {why}; retry after {wait:.1f} s", type="server_error",
                       code="rate_limit_exceeded",
                       headers={"Retry-After": str(max(1, math.ceil(wait))),
                                "retry-after-ms": str(max(1, math.ceil(wait * 1000)))})

    def retry_after(self, over: int, now: float) -> float:
        """Seconds a refused request is told to wait: until ``over`` requests have drained at the measured
        rate, and no sooner than one drain interval after the previous refused one was told to come
        back; plus a jitter of up to :data:`JITTER` of the wait (of at least a second). With no rate
        measured yet: :data:`UNMEASURED_RETRY_S` to twice that."""
        rate = self.drain_rate()
        if rate is None:
            return UNMEASURED_RETRY_S + self.rng.uniform(0.0, UNMEASURED_RETRY_S)
        at = max(now + max(1, over) / rate, self._next_retry + 1 / rate)
        self._next_retry = at
        wait = min(at - now, MAX_RETRY_AFTER_S)
        return wait + self.rng.uniform(0.0, JITTER * max(wait, 1.0))

    # ------------------------------------------------------------ places
    def _tick(self, now: float) -> None:
        if self._engine >= self.parallel:
            self._busy += now - self._busy_at
        self._busy_at = now

    def _hand(self, place: Place, now: float) -> None:
        self._engine += 1
        self.requests[place.key] = place.label
        place._grant(now)

    def _release(self, place: Place) -> None:
        if place.released:
            return
        place.released = True
        now = self.clock()
        self._tick(now)
        if not place.granted:
            with contextlib.suppress(ValueError):
                self._queue.remove(place)
                self._bytes -= place.cost
            place._drop()
            return
        if self._engine >= self.parallel:
            self._drained.append(self._busy)
        self._engine -= 1
        self.requests.pop(place.key, None)
        while self._queue and self._engine < self.places:
            head = self._queue.popleft()
            self._bytes -= head.cost
            self._hand(head, now)
