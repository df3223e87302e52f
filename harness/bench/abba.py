"""The ABBA runner: interleave the arms in blocks, each block in fresh processes.

Block ``i`` measures both arms once, baseline first in even blocks and
candidate first in odd ones, so four blocks run ``A B | B A | A B | B A``. A
slow drift of the host (thermal, page cache, a neighbour) then hits both arms
alike and cancels in the per-block ratios, instead of favouring whichever arm
ran second. Every raw sample is kept with its block, arm, position, process and times.

**The process is the unit of sampling.** Two identical worker processes of one
arm differ by a steady offset that lasts as long as they do (where the kernel
put their pages, the stack and heap layout): measured here at 1-3% between
two workers of the same binding. One worker per arm for a whole run measures
that offset once and reports it as a difference between the arms, with an
interval that cannot see it. So by default (``fresh_process``) every arm's turn
in every block runs in a new worker, started right before the turn and closed
after it (so no worker idles through the other arm's turn), with a random
environment size (:data:`harness.bench.arms.ENV_PAD`); each
block's B/A ratio then carries an independent draw of both arms' process
offsets, and the per-block statistics (:mod:`harness.bench.stats`: a bootstrap
and a t interval over blocks) are a block bootstrap over processes. In each new
process the arm is warmed by its ``warmup()`` and one discarded measurement of
the run's shape at the lowest concurrency (pyperf's warm-up value): the first
request at a new shape pays for page faults on the KV cache and graph buffers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from harness.bench import system
from harness.bench.arms import ArmHandle, ArmSpec, Sample, started_arms
from harness.bench.gate import headline_keys
from harness.bench.stats import analyze
from harness.bench.system import SystemState
from harness.core import hugepages, progress
from harness.core.errors import BenchError
from harness.core.jsonvalue import json_value

ROLES: tuple[str, str] = ("A", "B")


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """Shape of one ABBA run."""

    blocks: int = 4
    """Number of blocks; each measures A and B once per concurrency level."""
    pn: int = 512
    """Prompt tokens per request (prefill TTFT is measured on this)."""
    gn: int = 128
    """Generated tokens per request (decode tok/s is measured over these)."""
    concurrency: tuple[int, ...] = (1, 4)
    """Concurrent requests per measurement; aggregate tok/s is reported for each."""
    warmup: bool = True
    """Call each arm's ``warmup()`` once before the first block."""
    until_halfwidth: float | None = None
    """Adaptive: after ``blocks`` blocks, keep adding pairs of blocks until every headline
    interval's half-width is at most this many percent (or ``max_blocks`` are done)."""
    max_blocks: int | None = None
    """The most blocks an adaptive run takes (default :data:`DEFAULT_MAX_BLOCKS`)."""
    max_seconds: float | None = None
    """Adaptive: the run's wall-clock budget; no block pair starts once it is spent (the report then
    says what the budget resolved)."""
    stop_when_futile: bool = False
    """Adaptive: stop once the first blocks' noise shows the target needs more blocks than the limit or
    the budget allow (the report says how many it would take), instead of spending the budget."""
    fresh_process: bool = True
    """A new worker per arm for every block (the process is the sampling unit); ``False``
    keeps one per arm for the whole run, whose per-process offset the interval then misses."""

    def __post_init__(self) -> None:
        if self.blocks < 1:
            msg = f"expected at least 1 block, found blocks={self.blocks}; use 4 or more for an interval"
            raise BenchError(msg)
        if self.until_halfwidth is not None and not 0 < self.until_halfwidth < 100:
            msg = f"expected --until-halfwidth in (0, 100) percent, found {self.until_halfwidth}; e.g. 3"
            raise BenchError(msg)
        if self.max_blocks is not None:
            if self.until_halfwidth is None:
                msg = (f"--max-blocks {self.max_blocks} bounds an adaptive run; expected --until-halfwidth PCT "
                       "with it (or --blocks N alone for a fixed count)")
                raise BenchError(msg)
            if self.max_blocks < max(2, self.blocks):
                msg = (f"expected --max-blocks >= --blocks ({self.blocks}) and >= 2, found {self.max_blocks}")
                raise BenchError(msg)
        if self.max_seconds is not None and (self.until_halfwidth is None or not self.max_seconds > 0):
            msg = (f"--max-seconds {self.max_seconds} bounds an adaptive run; expected a positive number of seconds "
                   "with --until-halfwidth PCT")
            raise BenchError(msg)
        if self.pn < 1 or self.gn < 1:
            msg = f"expected positive prompt/generation lengths, found pn={self.pn} gn={self.gn}"
            raise BenchError(msg)
        if not self.concurrency or min(self.concurrency) < 1 or len(set(self.concurrency)) != len(self.concurrency):
            msg = f"expected distinct positive concurrency levels, found {self.concurrency!r}; e.g. 1,4"
            raise BenchError(msg)

    @property
    def limit(self) -> int:
        """The most blocks this run may take."""
        if self.until_halfwidth is None:
            return self.blocks
        return self.max_blocks or max(self.blocks, DEFAULT_MAX_BLOCKS)

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "concurrency": list(self.concurrency),
                "order": [role for _, role in block_order(self.blocks)]}


