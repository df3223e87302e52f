"""How qualify benchmarks: shape, stopping rule, gate, threads and the bench models.

What the bench stages run comes from the engine descriptor's ``qualify.bench`` section (bench
models, gate, adaptive blocks), overridden by the command line; threads default to the host's
physical cores. The plan is made before any stage runs, so a typo in a gate fails in seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.bench.abba import BenchConfig
from harness.bench.gate import parse_gate, resolve_gate
from harness.bench.simulation import INSTRUMENTS, SimPlan
from harness.core.errors import UsageError
from harness.core.types import EngineSpec
from harness.engine import qualify_settings as qs

#: The defaults live with the descriptor's typed ``qualify:`` section (harness.engine.qualify_settings).
UNTIL_HALFWIDTH, MAX_BLOCKS, BUDGET_S, DEFAULT_INSTRUMENTS = (qs.UNTIL_HALFWIDTH, qs.MAX_BLOCKS, qs.BUDGET_S,
                                                              qs.INSTRUMENTS)


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """How qualify benchmarks: shape, stopping rule, gate, threads and the models."""

    blocks: int = 4
    """Blocks of a fixed run; the fewest blocks of an adaptive one."""
    pn: int = 512
    gn: int = 128
    concurrency: tuple[int, ...] = (1, 4)
    until_halfwidth: float | None = UNTIL_HALFWIDTH
    max_blocks: int | None = MAX_BLOCKS
    budget_s: float | None = BUDGET_S
    """Wall-clock budget of each adaptive bench stage, seconds."""
    gate: dict[str, float] = field(default_factory=dict)
    """Selector -> percent slower that fails the stage (``--fail-on-slower``)."""
    threads: int = 1
    threads_source: str = ""
    models: tuple[str, ...] = ()
    """Fixture model names (``engines/<name>/fixtures.yaml``), one ceiling and one bench stage each."""
    """Model environment variables (from ``harness models``), one bench stage each."""
    instruments: tuple[str, ...] = DEFAULT_INSTRUMENTS
    """``walltime``, ``simulation``, ``counters``: what the bench stages measure with."""
    sim: dict[str, SimPlan] = field(default_factory=dict)
    """Model variable -> the simulation's run lengths (``qualify.bench.simulation``); a model not named
    is not simulated (a bandwidth-bound model: simulation's cache model says nothing of DRAM bandwidth,
    and its runs cost minutes per token under Valgrind)."""

    shapes: dict[str, qs.BenchShape] = field(default_factory=dict)
    """Model variable -> the shape of its wall-clock runs (``qualify.bench.shapes``), unless the command
    line gave --pn/--gn; a model not named runs ``pn``/``gn``."""

    def sim_plan(self, fixture: str) -> SimPlan | None:
        return self.sim.get(fixture)

    def for_model(self, fixture: str) -> BenchPlan:
        """This plan at the wall-clock shape of the bench model ``fixture``."""
        if fixture not in self.shapes:
            return self
        shape = self.shapes[fixture]
        return dataclasses.replace(self, pn=shape.pn, gn=shape.gn)

    def config(self, concurrency: tuple[int, ...] | None = None) -> BenchConfig:
        return BenchConfig(blocks=self.blocks, pn=self.pn, gn=self.gn, concurrency=concurrency or self.concurrency,
                           until_halfwidth=self.until_halfwidth,
                           max_blocks=self.max_blocks if self.until_halfwidth is not None else None,
                           max_seconds=self.budget_s if self.until_halfwidth is not None else None,
                           stop_when_futile=self.until_halfwidth is not None)

    def as_dict(self) -> dict[str, Any]:
        return {"instruments": list(self.instruments), "simulation": {k: v.as_dict() for k, v in self.sim.items()},
                "blocks": self.blocks, "pn": self.pn, "gn": self.gn, "concurrency": list(self.concurrency),
                "until_halfwidth": self.until_halfwidth, "max_blocks": self.max_blocks, "budget_s": self.budget_s, "gate": dict(self.gate),
                "threads": self.threads, "threads_source": self.threads_source, "models": list(self.models),
                "shapes": {k: dataclasses.asdict(v) for k, v in self.shapes.items()}}


def bench_plan(engine: EngineSpec, *, blocks: int | None = None, pn: int | None = None, gn: int | None = None,
               concurrency: tuple[int, ...] = (1, 4), until_halfwidth: float | None = None,
               max_blocks: int | None = None, fail_on_slower: Sequence[str] | None = None,
               threads: int | None = None, instruments: Sequence[str] | None = None) -> BenchPlan:
    """The plan from the descriptor's ``qualify.bench`` and the command line (which wins).

    ``until_halfwidth=0`` turns adaptive blocks off (``blocks`` is then the fixed count). ``pn``/``gn``
    given: every model's shape; None: the descriptor's ``qualify.bench.shapes`` per model, else 512/128.
    """
    from harness.core.host import resolve_threads

    raw = qs.qualify_settings(engine).bench
    width = until_halfwidth if until_halfwidth is not None else raw.until_halfwidth
    gate = parse_gate(fail_on_slower) if fail_on_slower else parse_gate(raw.fail_on_slower)
    resolve_gate(gate, concurrency)  # a typo fails before the build, not after it
    n_threads, source = resolve_threads(threads)
    models = raw.models  # none: the engine has no bench stages
    _check_fixtures(engine, (*models, *raw.shapes, *(raw.simulation or {})))
    chosen = tuple(instruments) if instruments else raw.instruments
    unknown = [i for i in chosen if i not in INSTRUMENTS]
    if unknown or ("walltime" not in chosen and "simulation" not in chosen):
        msg = (f"expected instruments from {', '.join(INSTRUMENTS)} including walltime or simulation, found "
               f"{', '.join(chosen)}; e.g. --instrument walltime,simulation")
        raise UsageError(msg)
    if raw.simulation is None:  # a descriptor that says nothing: the first bench model
        sims = {models[0]: SIM_DEFAULT} if models else {}
    else:
        sims = {k: SimPlan(p1=v.p1, p2=v.p2, g1=v.g1, g2=v.g2, repeats=v.repeats) for k, v in raw.simulation.items()}
    shapes = {} if pn is not None or gn is not None else dict(raw.shapes)
    return BenchPlan(instruments=chosen, sim=sims, shapes=shapes,
                     blocks=blocks or raw.blocks, pn=qs.BENCH_SHAPE.pn if pn is None else pn,
                     gn=qs.BENCH_SHAPE.gn if gn is None else gn, concurrency=concurrency,
                     until_halfwidth=float(width) if width else None,
                     max_blocks=max_blocks or raw.max_blocks, gate=gate, budget_s=raw.budget_s,
                     threads=n_threads, threads_source=source, models=models)


def _check_fixtures(engine: EngineSpec, names: Sequence[str]) -> None:
    """Every fixture the descriptor's ``qualify.bench`` names is pinned somewhere (a typo fails before the build)."""
    from harness.core.errors import did_you_mean
    from harness.models.fixtures import load_fixtures

    known = load_fixtures().fixtures
    for name in names:
        if name not in known:
            msg = (f"{engine.name}'s qualify.bench names fixture model {name!r}, which no engine folder's "
                   f"fixtures.yaml pins{did_you_mean(name, known)} (`harness models list` lists them)")
            raise UsageError(msg)


#: The simulation's run lengths for a model the descriptor gives none for.
SIM_DEFAULT = SimPlan()


def stage_name(fixture: str, index: int) -> str:
    """The bench stage of the ``index``-th bench model: ``bench`` for the first, ``bench-<fixture>`` for
    the others (``bandwidth``: ``bench-bandwidth``)."""
    return "bench" if index == 0 else f"bench-{fixture}"


def ceiling_stage_name(fixture: str, index: int) -> str:
    """``ceiling`` for the first bench model, ``ceiling-<fixture>`` for the others."""
    return stage_name(fixture, index).replace("bench", "ceiling", 1)
