"""The one value every qualification stage gets: the engine, the host, the options, and what
earlier stages handed on.

The context is frozen: a stage reads it and returns a :class:`~harness.qualify.result.StageResult`;
the runner makes the next context with that stage's ``product`` added (:meth:`with_product`).
A later stage asks for a product by the producing stage's name and its type
(:meth:`product`); declaring the producer in ``needs`` makes the stage run only after it passed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from harness.core.errors import HarnessError

if TYPE_CHECKING:
    import pluggy

    from harness.core.types import EngineSpec, HostInfo
    from harness.qualify.bench_plan import BenchPlan

T = TypeVar("T")

#: Why the old-pin stages are skipped when the command line names no old pin.
NO_OLD_PIN = "no old pin given (--old-pin VERSION or --old-rev GITREV)"


@dataclass(frozen=True, kw_only=True)
class QualifyOptions:
    """What the command line chose beyond the bench plan."""

    run_bench: bool = True
    """False: the bench and ceiling stages are skipped (``--no-bench``)."""
    old_pin: str | None = None
    """The pin this one replaces (``--old-pin``): the ABI diff and old-vs-new bench stages run."""
    old_rev: str | None = None
    """Like ``old_pin``, naming a commit or branch of the recipe (``--old-rev``)."""
    variant: str | None = None
    """Matrix rows to build and test (fnmatch, comma-separated); None: the default rows."""
    arch: tuple[str, ...] | None = None
    """Architectures whose cross-built rows run under emulation; None: every one this host can."""


@dataclass(frozen=True, kw_only=True)
class Built:
    """The build stage's product: the rows it built."""

    variants: tuple[str, ...]
    """The default rows (or those ``--variant`` chose): the e2e specs run on these."""
    runnable_extra: tuple[str, ...] = ()
    """Rows marked ``extra.qualify: runnable`` (vulkan on lavapipe): given a binding too."""


@dataclass(frozen=True, kw_only=True)
class Models:
    """The models stage's product: the fixture models' environment variables."""

    env: Mapping[str, str]

    def path(self, fixture: str) -> str | None:
        """Where the fixture model named ``fixture`` is (its ``HARNESS_MODEL_<NAME>``), or None."""
        from harness.models.fixtures import fixture_var

        return self.env.get(fixture_var(fixture))


@dataclass(frozen=True, kw_only=True)
class QualifyContext:
    """Everything a stage reads; frozen (a stage's output is its result's ``product``)."""

    engine: EngineSpec
    pm: pluggy.PluginManager
    host: HostInfo
    plan: BenchPlan
    report: Path
    """The qualification's report directory."""
    options: QualifyOptions = field(default_factory=QualifyOptions)
    products: Mapping[str, object] = field(default_factory=dict)
    """Stage name -> what it handed on; only stages that passed are here."""

    def product(self, stage: str, kind: type[T]) -> T:
        """What ``stage`` handed on, checked to be a ``kind``."""
        value = self.products.get(stage)
        if not isinstance(value, kind):  # a needs= entry naming the producer makes this unreachable
            msg = (f"stage {stage} has not handed on a {kind.__name__} (got {type(value).__name__}); "
                   f"a stage that reads it must list {stage!r} in its needs")
            raise HarnessError(msg)
        return value

    def with_product(self, stage: str, value: object) -> QualifyContext:
        return dataclasses.replace(self, products={**self.products, stage: value})