#: The block limit of an adaptive run without --max-blocks.
DEFAULT_MAX_BLOCKS = 32


@dataclass(frozen=True, kw_only=True)
class Stop:
    """Why a run took as many blocks as it did."""

    reason: str
    """``blocks`` (a fixed count), ``halfwidth`` (every headline interval narrow enough),
    ``max-blocks`` (the limit came first), ``budget`` (the wall-clock budget was spent) or ``futile``
    (the host's noise, measured in the first blocks, needs more blocks than the limit or budget allow)."""
    blocks: int
    target_pct: float | None = None
    max_blocks: int | None = None
    halfwidths: dict[str, float | None] = field(default_factory=dict)
    """Headline metric key -> its ratio interval's half-width (percent) when the run stopped."""
    budget_s: float | None = None
    needed_blocks: int | None = None
    """``futile``: about how many blocks the widest interval would need to reach the target."""

    def text(self) -> str:
        widths = ", ".join(f"{_short_key(k)} ±{'n/a' if v is None else f'{v:.1f}'}%" for k, v in self.halfwidths.items())
        if self.reason == "halfwidth":
            return (f"adaptive: stopped after {self.blocks} blocks, every headline interval within "
                    f"±{self.target_pct:g}% ({widths})")
        if self.reason == "futile":
            return (f"adaptive: stopped after {self.blocks} blocks: at this host's noise ({widths}) reaching "
                    f"±{self.target_pct:g}% needs about {self.needed_blocks} blocks, more than "
                    + (f"the {self.budget_s:g} s budget pays for" if self.budget_s else f"--max-blocks {self.max_blocks}")
                    + "; the rest of the budget was not spent")
        if self.reason == "budget":
            return (f"adaptive: stopped after {self.blocks} blocks when the {self.budget_s:g} s budget was spent; "
                    f"what it resolved: {widths} (target ±{self.target_pct:g}%)")
        if self.reason == "max-blocks":
            wide = [_short_key(k) for k, v in self.halfwidths.items()
                    if v is None or self.target_pct is None or v > self.target_pct]
            return (f"adaptive: stopped at --max-blocks {self.max_blocks} with {', '.join(wide)} still wider "
                    f"than ±{self.target_pct:g}% ({widths}); the target was not reached")
        return f"fixed: {self.blocks} blocks (--blocks)"

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "text": self.text()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Stop:
        return cls(reason=str(data["reason"]), blocks=int(data["blocks"]), target_pct=data.get("target_pct"),
                   max_blocks=data.get("max_blocks"), halfwidths=dict(data.get("halfwidths") or {}),
                   budget_s=data.get("budget_s"), needed_blocks=data.get("needed_blocks"))


def _short_key(key: str) -> str:
    metric, _, c = key.partition("@c")
    names = {"ttft_ms": "prefill", "decode_tps": "decode", "aggregate_tps": "aggregate"}
    return f"{names.get(metric, metric)} @ c={c}"


