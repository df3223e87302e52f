"""Bench arms: what one side of an A/B benchmark is, and the worker process it runs in.

An arm is described by an :class:`ArmSpec` (``kind`` + options) and created by
the ``harness_bench_arm(kind, options)`` hook. Each arm lives in its own worker
process (``multiprocessing`` "spawn" context, so no state leaks from the parent)
that builds the plugin manager, asks the hook for the arm, and then answers
commands over a pipe. Both arms therefore pay the same process start-up, the
same allocator state and the same import cost, and a crash in one arm cannot
take the runner down.

The object a plugin returns must provide the :class:`Arm` methods. The runner
adds two keys to the options it passes to the hook: ``"_role"`` (``"A"`` or
``"B"``) and ``"_process"`` (which of the arm's worker processes this is, from 0:
the runner starts a fresh one per block, see :mod:`harness.bench.abba`). Keys
starting with ``_`` are runner context; arms ignore the ones they do not use (the
``fake`` arm uses them to give each side and each process its own noise).

Each worker's environment carries ``HARNESS_BENCH_ENV_PAD``, a random number of
bytes (0 to 4 KiB, as pyperf does): the environment's size moves the initial
stack, so no process keeps one lucky (or unlucky) memory layout for a whole arm.
It is also an engine process's environment (:func:`harness.core.hugepages.engine_env`:
glibc's malloc hugepages, on unless turned off), the same for both arms and handed on to
what an arm starts (llama-bench, a server).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from harness.core import crash, hugepages
from harness.core.errors import BenchError, EngineCrashError

if TYPE_CHECKING:
    from harness.engine.interface import BenchArmKind

#: The keys every ``measure()`` result must carry, all positive numbers.
REQUIRED_METRICS: tuple[str, ...] = ("ttft_s", "decode_tps", "aggregate_tps")

#: Seconds a worker gets to build its arm (real arms load a model).
START_TIMEOUT_S = 600.0
#: Seconds a worker gets to close before it is terminated.
CLOSE_TIMEOUT_S = 10.0


@runtime_checkable
class Arm(Protocol):
    """What a ``harness_bench_arm`` implementation returns."""

    def warmup(self) -> None:
        """Load, touch the weights and run a throw-away request; not measured."""

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        """Run ``concurrency`` requests of ``pn`` prompt and ``gn`` generated tokens.

        Returns at least ``ttft_s`` (prefill time to first token, seconds),
        ``decode_tps`` (per-sequence decode tokens/s) and ``aggregate_tps``
        (generated tokens/s over all sequences); other numeric keys are kept.
        """
        ...

    def describe(self) -> dict[str, Any]:
        """Pins, manifests, versions and the model (``model.bytes``, ``model.n_params``)."""
        ...

    def close(self) -> None:
        """Release the model and any child processes."""


@dataclass(frozen=True)
class ArmSpec:
    """One side of a benchmark: which arm kind, a display name, and its options."""

    kind: str
    """Arm kind, resolved by the ``harness_bench_arm`` hook (``in-process``, ``fake``, and the engines' own)."""
    name: str
    """Label used in progress, tables and plots."""
    options: dict[str, Any] = field(default_factory=dict)
    """Kind-specific options (model path, variant, threads, ...)."""

    @classmethod
    def parse(cls, text: str, *, name: str | None = None) -> ArmSpec:
        """Parse ``KIND[:key=value,...]``; values become int, float, bool or str.

        ``name=LABEL`` sets the display name; without it the name is :func:`short_name`'s.
        """
        kind, _, rest = text.strip().partition(":")
        if not kind:
            msg = f"expected an arm as KIND[:key=value,...], found {text!r}; e.g. 'fake:slowdown=1.1'"
            raise BenchError(msg)
        options: dict[str, Any] = {}
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                msg = (f"expected key=value in arm options of {text!r}, found {item!r}; "
                       "separate options with commas, e.g. 'fake:seed=1,slowdown=1.1'")
                raise BenchError(msg)
            options[key.strip()] = _coerce(value.strip())
        label = options.pop("name", None)
        kind = kind.strip()
        return cls(kind=kind, name=name or (str(label) if label is not None else short_name(kind, options)),
                   options=options)

    @property
    def spec(self) -> str:
        """The full ``KIND:key=value,...`` text (what the JSON keeps; the name is for people)."""
        opts = ",".join(f"{k}={v}" for k, v in self.options.items() if not k.startswith("_"))
        return f"{self.kind}:{opts}" if opts else self.kind

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "spec": self.spec, "options": dict(self.options)}


