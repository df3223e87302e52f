"""An engine descriptor's ``qualify:`` section, typed, with every default in one place.

``engines/<name>/engine.yaml`` says what ``harness qualify`` runs beyond the common stages; the schema
(``harness/schemas/engine.schema.json``) checks its shape when the descriptor loads, and
:func:`qualify_settings` reads it into :class:`QualifySettings`. The stages read these fields, never
the raw mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.core.types import EngineSpec

#: The binding must reach this share of the engine's own benchmark tool, prefill and decode.
CEILING_MIN_RATIO = 0.97
#: Adaptive wall-clock blocks: stop at this half-width (percent), or at ``MAX_BLOCKS``.
UNTIL_HALFWIDTH = 3.0
MAX_BLOCKS = 12
#: Blocks of a fixed run; the fewest blocks of an adaptive one.
BLOCKS = 4
#: Each adaptive bench stage's wall-clock budget (seconds). Code-path gates are decided by
#: simulation; wall-clock runs beside it for what simulation cannot see, and stops early when the
#: host's noise makes the gate unreachable within the budget.
BUDGET_S = 240.0
#: The instruments a qualification measures with.
INSTRUMENTS: tuple[str, ...] = ("walltime", "simulation")
#: The bench model when the descriptor names none.
BENCH_MODELS: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BenchShape:
    """A wall-clock bench shape: ``pn`` prompt tokens, ``gn`` generated tokens per request."""

    pn: int = 512
    gn: int = 128


#: The wall-clock shape of a bench model the descriptor gives none for.
BENCH_SHAPE = BenchShape()


@dataclass(frozen=True, kw_only=True)
class SimShape:
    """Simulation run lengths: prompts ``p1``/``p2``, generations ``g1``/``g2`` (tokens)."""

    p1: int
    p2: int
    g1: int
    g2: int
    repeats: int = 1
    """More runs of every shape (:attr:`harness.bench.simulation.SimPlan.repeats`)."""


@dataclass(frozen=True, kw_only=True)
class BenchSettings:
    """``qualify.bench``."""

    models: tuple[str, ...] = BENCH_MODELS
    """Fixture model names (``engines/<name>/fixtures.yaml``), one ceiling and one bench stage each
    (none: no bench stages)."""
    fail_on_slower: Any = None
    """The gate, as ``--fail-on-slower`` takes it (percent, or ``selector=percent`` strings)."""
    until_halfwidth: float | None = UNTIL_HALFWIDTH
    """None: fixed blocks (the descriptor wrote 0)."""
    max_blocks: int = MAX_BLOCKS
    blocks: int = BLOCKS
    budget_s: float | None = BUDGET_S
    instruments: tuple[str, ...] = INSTRUMENTS
    simulation: Mapping[str, SimShape] | None = None
    """Model variable -> run lengths; None when the descriptor says nothing (the first bench model is
    then simulated at the instrument's default lengths)."""
    shapes: Mapping[str, BenchShape] = field(default_factory=dict)
    """Model variable -> its wall-clock shape; a model not named runs :data:`BENCH_SHAPE`."""


@dataclass(frozen=True, kw_only=True)
class QualifySettings:
    """``qualify:`` of an engine descriptor."""

    cross_variant: bool = False
    """Run the cross-variant stage (every installed variant and CPU level, greedy, and agreement)."""
    bench_peer: str | None = None
    """The peer baseline's bench arm kind, or None: no peer bench stages."""
    ceiling_min_ratio: float = CEILING_MIN_RATIO
    agreement: Mapping[str, Any] = field(default_factory=dict)
    """``qualify.agreement`` (window, tokens, thresholds: :mod:`harness.agree.thresholds` reads it);
    empty: no agreement stages."""
    cross_engine: Mapping[str, Any] | None = None
    """``qualify.cross_engine`` (``peer``, ``peer_model``, ...), or None."""
    bench: BenchSettings = field(default_factory=BenchSettings)


def qualify_settings(engine: EngineSpec) -> QualifySettings:
    """The descriptor's ``qualify:`` section with the defaults above."""
    raw: Mapping[str, Any] = engine.raw.get("qualify") or {}
    b: Mapping[str, Any] = raw.get("bench") or {}
    width = b.get("until_halfwidth", UNTIL_HALFWIDTH)
    sims = b.get("simulation")
    bench = BenchSettings(
        models=tuple(str(m) for m in b.get("models") or BENCH_MODELS),
        fail_on_slower=b.get("fail_on_slower"),
        until_halfwidth=float(width) if width else None,
        max_blocks=int(b.get("max_blocks", MAX_BLOCKS)),
        blocks=int(b.get("blocks", BLOCKS)),
        budget_s=float(b.get("budget_s", BUDGET_S)) or None,
        instruments=tuple(str(i) for i in b.get("instruments") or INSTRUMENTS),
        simulation=None if sims is None else {
            str(k): SimShape(p1=int(v["p1"]), p2=int(v["p2"]), g1=int(v["g1"]), g2=int(v["g2"]),
                              repeats=int(v.get("repeats", 1)))
            for k, v in sims.items()},
        shapes={str(k): BenchShape(pn=int(v.get("pn", BENCH_SHAPE.pn)), gn=int(v.get("gn", BENCH_SHAPE.gn)))
                for k, v in (b.get("shapes") or {}).items()},
    )
    ceiling: Mapping[str, Any] = raw.get("ceiling") or {}
    cross_engine = raw.get("cross_engine")
    return QualifySettings(
        cross_variant=bool(raw.get("cross_variant", False)),
        bench_peer=str(raw["bench_peer"]) if raw.get("bench_peer") else None,
        ceiling_min_ratio=float(ceiling.get("min_ratio", CEILING_MIN_RATIO)),
        agreement=dict(raw.get("agreement") or {}),
        cross_engine=dict(cross_engine) if isinstance(cross_engine, Mapping) else None,
        bench=bench,
    )
