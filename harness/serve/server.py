"""``harness serve``'s process: the models loaded (each in its engine worker), uvicorn with the
client bounds, and the engines supervised.

The HTTP server holds no engine code: each model config runs in a worker process
(:mod:`harness.serve.worker`). When one dies by a signal, every request in flight on it ends
at once with an error its client can read (a 503 ``engine_crashed``, or that error as an event
of its stream), the other models' requests end the same way (``engine_closed``), the log names
the signal, the CPU level and the requests that were running, and the server stops with
:class:`~harness.core.errors.EngineCrashError` (exit code 16).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core import errors, progress
from harness.serve.admission import DEFAULT_MAX_WAIT_S, QueueBounds, default_max_bytes
from harness.serve.app import ServedModel, create_app
from harness.serve.remote import WorkerRuntime
from harness.serve.worker import capacity

if TYPE_CHECKING:
    from collections.abc import Callable

    from harness.serve.connection import ClientLimits

log = logging.getLogger("uvicorn.error.harness")

#: What a crash message tells the operator to do next.
CRASH_HINT = ("`harness engine info` shows which CPU levels passed this host's smoke probe; force another with "
              "HARNESS_CPU_LEVEL=<level>")


def load_models(configs: list[Path], *, models_dir: Path | None, variant: str | None, max_queue: int | None,
                isolate: bool = True, malloc_hugetlb: bool | None = None, max_queue_wait_s: float = DEFAULT_MAX_WAIT_S,
                max_queue_bytes: int | None = None, sessions_dir: Path | None = None) -> dict[str, ServedModel]:
    """name -> :class:`ServedModel` for each config, loaded as ``Runtime.load(config=...)``: each in an
    engine worker of its own, or with ``isolate=False`` in this process (an engine crash then takes
    the process with it: for tests and for embedding the app). ``malloc_hugetlb=False`` starts the
    workers without glibc's malloc hugepages (:mod:`harness.core.hugepages`). Each model's queue is
    bounded by ``max_queue`` requests (None: no count bound), ``max_queue_wait_s`` of expected wait
    and ``max_queue_bytes`` (None: a share of the memory available now)."""
    from harness.config.effective import load_config_file
    from harness.core.errors import ConfigError, UsageError
    from harness.runtime import Runtime
    from harness.runtime.aio import AsyncRuntime

    models: dict[str, ServedModel] = {}
    bounds = QueueBounds(max_requests=max_queue, max_wait_s=max_queue_wait_s,
                         max_bytes=default_max_bytes() if max_queue_bytes is None else max_queue_bytes)
    try:
        for path in configs:
            effective = load_config_file(path, models_dir=models_dir).resolve()
            name = effective.name if effective is not None else None
            if effective is not None and not name:
                msg = f"model config {path} has no name: the API serves a config under its name: key"
                raise ConfigError(msg)
            if name is not None and name in models:
                msg = f"two configs are named {name!r} ({models[name].config} and {path}): a model id must be unique"
                raise UsageError(msg)
            engine: AsyncRuntime | WorkerRuntime
            with progress.spinner(f"load {name} ({path})"):
                # an invalid config is refused here, every diagnostic listed
                if isolate:
                    engine = WorkerRuntime.start(path, name=str(name), models_dir=models_dir, variant=variant,
                                                 max_queue=max_queue, malloc_hugetlb=malloc_hugetlb)
                    info = engine.info()
                else:
                    loaded = Runtime.load(config=path, models_dir=models_dir, variant=variant)
                    info = loaded.info()
            assert name is not None  # a config that loads has a resolved name
            parallel = int(info.get("max_num_seqs", 1))
            queue, admitted = capacity(parallel, max_queue)
            if not isolate:
                engine = AsyncRuntime(loaded, max_concurrency=admitted)
            models[name] = ServedModel(name=name, engine=engine, capacity=admitted, parallel=parallel, queue=bounds,
                                       embeddings=bool(info.get("embedding_only")), config=str(path),
                                       context=int(info.get("n_ctx") or 0), sessions=sessions_dir,
                                       context_shift=bool(info.get("context_shift")))
            where = f", engine worker pid {engine.pid}" if isinstance(engine, WorkerRuntime) else ""
            count = f"{max_queue} requests, " if max_queue is not None else ""
            progress.info(f"{name}: {info.get('desc', '')}, {parallel} parallel + {queue} waiting in the engine, "
                          f"queue bounded by {count}{bounds.max_bytes / 2**20:.0f} MiB and {bounds.max_wait_s:g} s, "
                          f"variant {info.get('variant')} ({info.get('cpu_variant') or '-'}){where}")
    except BaseException:
        close_models(models)
        raise
    return models


def close_models(models: dict[str, ServedModel]) -> None:
    """Close every engine (outside an event loop; a worker already closed is only reaped)."""
    for m in models.values():
        if isinstance(m.engine, WorkerRuntime):
            m.engine.close()
        else:
            m.engine.engine.close()


def crash_report(m: ServedModel, error: BaseException) -> BaseException:
    """The server's error for a dead engine: what the worker's death says, and the requests running."""
    running = [label for label in m.requests.values() if label]
    if running:
        what = f"while serving {len(running)} request{'s' if len(running) != 1 else ''}: " + "; ".join(running[:20])
        if len(running) > 20:
            what += f"; and {len(running) - 20} more"
    else:
        what = "while no request was in flight"
    msg = f"harness serve: {error}, {what}"
    if isinstance(error, errors.EngineCrashError):
        return errors.EngineCrashError(f"{msg}. {CRASH_HINT}")
    return errors.EngineError(msg)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (the ``serve`` extra; not on Windows), else asyncio's.

    At one stream, each token costs the server a read from the engine worker, a write to the client
    and the loop's turns between them: with asyncio's selector loop that was 0.56 ms of CPU per token
    on a 2-core Sapphire Rapids VM, CPU the engine's own threads then lack; libuv's loop does the same
    I/O in C.
    """
    if os.environ.get("HARNESS_SERVE_LOOP", "") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def serve(models: dict[str, ServedModel], *, host: str, port: int, api_key: str | None, limits: ClientLimits,
          log_level: str) -> None:
    """Serve ``models`` until SIGINT/SIGTERM or an engine dies (then raise the crash report)."""
    import uvicorn

    from harness.serve.connection import protocol_class

    # HARNESS_SERVE_DIRECT=0: every delta through this process (to compare, or should a client need it)
    app = create_app(models, api_key=api_key, body_timeout_s=limits.body_timeout_s,
                     direct_streams=os.environ.get("HARNESS_SERVE_DIRECT", "1") != "0")
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=5, lifespan="off", http=protocol_class(limits),
                            h11_max_incomplete_event_size=limits.max_header_bytes)
    server = uvicorn.Server(config)
    workers = {m.name: m.engine for m in models.values() if isinstance(m.engine, WorkerRuntime)}
    died: list[BaseException] = []
    closing: set[asyncio.Task[None]] = set()

    def on_death(runtime: WorkerRuntime, error: BaseException) -> None:
        report = crash_report(models[runtime.name], error)
        log.error("%s", report)
        died.append(report)
        server.should_exit = True
        loop = asyncio.get_running_loop()
        for other in workers.values():
            if other is not runtime:
                closing.add(loop.create_task(other.aclose(f"the server is stopping: {error}")))

    async def run() -> None:
        for w in workers.values():
            w.on_death = on_death
            await w.attach()
        try:
            await server.serve()
        finally:
            await asyncio.gather(*(w.aclose() for w in workers.values()), return_exceptions=True)

    # uvicorn re-raises the signal that stopped it once it has shut down: SIGTERM's default action
    # would then kill this process before the engines close, a clean stop looking like a death
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(run())
    finally:
        signal.signal(signal.SIGTERM, previous)
        with contextlib.suppress(Exception):
            close_models(models)
    if died:
        raise died[0]