#: The arm that runs our binding in this process.
IN_PROCESS = "in-process"

#: Options that say where or how big an arm runs, not which arm it is: left out of short names.
CONTEXT_OPTIONS = frozenset({"model", "threads", "n_ctx", "max_num_seqs", "artifact", "engine", "seed"})
#: Options whose value alone names the arm (``in-process:cpu``, ``TOOL:0.3.35``).
BARE_OPTIONS = frozenset({"variant", "pin", "rev", "version"})
#: Longer option values (paths, hashes) are left out of short names too.
SHORT_VALUE_CHARS = 24


def short_name(kind: str, options: Mapping[str, Any]) -> str:
    """A display name: the kind and what tells this arm apart (``in-process:cpu``, ``fake:slowdown=1.1``).

    Context options (model, threads, context size, ...) and long values such as paths
    are left out: the report states those once, and the full spec stays in the JSON.
    """
    parts: list[str] = []
    for key, value in options.items():
        text = str(value)
        if (key.startswith("_") or key in CONTEXT_OPTIONS or not text or "/" in text
                or len(text) > SHORT_VALUE_CHARS):
            continue
        parts.append(text if key in BARE_OPTIONS else f"{key}={text}")
    return f"{kind}:{','.join(parts)}" if parts else kind


def _coerce(value: str) -> Any:
    low = value.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for conv in (int, float):
        with contextlib.suppress(ValueError):
            return conv(value)
    return value


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One raw measurement: one arm, one block, one concurrency level."""

    arm: str
    """``"A"`` (baseline) or ``"B"`` (candidate)."""
    block: int
    """ABBA block index, from 0."""
    position: int
    """Position of this arm inside its block (0 = first, 1 = second)."""
    sequence: int
    """Index of this arm's turn over the whole run (0 .. 2*blocks-1)."""
    concurrency: int
    pn: int
    gn: int
    ttft_s: float
    decode_tps: float
    aggregate_tps: float
    peak_rss_bytes: int
    """Peak resident set of the worker (and its waited-for children) so far."""
    started_at: float
    """Unix time the measurement started in the worker."""
    finished_at: float
    extra: dict[str, float] = field(default_factory=dict)
    """Other numbers the arm reported."""
    process: int = 0
    """Which worker process of its arm took it (a fresh one per block, unless the run reuses one)."""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sample:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# ---------------------------------------------------------------------------
# creating arms (runs in the worker, or in-process for tests)
# ---------------------------------------------------------------------------


def _manager(extra_plugins: Sequence[str]) -> Any:
    """The plugin manager with ``extra_plugins`` (module names) registered too."""
    import importlib

    from harness.engine.plugin import get_manager

    pm = get_manager()
    for module_name in extra_plugins:
        module = importlib.import_module(module_name)
        if not pm.is_registered(module):
            pm.register(module)
    return pm


def engine_arm(kind: str, options: Mapping[str, Any], pm: Any | None = None) -> tuple[str, BenchArmKind] | None:
    """The engine that provides arm ``kind`` and how it makes it: the engine ``options["engine"]``
    names; else the only registered engine with that kind, or the default text engine among several.
    None when no engine has the kind (an engine-free kind: the ``harness_bench_arm`` hook's)."""
    from harness.engine import registry

    found = registry.engines(pm)
    named = options.get("engine")
    if named is not None:
        engine = registry.get(str(named), pm)
        if kind not in engine.bench_arms:
            if not any(kind in e.bench_arms for e in found.values()):
                return None
            have = ", ".join(sorted(engine.bench_arms)) or "none"
            msg = f"engine {engine.name} has no bench arm kind {kind!r} (its kinds: {have})"
            raise BenchError(msg)
        return engine.name, engine.bench_arms[kind]
    offering = [e for e in found.values() if kind in e.bench_arms]
    if not offering:
        return None
    if len(offering) > 1:
        preferred = [e for e in offering if e.default and "text" in e.serves]
        if len(preferred) != 1:
            names = ", ".join(e.name for e in offering)
            msg = f"bench arm kind {kind!r} is provided by engines {names}: name one, e.g. {kind}:engine={offering[0].name}"
            raise BenchError(msg)
        offering = preferred
    return offering[0].name, offering[0].bench_arms[kind]


