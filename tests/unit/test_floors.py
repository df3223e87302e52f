"""The packages of ``harness/`` stand on floors, and imports run down (or along) them, not up.

Floor 0 is what everything uses (``core``), floor 1 how engines and plugins plug in (``engine``),
floor 2 the data the stages share and the sandbox's room (``sandbox``: bubblewrap and the confined
accessor build, binding and abi use; ``families``: the video family table, the video bounds and the
canvas, which both ``config`` and ``video`` read, so neither has to import the other for them),
floor 3 the pipeline's stages and tools (each its own package: they may use one another), floor 4
qualification, which drives them all, floor 5 the command line, floor 6 the plugins
(``harness_plugins``: engines and the rest, which the core reaches only through the registry and
hooks). An import from a lower floor to
a higher one (``core`` asking ``build``, a stage asking ``qualify``, anything asking ``cli``) is a
climb back up: :data:`CLIMBS` lists the ones accepted, each with its reason (the issue allows one),
so the list only shrinks. The graph is the one ``test_import_cycles`` reads (module level,
function level and ``TYPE_CHECKING`` imports alike).
"""

from __future__ import annotations

from tests.unit.test_import_cycles import graph

FLOORS: dict[str, int] = {
    "harness": 0, "harness.core": 0,
    "harness.engine": 1,
    # below config and video, which both read it
    "harness.families": 2,
    # the sandbox and its confined accessor: build, binding and abi stand on it (DESIGN: the sandbox's edge)
    "harness.sandbox": 2,
    **{f"harness.{p}": 3 for p in ("source", "abi", "build", "binding", "audit", "models", "config", "runtime",
                                   "video", "bench", "agree", "serve", "pin")},
    "harness.qualify": 4,
    # drives the stages as qualify does (fetch, build, simulation, e2e runs) over one commit at a time
    "harness.bisect": 4,
    "harness.cli": 5, "harness.__main__": 5,
    # the plugins stand on the core: any harness module that imports one climbs
    "harness_plugins": 6,
}
#: (importer, imported) pairs that climb a floor, accepted with a reason. None today.
CLIMBS: dict[tuple[str, str], str] = {}


def floor_of(module: str) -> int | None:
    while module:
        if module in FLOORS:
            return FLOORS[module]
        module = module.rpartition(".")[0]
    return None


def test_every_package_has_a_floor() -> None:
    unplaced = sorted(m for m in graph() if m.startswith("harness") and floor_of(m) is None)
    assert not unplaced, f"modules of no floor (add their package to FLOORS): {unplaced}"


def test_no_import_climbs_a_floor() -> None:
    edges = graph()
    climbs = sorted((a, b) for a, targets in edges.items() for b in targets
                    if (floor_of(b) or 0) > (floor_of(a) or 0) and (a, b) not in CLIMBS)
    assert not climbs, ("imports that climb back up a floor (move what both need down, or pass it in):\n  "
                        + "\n  ".join(f"{a} (floor {floor_of(a)}) -> {b} (floor {floor_of(b)})" for a, b in climbs))
    assert len(CLIMBS) <= 1, "at most one accepted climb"


def test_the_floors_see_a_climb() -> None:
    assert floor_of("harness.core.errors") == 0 and floor_of("harness.cli.build") == 5
    assert floor_of("harness.build.pipeline") == 3 and floor_of("harness.qualify.runner") == 4
    assert floor_of("harness_plugins.llamacpp.engine") == 6
    # the family data sits below both of its readers
    assert floor_of("harness.families.table") == 2
    assert floor_of("harness.config.model") == floor_of("harness.video.target") == 3