def block_order(blocks: int) -> list[tuple[int, str]]:
    """``(block, role)`` turns in run order: AB in even blocks, BA in odd ones."""
    turns: list[tuple[int, str]] = []
    for block in range(blocks):
        pair = ROLES if block % 2 == 0 else ROLES[::-1]
        turns.extend((block, role) for role in pair)
    return turns


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    """Everything one ABBA run produced, before statistics."""

    name: str
    config: BenchConfig
    arms: dict[str, ArmSpec]
    """``{"A": baseline spec, "B": candidate spec}``."""
    describe: dict[str, dict[str, Any]]
    """Each arm's ``describe()``: pins, manifests, versions, model."""
    samples: tuple[Sample, ...]
    started_at: float
    finished_at: float
    warmup_s: dict[str, float] = field(default_factory=dict)
    isolated: bool = True
    """Whether each arm ran in its own worker process."""
    aa: bool = False
    """An A/A run: the same arm measured against itself."""
    stop: Stop | None = None
    """Why the run took as many blocks as it did."""
    system: SystemState | None = None
    """The machine's state: governor, turbo, load before and during, threads."""

    @property
    def blocks_run(self) -> int:
        return 1 + max((s.block for s in self.samples), default=-1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": {**self.config.as_dict(), "order": [role for _, role in block_order(self.blocks_run)]},
            "blocks_run": self.blocks_run,
            "stop": None if self.stop is None else self.stop.as_dict(),
            "system": None if self.system is None else self.system.as_dict(),
            "arms": {role: {**spec.as_dict(), "describe": self.describe.get(role, {})}
                     for role, spec in self.arms.items()},
            "samples": [s.as_dict() for s in self.samples],
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "warmup_s": dict(self.warmup_s),
            "isolated": self.isolated,
            "aa": self.aa,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchResult:
        cfg = dict(data["config"])
        config = BenchConfig(blocks=int(cfg["blocks"]), pn=int(cfg["pn"]), gn=int(cfg["gn"]),
                             concurrency=tuple(int(c) for c in cfg["concurrency"]),
                             warmup=bool(cfg.get("warmup", True)), until_halfwidth=cfg.get("until_halfwidth"),
                             max_blocks=cfg.get("max_blocks"), max_seconds=cfg.get("max_seconds"),
                             # a report from before processes were sampled kept one per arm
                             fresh_process=bool(cfg.get("fresh_process", False)))
        arms = {role: ArmSpec(kind=a["kind"], name=a["name"], options=dict(a.get("options", {})))
                for role, a in data["arms"].items()}
        return cls(
            name=str(data["name"]), config=config, arms=arms,
            describe={role: dict(a.get("describe", {})) for role, a in data["arms"].items()},
            samples=tuple(Sample.from_dict(s) for s in data["samples"]),
            started_at=float(data["started_at"]), finished_at=float(data["finished_at"]),
            warmup_s={k: float(v) for k, v in data.get("warmup_s", {}).items()},
            isolated=bool(data.get("isolated", True)), aa=bool(data.get("aa", False)),
            stop=Stop.from_dict(data["stop"]) if data.get("stop") else None,
            system=SystemState.from_dict(data["system"]) if data.get("system") else None,
        )


def run_abba(
    a: ArmSpec,
    b: ArmSpec,
    config: BenchConfig | None = None,
    *,
    name: str | None = None,
    aa: bool = False,
    isolate: bool = True,
    extra_plugins: Sequence[str] = (),
    on_sample: Callable[[Sample], None] | None = None,
    threads_source: str = "",
    record_system: bool = True,
    malloc_hugetlb: bool | None = None,
) -> BenchResult:
    """Run ``a`` (baseline) against ``b`` (candidate) in ABBA blocks.

    With ``config.until_halfwidth`` the run is adaptive: after ``config.blocks`` blocks it
    adds blocks in AB/BA pairs (so a linear drift still cancels) until every headline
    interval is narrow enough or ``config.limit`` blocks are done; :class:`Stop` says which.

    :param isolate: one spawned worker process per arm (the default); ``False``
        creates the arms in this process, which is only for tests.
    :param extra_plugins: module names registered on the worker's plugin manager
        in addition to the built-ins (an arm kind from a not-yet-installed plugin).
    :param on_sample: called with each raw sample as it is taken.
    :param threads_source: where the arms' ``threads`` option came from, for the report.
    :param record_system: sample the machine's state before and after (:mod:`harness.bench.system`).
    :param malloc_hugetlb: every arm's worker starts with glibc's malloc hugepages on (True) or off
        (False, ``--no-malloc-hugetlb``); None: ``$HARNESS_MALLOC_HUGETLB`` says, on by default
        (:mod:`harness.core.hugepages`). The system state records it. Arms created in this process
        (``isolate=False``) run with this process's own environment, and that is what is recorded.
    """
    config = config or BenchConfig()
    specs = {"A": a, "B": b}
    run_name = name or (f"aa-{a.kind}" if aa else f"{a.kind}-vs-{b.kind}")
    started = time.time()
    samples: list[Sample] = []
    warm: dict[str, list[float]] = {role: [] for role in ROLES}
    describe: dict[str, dict[str, Any]] = {}
    limit = config.limit
    total = 2 * limit * len(config.concurrency)
    malloc = hugepages.malloc_hugepages(enabled=malloc_hugetlb) if isolate else hugepages.this_process()
    recorder = (system.Recorder(threads=_threads(specs), threads_source=threads_source, malloc=malloc)
                if record_system else None)
    stop: Stop | None = None
    of = f"{limit} max" if config.until_halfwidth is not None else str(limit)
    with _steps(f"bench {run_name}", total) as step, contextlib.ExitStack() as reused:
        arms: dict[str, ArmHandle] | None = None
        for block in range(limit):
            for position, role in enumerate(ROLES if block % 2 == 0 else ROLES[::-1]):
                with contextlib.ExitStack() as per_turn:
                    if config.fresh_process:
                        # this arm's own process, started right before its turn and closed after it: no
                        # process sits idle through the other arm's turn (an idle process's memory may be
                        # reclaimed or demoted by the host, which once made the second arm of every block slower)
                        step(f"block {block + 1}/{of}: starting {role}'s process", False)
                        arm = per_turn.enter_context(started_arms({role: specs[role]}, isolate=isolate,
                                                                  extra_plugins=extra_plugins, process=block,
                                                                  malloc_hugetlb=malloc_hugetlb))[role]
                    else:
                        if arms is None:
                            arms = reused.enter_context(started_arms(specs, isolate=isolate,
                                                                     extra_plugins=extra_plugins,
                                                                     malloc_hugetlb=malloc_hugetlb))
                        arm = arms[role]
                    describe.setdefault(role, json_value(arm.describe()))
                    if config.warmup and (config.fresh_process or block == 0):
                        step(f"block {block + 1}/{of}: warm-up {role} ({specs[role].name})", False)
                        warm[role].append(_warm(arm, config))
                    for c in config.concurrency:
                        step(f"block {block + 1}/{of} {role} c={c}", True)
                        sample = _take(arm, block=block, position=position, sequence=2 * block + position,
                                       concurrency=c, config=config)
                        samples.append(sample)
                        if on_sample is not None:
                            on_sample(sample)
            stop = _should_stop(config, samples, block + 1, aa=aa, elapsed=time.time() - started)
            if stop is not None:
                break
        state = recorder.finish() if recorder is not None else None
    warmup_s = {role: sum(v) / len(v) for role, v in warm.items() if v}
    return BenchResult(name=run_name, config=config, arms=specs, describe=describe,
                       samples=tuple(samples), started_at=started, finished_at=time.time(),
                       warmup_s=warmup_s, isolated=isolate, aa=aa, stop=stop, system=state)


def _warm(arm: ArmHandle, config: BenchConfig) -> float:
    """Seconds of ``arm``'s warm-up: its ``warmup()`` and one discarded measurement of the run's shape."""
    t0 = time.perf_counter()
    arm.warmup()
    arm.measure(config.pn, config.gn, min(config.concurrency))
    return time.perf_counter() - t0


def _threads(specs: Mapping[str, ArmSpec]) -> int | None:
    """The arms' common ``threads`` option, if they share one."""
    found = {spec.options.get("threads") for spec in specs.values()}
    value = found.pop() if len(found) == 1 else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _should_stop(config: BenchConfig, samples: Sequence[Sample], done: int, *, aa: bool,
                 elapsed: float = 0.0) -> Stop | None:
    """None to go on; else why the run stops after ``done`` blocks (``elapsed`` seconds into the run)."""
    target = config.until_halfwidth
    if target is None:
        return Stop(reason="blocks", blocks=done) if done >= config.blocks else None
    # a pair of blocks costs about what the last two did: do not start one the budget cannot pay for
    per_block = elapsed / done if done else 0.0
    spent = config.max_seconds is not None and elapsed + 2 * per_block > config.max_seconds
    at_limit = done >= config.limit or (spent and done >= config.blocks and done % 2 == 0)
    # check whole AB/BA pairs only, so the drift a pair cancels is cancelled in what is reported
    if not at_limit and (done < config.blocks or done % 2):
        return None
    analysis = analyze(samples, aa=aa)
    widths: dict[str, float | None] = {}
    for key in headline_keys(config.concurrency):
        ms = analysis.metrics.get(key)
        widths[key] = None if ms is None or ms.ratio is None else ms.ratio.ratio.half_width_pct
    if all(w is not None and w <= target for w in widths.values()):
        return Stop(reason="halfwidth", blocks=done, target_pct=target, max_blocks=config.limit, halfwidths=widths)
    needed = _needed_blocks(widths, target, done)
    affordable = config.limit
    if config.max_seconds is not None and per_block > 0:
        affordable = min(affordable, int(config.max_seconds // per_block))
    if config.stop_when_futile and not at_limit and needed is not None and needed > affordable:
        return Stop(reason="futile", blocks=done, target_pct=target, max_blocks=config.limit, halfwidths=widths,
                    budget_s=config.max_seconds, needed_blocks=needed)
    if at_limit:
        reason = "max-blocks" if done >= config.limit else "budget"
        return Stop(reason=reason, blocks=done, target_pct=target, max_blocks=config.limit, halfwidths=widths,
                    budget_s=config.max_seconds)
    return None


def _needed_blocks(widths: Mapping[str, float | None], target: float, done: int) -> int | None:
    """Blocks the widest interval would need to reach ``target`` percent: a half-width shrinks as the t
    quantile over the square root of the blocks; None when it cannot be told (fewer than 3 blocks)."""
    from scipy.stats import t as student

    known = [w for w in widths.values() if w is not None]
    if not known or done < 3:
        return None
    worst = max(known)
    if worst <= target:
        return done
    scale = worst * math.sqrt(done) / float(student.ppf(0.975, done - 1))
    for n in range(done + 1, 100 * done + 1):
        if scale * float(student.ppf(0.975, n - 1)) / math.sqrt(n) <= target:
            return n
    return 100 * done


def _take(arm: ArmHandle, *, block: int, position: int, sequence: int, concurrency: int,
          config: BenchConfig) -> Sample:
    r = arm.measure(config.pn, config.gn, concurrency)
    metrics = dict(r["metrics"])
    return Sample(
        arm=arm.role, block=block, position=position, sequence=sequence, concurrency=concurrency,
        pn=config.pn, gn=config.gn, process=arm.process,
        ttft_s=metrics.pop("ttft_s"), decode_tps=metrics.pop("decode_tps"),
        aggregate_tps=metrics.pop("aggregate_tps"),
        peak_rss_bytes=int(r["peak_rss_bytes"]), started_at=float(r["started_at"]),
        finished_at=float(r["finished_at"]), extra=metrics,
    )


@contextmanager
def _steps(title: str, total: int) -> Iterator[Callable[[str, bool], None]]:
    """Progress over measurements (:func:`harness.core.progress.steps`: a bar on a terminal, a heartbeat
    line at least every 30 s in a log); ``step(text, advance)`` marks the next one starting."""
    with progress.steps(f"{title} ({total} measurements)", total) as step:
        yield step
