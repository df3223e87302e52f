"""The engine worker (harness.serve.worker) and its server side (harness.serve.remote.WorkerRuntime),
over the fake binding core (tests/fakes): calls and streams as in-process, a load failure raised
as the worker's own error, and a worker that dies by a signal mid-stream: the stream and every
call in flight end with EngineCrashError naming the signal and the CPU level, at once.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
from pathlib import Path
from typing import Any

import pytest

from harness.core import errors
from harness.runtime.api import ChatDelta
from harness.serve.remote import WorkerRuntime, rebuilt_error
from harness.serve.worker import Frames, capacity, decode_delta, encode_delta, pack
from tests.unit.test_crash_reporting import fake_env  # noqa: F401 (fixture)

DELTAS = (" Paris", ", and", " more.")
USER = [{"role": "user", "content": "capital of France?"}]


def _config(tmp_path: Path, model: Path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(f"name: tiny\nbackend: llamacpp\nparameters:\n  model: {model.name}\n")
    return p


def _start(fake_env: dict[str, str], tmp_path: Path, variant: str) -> WorkerRuntime:  # noqa: F811
    model = Path(fake_env["FAKE_MODEL"])
    return WorkerRuntime.start(_config(tmp_path, model), name="tiny", models_dir=model.parent, variant=variant,
                               max_queue=2, timeout=60)


def test_frames_split_anywhere_and_deltas_round_trip() -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [("d", 1, encode_delta(ChatDelta(content="a", tool_calls=(call,)))), ("d", 1, "text"),
                ("end", 1, None, "stop", None)]
    data = b"".join(pack(m) for m in messages)
    for cut in range(1, len(data)):
        frames = Frames()
        got = frames.feed(data[:cut]) + frames.feed(data[cut:])
        assert got == [pickle.loads(pickle.dumps(m)) for m in messages]
    assert decode_delta(got[0][2]) == ChatDelta(content="a", tool_calls=(call,))
    assert decode_delta("text") == "text"
    assert capacity(4, None) == (16, 20) and capacity(2, 0) == (0, 2)


def test_errors_come_back_as_their_class() -> None:
    e = rebuilt_error("ContextOverflowError", "prompt of 300 tokens does not fit")
    assert type(e) is errors.ContextOverflowError and str(e) == "prompt of 300 tokens does not fit"
    assert type(rebuilt_error("SubprocessError", "x")) is errors.SubprocessError  # a richer constructor
    other = rebuilt_error("ZeroDivisionError", "division by zero")
    assert type(other) is errors.EngineError and str(other) == "ZeroDivisionError: division by zero"


def test_a_worker_answers_as_the_engine_does(fake_env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    rt = _start(fake_env, tmp_path, "steady")
    assert rt.pid != os.getpid() and rt.info()["cpu_variant"] == "fakelevel"

    async def run() -> dict[str, Any]:
        await rt.attach()
        out: dict[str, Any] = {"complete": await rt.complete("x", max_tokens=4)}
        s = await rt.stream("x")
        out["deltas"] = [t for b in [b async for b in s.batches()] for t in b]
        out["stream"] = s
        cs = await rt.chat_stream(USER)
        out["chat_deltas"] = [d async for d in cs]
        out["chat_stream"] = cs
        out["chat"] = await rt.chat(USER)
        out["tokens"] = await rt.tokenize("ab")
        for _ in range(100):  # the worker pushes its counters within a few tens of milliseconds
            if rt.stats():
                break
            await asyncio.sleep(0.02)
        out["stats"], out["open"] = rt.stats(), rt.open_streams
        with pytest.raises(errors.InvalidRequestError):  # the fake's vocabulary: 359 tokens
            await rt.stream([5, 1000])
        await rt.aclose()
        with pytest.raises(errors.EngineClosedError):
            await rt.complete("x")
        return out

    try:
        out = asyncio.run(run())
    finally:
        rt.close()
    assert out["complete"].text == "".join(DELTAS) and out["complete"].usage.total_tokens == 8
    assert "".join(out["deltas"]) == "".join(DELTAS)
    assert out["stream"].result.finish_reason == "length" and out["stream"].pumped
    assert "".join(d.content for d in out["chat_deltas"]) == "".join(DELTAS)
    assert out["chat_stream"].message == {"role": "assistant", "content": "".join(DELTAS)}
    assert out["chat"].message == {"role": "assistant", "content": "".join(DELTAS)}
    assert out["tokens"] == [ord("a") % 300, ord("b") % 300]
    assert out["stats"] == {"active": 0, "pending": 0} and out["open"] == 0
    assert rt.proc.returncode == 0, "the worker closed its engine and exited"


def test_a_load_failure_is_the_workers_error(fake_env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    config = tmp_path / "bad.yaml"
    config.write_text("name: bad\nbackend: llamacpp\nparameters:\n  model: missing.gguf\n")
    with pytest.raises(errors.HarnessError) as e:
        WorkerRuntime.start(config, name="bad", models_dir=tmp_path, variant="steady", max_queue=None, timeout=60)
    assert "missing.gguf" in str(e.value)
    assert not isinstance(e.value, errors.EngineCrashError)


def test_a_worker_that_dies_mid_stream_ends_everything_in_flight(fake_env: dict[str, str], tmp_path: Path,  # noqa: F811
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CRASH_SIGNAL", "SIGSEGV")
    monkeypatch.setenv("FAKE_CRASH_AFTER", "1")
    monkeypatch.setenv("FAKE_WAIT_S", "60")
    rt = _start(fake_env, tmp_path, "crashy")
    deaths: list[BaseException] = []
    rt.on_death = lambda runtime, error: deaths.append(error)

    async def run() -> tuple[list[str], BaseException, BaseException, BaseException]:
        await rt.attach()
        waiting = asyncio.ensure_future(rt.complete("x"))  # blocks 60 s in the worker
        await asyncio.sleep(0.2)
        s = await rt.stream("x")
        got: list[str] = []
        with pytest.raises(errors.EngineCrashError) as streamed:
            async for batch in s.batches():
                got += batch
        with pytest.raises(errors.EngineCrashError) as waited:
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(errors.EngineCrashError) as after:  # a new call fails at once
            await rt.complete("x")
        return got, streamed.value, waited.value, after.value

    try:
        got, streamed, waited, after = asyncio.run(run())
    finally:
        rt.close()
    assert got == [DELTAS[0]]  # what came before the crash
    expected = "the engine of model tiny crashed: SIGSEGV (segmentation fault), CPU level fakelevel"
    assert str(streamed) == str(waited) == str(after) == expected
    assert [str(d) for d in deaths] == [expected]
    assert rt.proc.returncode == -signal.SIGSEGV and rt.open_streams == 0


class _SlowSocket:
    """A socket whose writes take a while (the server reading), recording each write."""

    def __init__(self) -> None:
        import threading

        self.writes: list[bytes] = []
        self.lock = threading.Lock()

    def sendall(self, data: bytes) -> None:
        import time

        time.sleep(0.002)
        with self.lock:
            self.writes.append(bytes(data))


def test_threads_sending_at_once_share_writes_and_keep_each_streams_order() -> None:
    # 16 streams, a token each per step: the messages queued while one thread writes go out in its
    # next write, every message once, each stream's in the order it sent them
    import threading

    from harness.serve.worker import Worker

    sock = _SlowSocket()
    w = Worker(sock)  # type: ignore[arg-type]
    n_threads, n_msgs = 16, 40

    def stream(rid: int) -> None:
        for i in range(n_msgs):
            w.send(("d", rid, f"t{i}"))

    threads = [threading.Thread(target=stream, args=(r,)) for r in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while True:  # the last writer may still be writing what the others queued
        with w._wlock:
            if not w._writing:
                break
    frames = Frames().feed(b"".join(sock.writes))
    assert len(frames) == n_threads * n_msgs
    for rid in range(n_threads):
        assert [f[2] for f in frames if f[1] == rid] == [f"t{i}" for i in range(n_msgs)]
    assert len(sock.writes) < len(frames) / 2  # batched under contention


def test_a_thread_alone_writes_its_message_at_once() -> None:
    from harness.serve.worker import Worker

    sock = _SlowSocket()
    w = Worker(sock)  # type: ignore[arg-type]
    w.send(("d", 1, "a"))
    assert Frames().feed(sock.writes[0]) == [("d", 1, "a")]
    w.send(("d", 1, "b"))
    assert len(sock.writes) == 2