def known_kinds(extra_plugins: Sequence[str] = ()) -> set[str] | None:
    """Every arm kind an engine or a plugin provides; None when a plugin makes arms without listing its
    kinds (``harness_bench_arm_kinds``), so the set cannot be known."""
    from harness.engine import registry

    pm = _manager(extra_plugins)
    makers = {id(i.plugin) for i in pm.hook.harness_bench_arm.get_hookimpls()}
    listers = {id(i.plugin) for i in pm.hook.harness_bench_arm_kinds.get_hookimpls()}
    if not makers <= listers:
        return None
    known = {k for kinds in pm.hook.harness_bench_arm_kinds() for k in kinds}
    return known | {k for e in registry.engines(pm).values() for k in e.bench_arms}


def check_kind(spec: ArmSpec, extra_plugins: Sequence[str] = ()) -> None:
    """Refuse an arm kind no engine and no plugin creates, before anything is measured. Every plugin
    implementing ``harness_bench_arm`` must also list its kinds (``harness_bench_arm_kinds``); if one
    does not, the check is skipped (its kinds are unknown)."""
    from harness.core.errors import UnknownNameError

    known = known_kinds(extra_plugins)
    if known is not None and spec.kind not in known:
        raise UnknownNameError("bench arm kind", spec.kind, known)


