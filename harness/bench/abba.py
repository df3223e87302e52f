"""The ABBA runner: warm both arms, then interleave them in blocks.

Block ``i`` measures both arms once, baseline first in even blocks and
candidate first in odd ones, so four blocks run ``A B | B A | A B | B A``. A
slow drift of the host (thermal, page cache, a neighbour) then hits both arms
alike and cancels in the per-block ratios, instead of favouring whichever arm
ran second. Every raw sample is kept with its block, arm, position and times.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from harness import progress
from harness.bench.arms import ArmHandle, ArmSpec, Sample, started_arms
from harness.errors import BenchError

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

    def __post_init__(self) -> None:
        if self.blocks < 1:
            msg = f"expected at least 1 block, found blocks={self.blocks}; use 4 or more for an interval"
            raise BenchError(msg)
        if self.pn < 1 or self.gn < 1:
            msg = f"expected positive prompt/generation lengths, found pn={self.pn} gn={self.gn}"
            raise BenchError(msg)
        if not self.concurrency or min(self.concurrency) < 1 or len(set(self.concurrency)) != len(self.concurrency):
            msg = f"expected distinct positive concurrency levels, found {self.concurrency!r}; e.g. 1,4"
            raise BenchError(msg)

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "concurrency": list(self.concurrency),
                "order": [role for _, role in block_order(self.blocks)]}


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

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": self.config.as_dict(),
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
                             warmup=bool(cfg.get("warmup", True)))
        arms = {role: ArmSpec(kind=a["kind"], name=a["name"], options=dict(a.get("options", {})))
                for role, a in data["arms"].items()}
        return cls(
            name=str(data["name"]), config=config, arms=arms,
            describe={role: dict(a.get("describe", {})) for role, a in data["arms"].items()},
            samples=tuple(Sample.from_dict(s) for s in data["samples"]),
            started_at=float(data["started_at"]), finished_at=float(data["finished_at"]),
            warmup_s={k: float(v) for k, v in data.get("warmup_s", {}).items()},
            isolated=bool(data.get("isolated", True)), aa=bool(data.get("aa", False)),
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
) -> BenchResult:
    """Run ``a`` (baseline) against ``b`` (candidate) in ABBA blocks.

    :param isolate: one spawned worker process per arm (the default); ``False``
        creates the arms in this process, which is only for tests.
    :param extra_plugins: module names registered on the worker's plugin manager
        in addition to the built-ins (an arm kind from a not-yet-installed plugin).
    :param on_sample: called with each raw sample as it is taken.
    """
    config = config or BenchConfig()
    specs = {"A": a, "B": b}
    run_name = name or (f"aa-{a.kind}" if aa else f"{a.kind}-vs-{b.kind}")
    started = time.time()
    samples: list[Sample] = []
    warmup_s: dict[str, float] = {}
    turns = block_order(config.blocks)
    total = len(turns) * len(config.concurrency)
    with started_arms(specs, isolate=isolate, extra_plugins=extra_plugins) as arms, \
            _steps(f"bench {run_name}", total) as step:
        describe = {role: h.describe() for role, h in arms.items()}
        if config.warmup:
            for role in ROLES:
                step(f"warm-up {role} ({specs[role].name})", False)
                t0 = time.perf_counter()
                arms[role].warmup()
                warmup_s[role] = time.perf_counter() - t0
        for sequence, (block, role) in enumerate(turns):
            position = sequence % 2
            for c in config.concurrency:
                step(f"block {block + 1}/{config.blocks} {role} c={c}", True)
                sample = _take(arms[role], block=block, position=position, sequence=sequence,
                               concurrency=c, config=config)
                samples.append(sample)
                if on_sample is not None:
                    on_sample(sample)
    return BenchResult(name=run_name, config=config, arms=specs, describe=describe,
                       samples=tuple(samples), started_at=started, finished_at=time.time(),
                       warmup_s=warmup_s, isolated=isolate, aa=aa)


def _take(arm: ArmHandle, *, block: int, position: int, sequence: int, concurrency: int,
          config: BenchConfig) -> Sample:
    r = arm.measure(config.pn, config.gn, concurrency)
    metrics = dict(r["metrics"])
    return Sample(
        arm=arm.role, block=block, position=position, sequence=sequence, concurrency=concurrency,
        pn=config.pn, gn=config.gn,
        ttft_s=metrics.pop("ttft_s"), decode_tps=metrics.pop("decode_tps"),
        aggregate_tps=metrics.pop("aggregate_tps"),
        peak_rss_bytes=int(r["peak_rss_bytes"]), started_at=float(r["started_at"]),
        finished_at=float(r["finished_at"]), extra=metrics,
    )


@contextmanager
def _steps(title: str, total: int) -> Iterator[Callable[[str, bool], None]]:
    """A progress bar over measurements; ``step(text, advance)`` marks the next one starting."""
    if not progress.enabled():
        progress.info(f"{title}: {total} measurements ...")
        yield lambda text, advance: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=progress.console, transient=True) as p:
        task = p.add_task(title, total=total)
        started = [False]

        def step(text: str, advance: bool) -> None:
            # advance when the *next* measurement starts, so the bar counts finished ones
            if advance and started[0]:
                p.advance(task)
            started[0] = started[0] or advance
            p.update(task, description=f"{title}: {text}")

        yield step