def prepare_options(kind: str, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The options an arm's worker gets once its engine (or plugin) prepared it here, in the parent;
    None when nothing prepares that kind."""
    from harness.engine.plugin import get_manager

    pm = get_manager()
    found = engine_arm(kind, options, pm)
    if found is not None:
        name, arm_kind = found
        return None if arm_kind.prepare is None else arm_kind.prepare({**options, "engine": name})
    out = pm.hook.harness_bench_arm_prepare(kind=kind, options=dict(options))
    return None if out is None else dict(out)


def prepare_arm(spec: ArmSpec) -> ArmSpec:
    """Let the arm's engine prepare it here, in the parent (builds show progress), before workers
    start (e.g. build the pin an arm names)."""
    options = prepare_options(spec.kind, spec.options)
    return spec if options is None else dataclasses.replace(spec, options=options)


def create_arm(spec: ArmSpec, role: str, extra_plugins: Sequence[str] = (), process: int = 0) -> Arm:
    """The arm ``spec`` names: made by the engine that provides its kind, else by the
    ``harness_bench_arm`` hook (engine-free kinds)."""
    pm = _manager(extra_plugins)
    pm.check_pending()
    options = {**spec.options, "_role": role, "_process": process}
    found = engine_arm(spec.kind, spec.options, pm)
    if found is not None:
        arm = found[1].make({**options, "engine": found[0]})
    else:
        arm = pm.hook.harness_bench_arm(kind=spec.kind, options=options)
    if arm is None:
        msg = (f"no engine or plugin provides bench arm kind {spec.kind!r} (arm {role}, {spec.name!r}); "
               "expected the built-in kind fake, or one an engine provides; "
               "`harness engines --json` lists each engine's bench arm kinds")
        raise BenchError(msg)
    missing = [m for m in ("warmup", "measure", "describe", "close") if not callable(getattr(arm, m, None))]
    if missing:
        msg = (f"bench arm kind {spec.kind!r} returned {type(arm).__name__}, which lacks "
               f"{', '.join(missing)}; an arm must implement warmup, measure, describe and close")
        raise BenchError(msg)
    return arm  # type: ignore[no-any-return]


def peak_rss_bytes() -> int:
    """Peak RSS of this process and its reaped children, at least the current RSS of the live ones."""
    peak = 0
    try:
        import resource

        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is KiB on Linux, bytes on macOS
        peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * scale
    except ImportError:  # pragma: no cover - Windows
        pass
    try:
        import psutil

        me = psutil.Process()
        live = me.memory_info().rss + sum(c.memory_info().rss for c in me.children(recursive=True))
        peak = max(peak, int(live))
    except Exception:  # pragma: no cover - a child can vanish while we look
        pass
    return int(peak)


def _validate_metrics(spec: ArmSpec, role: str, metrics: Any) -> dict[str, float]:
    if not isinstance(metrics, Mapping):
        msg = (f"arm {role} ({spec.name!r}) measure() returned {type(metrics).__name__}; "
               f"expected a dict with {', '.join(REQUIRED_METRICS)}")
        raise BenchError(msg)
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        out[str(key)] = float(value)
    bad = [k for k in REQUIRED_METRICS if not out.get(k, 0.0) > 0.0]
    if bad:
        msg = (f"arm {role} ({spec.name!r}) measure() returned {dict(metrics)!r}; expected positive "
               f"numbers for {', '.join(REQUIRED_METRICS)} (missing or not positive: {', '.join(bad)})")
        raise BenchError(msg)
    return out


def _measure(arm: Arm, spec: ArmSpec, role: str, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
    started = time.time()
    metrics = arm.measure(pn, gn, concurrency)
    finished = time.time()
    return {"metrics": _validate_metrics(spec, role, metrics), "started_at": started,
            "finished_at": finished, "peak_rss_bytes": peak_rss_bytes()}


def _call_method(arm: Arm, spec: ArmSpec, role: str, method: str, kwargs: dict[str, Any]) -> Any:
    """An arm method beyond the :class:`Arm` protocol (``harness agree`` calls ``tokenize`` and
    ``evaluate``); an arm that lacks it says so by name."""
    fn = getattr(arm, method, None) if not method.startswith("_") else None
    if not callable(fn):
        msg = (f"arm {role} ({spec.name!r}, kind {spec.kind}) has no method {method!r}; "
               "this command needs an arm kind that provides it")
        raise BenchError(msg)
    return fn(**kwargs)


# ---------------------------------------------------------------------------
# handles the runner talks to
# ---------------------------------------------------------------------------


class ArmHandle(Protocol):
    """What :mod:`harness.bench.abba` drives: a started arm, in a worker or in-process."""

    spec: ArmSpec
    role: str
    process: int

    def describe(self) -> dict[str, Any]: ...

    def warmup(self) -> None: ...

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]: ...

    def call(self, method: str, **kwargs: Any) -> Any: ...

    def close(self) -> None: ...


class InProcessArm:
    """An arm created in this process: for tests and debugging, not for real numbers."""

    def __init__(self, spec: ArmSpec, role: str, extra_plugins: Sequence[str] = (), process: int = 0) -> None:
        self.spec, self.role, self.process = spec, role, process
        self._arm: Arm | None = create_arm(spec, role, extra_plugins, process)
        self._describe = dict(self._arm.describe())

    def describe(self) -> dict[str, Any]:
        return self._describe

    def warmup(self) -> None:
        self._live().warmup()

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        return _measure(self._live(), self.spec, self.role, pn, gn, concurrency)

    def call(self, method: str, **kwargs: Any) -> Any:
        """Call an arm method beyond the protocol (``tokenize``, ``evaluate``)."""
        return _call_method(self._live(), self.spec, self.role, method, kwargs)

    def close(self) -> None:
        if self._arm is not None:
            arm, self._arm = self._arm, None
            arm.close()

    def _live(self) -> Arm:
        if self._arm is None:
            msg = f"arm {self.role} ({self.spec.name!r}) is closed; expected a live arm"
            raise BenchError(msg)
        return self._arm


def _worker_main(conn: Connection, spec: ArmSpec, role: str, extra_plugins: tuple[str, ...],
                 note_path: str = "", process: int = 0) -> None:
    """Entry point of an arm's worker process: create the arm, then serve commands."""
    arm: Arm | None = None
    if note_path:  # the parent reads it back if this process dies by a signal
        os.environ[crash.NOTE_ENV] = note_path
    try:
        try:
            crash.note(running=f"arm {role} start")
            live = arm = create_arm(spec, role, extra_plugins, process)
            conn.send(("ok", dict(live.describe())))
        except BaseException as e:
            conn.send(("error", type(e).__name__, str(e), traceback.format_exc(limit=-8)))
            return
        while True:
            try:
                cmd, kwargs = conn.recv()
            except EOFError:  # the parent went away
                return
            crash.note(running=f"arm {role} {cmd}")
            try:
                if cmd == "close":
                    arm = None
                    live.close()
                    conn.send(("ok", None))
                    return
                if cmd == "warmup":
                    live.warmup()
                    conn.send(("ok", None))
                elif cmd == "measure":
                    conn.send(("ok", _measure(live, spec, role, **kwargs)))
                elif cmd == "call":
                    conn.send(("ok", _call_method(live, spec, role, kwargs["method"], kwargs["kwargs"])))
                else:
                    conn.send(("error", "BenchError", f"unknown worker command {cmd!r}", ""))
            except Exception as e:
                conn.send(("error", type(e).__name__, str(e), traceback.format_exc(limit=-8)))
    finally:
        if arm is not None:
            with contextlib.suppress(Exception):
                arm.close()
        conn.close()


class ArmWorker:
    """An arm in its own spawned worker process; use as a context manager or call :meth:`close`.

    ``malloc_hugetlb`` overrides ``$HARNESS_MALLOC_HUGETLB`` for the worker (see :mod:`harness.core.hugepages`).
    """

    def __init__(self, spec: ArmSpec, role: str, extra_plugins: Sequence[str] = (), process: int = 0,
                 malloc_hugetlb: bool | None = None) -> None:
        self.spec, self.role, self.process = spec, role, process
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._note_dir = tempfile.TemporaryDirectory(prefix="harness-arm-")
        self._note = Path(self._note_dir.name) / "note.json"
        self._proc = ctx.Process(target=_worker_main,
                                 args=(child, spec, role, tuple(extra_plugins), str(self._note), process),
                                 name=f"harness-bench-{role}", daemon=True)
        self._describe: dict[str, Any] | None = None
        self._closed = False
        try:
            with _worker_environment(malloc_hugetlb):
                self._proc.start()
        finally:
            child.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def wait_ready(self, timeout: float | None = START_TIMEOUT_S) -> dict[str, Any]:
        """Wait until the worker has built its arm; returns the arm's ``describe()``."""
        if self._describe is None:
            self._describe = dict(self._reply("start", timeout))
        return self._describe

    def describe(self) -> dict[str, Any]:
        return self.wait_ready()

    def warmup(self) -> None:
        self._call("warmup", {})

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        result = self._call("measure", {"pn": pn, "gn": gn, "concurrency": concurrency})
        return dict(result)

    def call(self, method: str, **kwargs: Any) -> Any:
        """Call an arm method beyond the protocol (``tokenize``, ``evaluate``) in the worker."""
        return self._call("call", {"method": method, "kwargs": kwargs})

    def close(self) -> None:
        """Ask the worker to close its arm; terminate it if it does not exit in time."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._proc.is_alive():
                with contextlib.suppress(OSError, BenchError, EngineCrashError):
                    self._conn.send(("close", {}))
                    self._reply("close", CLOSE_TIMEOUT_S)
            self._proc.join(CLOSE_TIMEOUT_S)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(CLOSE_TIMEOUT_S)
            if self._proc.is_alive():  # pragma: no cover - a worker ignoring SIGTERM
                self._proc.kill()
                self._proc.join()
        finally:
            self._conn.close()
            self._proc.close()
            self._note_dir.cleanup()

    def __enter__(self) -> ArmWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, cmd: str, kwargs: dict[str, Any]) -> Any:
        self.wait_ready()
        if self._closed:
            msg = f"arm {self.role} ({self.spec.name!r}) is closed; expected a live worker for {cmd}"
            raise BenchError(msg)
        try:
            self._conn.send((cmd, kwargs))
        except OSError as e:
            msg = f"arm {self.role} ({self.spec.name!r}): worker pipe is broken ({e}); the worker died"
            raise BenchError(msg) from e
        return self._reply(cmd, None)

    def _raise_if_crashed(self, cmd: str) -> None:
        died = crash.crash_of(self._proc.exitcode, self._note)
        if died is not None:
            msg = (f"arm {self.role} ({self.spec.name!r}): worker died: {crash.signal_text(died.signal)}"
                   + (f", CPU level {died.cpu_level}" if died.cpu_level else "") + f", during {cmd}")
            raise EngineCrashError(msg)

    def _reply(self, cmd: str, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._conn.poll(0.2):
            if not self._proc.is_alive() and not self._conn.poll(0):
                self._raise_if_crashed(cmd)
                msg = (f"arm {self.role} ({self.spec.name!r}): worker exited with code "
                       f"{self._proc.exitcode} during {cmd}; expected a reply. Run the arm in-process "
                       "(tests) or check the engine's own logs for a crash")
                raise BenchError(msg)
            if deadline is not None and time.monotonic() > deadline:
                msg = (f"arm {self.role} ({self.spec.name!r}): no reply to {cmd} within {timeout:.0f} s; "
                       "the worker is stuck (model load or request hung)")
                raise BenchError(msg)
        try:
            reply = self._conn.recv()
        except EOFError as e:
            self._proc.join(CLOSE_TIMEOUT_S)
            self._raise_if_crashed(cmd)
            msg = f"arm {self.role} ({self.spec.name!r}): worker closed its pipe during {cmd}"
            if cmd == "start":
                msg += ("; a spawned worker re-imports the parent's main module, so run the "
                        "benchmark from an importable script guarded by `if __name__ == '__main__':` "
                        "(not from stdin), or see the worker's traceback above")
            raise BenchError(msg) from e
        if reply[0] == "ok":
            return reply[1]
        _, etype, message, tb = reply
        msg = f"arm {self.role} ({self.spec.name!r}) failed in {cmd}: {etype}: {message}"
        if tb and etype != "BenchError":
            msg += "\n--- worker traceback ---\n" + tb.rstrip()
        raise BenchError(msg)


#: The environment variable whose random size varies each worker's initial stack address.
ENV_PAD = "HARNESS_BENCH_ENV_PAD"
#: Its largest size, bytes (pyperf's range).
ENV_PAD_MAX = 4096
_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def _worker_environment(malloc_hugetlb: bool | None = None) -> Iterator[None]:
    """While a worker is spawned (it copies ``os.environ``): :data:`ENV_PAD` set to a random number of
    bytes, and an engine process's environment (:func:`harness.core.hugepages.engine_env`)."""
    import secrets

    with _ENV_LOCK:
        changes = {k: v for k, v in hugepages.engine_env(enabled=malloc_hugetlb).items() if os.environ.get(k) != v}
        changes[ENV_PAD] = "x" * secrets.randbelow(ENV_PAD_MAX + 1)
        old = {k: os.environ.get(k) for k in changes}
        os.environ.update(changes)
        try:
            yield
        finally:
            for key, value in old.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@contextlib.contextmanager
def started_arms(specs: Mapping[str, ArmSpec], *, isolate: bool = True, extra_plugins: Sequence[str] = (),
                 process: int = 0, malloc_hugetlb: bool | None = None) -> Iterator[dict[str, ArmHandle]]:
    """Start one handle per role (workers start in parallel); close them all on exit.

    ``process`` numbers this set of handles among the run's (the arms see it as ``_process``);
    ``malloc_hugetlb`` (None: ``$HARNESS_MALLOC_HUGETLB``) is every worker's glibc malloc hugepages
    setting (:mod:`harness.core.hugepages`): one setting for all arms."""
    handles: dict[str, ArmHandle] = {}
    try:
        for role, spec in specs.items():
            handles[role] = (ArmWorker(spec, role, extra_plugins, process, malloc_hugetlb) if isolate
                             else InProcessArm(spec, role, extra_plugins, process))
        for h in handles.values():
            h.describe()  # waits for the worker's arm
        yield handles
    finally:
        errors: list[BaseException] = []
        for h in handles.values():
            try:
                h.close()
            except Exception as e:  # close the others anyway
                errors.append(e)
        if errors and sys.exc_info()[0] is None:
            raise errors[0]


def run_concurrently(fn: Any, prompts: Sequence[Any], arm: str) -> tuple[list[Any], float]:
    """Run ``fn`` on each prompt, all at once (one thread each); return the results in prompt order and the
    wall time. A request that raised, or returned None, is a BenchError naming the ``arm``."""
    results: list[Any] = [None] * len(prompts)
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = fn(prompts[i])
        except BaseException as e:  # re-raised in the caller's thread below
            failures.append(e)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if failures:
        raise BenchError(f"a request of the {arm} arm failed: {type(failures[0]).__name__}: {failures[0]}")
    if any(r is None for r in results):
        raise BenchError(f"a request of the {arm} arm did not finish")
    return results, wall
