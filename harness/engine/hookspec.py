"""Hook specifications: what many plugins contribute to at once.

Names follow ``harness_<phase>_<verb>``. Hooks marked ``firstresult`` are
"choose one" hooks: they stop at the first non-None result. What one engine provides
(model matching, config rules, e2e specs, video) is not a hook: it is a field of the
:class:`~harness.engine.interface.EngineImpl` the engine registers, looked up by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from harness.core.types import (
        Buildability,
        CpuLevel,
        EngineSpec,
        HostInfo,
        SourceSpec,
        SourceTree,
        Variant,
    )
    from harness.engine.interface import EngineImpl

hookspec = pluggy.HookspecMarker("harness")


# -------------------------------------------------------------------------
# engines
# -------------------------------------------------------------------------


@hookspec
def harness_engine_register() -> list[EngineImpl]:
    """The engines this plugin provides, as objects the core looks up by name.

    The core never compares engine names: it asks :mod:`harness.engine.registry` for an engine
    and calls what the engine provides (load, match models, config rules, e2e specs, video,
    probe model, fixtures, cross-variant check). Engine names come from here alone.
    """


# -------------------------------------------------------------------------
# source
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def harness_source_fetch(
    engine: str, spec: SourceSpec, cache_dir: Path
) -> SourceTree | None:
    """Fetch and verify a pinned source into the cache. Stops at first non-None result.

    :param engine: engine name, for messages.
    :param spec: the ``source:`` entry of the engine descriptor.
    :param cache_dir: the content-addressed source cache root.
    """


@hookspec
def harness_source_kinds() -> list[str]:
    """Source kinds (``source.kind`` values) this plugin fetches."""


# -------------------------------------------------------------------------
# variants
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def harness_variant_requirements(
    variant: Variant, host: HostInfo
) -> Buildability | None:
    """Check a matrix row against the host. Stops at first non-None result.

    The plugin owning ``variant.platform`` answers.
    """


@hookspec
def harness_variant_configure(
    engine: EngineSpec, variant: Variant, host: HostInfo
) -> dict[str, str] | None:
    """Extra CMake cache entries for a variant on this host (merged in plugin order)."""


# -------------------------------------------------------------------------
# artifacts and binding
# -------------------------------------------------------------------------


@hookspec
def harness_artifact_manifest(
    engine: EngineSpec, variant: Variant, manifest: dict[str, Any]
) -> dict[str, Any] | None:
    """Extra fields for an artifact's ``manifest.json``."""


@hookspec(firstresult=True)
def harness_artifact_usable(
    manifest: dict[str, Any], host: HostInfo
) -> tuple[bool, list[str]] | None:
    """Whether an installed artifact runs on this host, with notes: ``(usable, notes)``; when it
    does not, the notes say why. Stops at first non-None result.

    The plugin owning the manifest's ``platform`` answers (CUDA: the GPUs' compute capability
    against the artifact's arch list; Vulkan: a device, and the shaders glslc could compile).
    The core checks only what every artifact has (its OS, a cross target).
    """


@hookspec(firstresult=True)
def harness_artifact_cpu_levels(tree: Path, arch: str) -> list[CpuLevel] | None:
    """The CPU levels a portable build of ``tree`` produces for ``arch``, as its source defines them.

    Each level names its library and the ISA features the loader checks before it picks
    that level (read from the pinned source, never from a hand-copied table). The static
    ISA audit compares them with what each library's instructions need. Stops at first
    non-None result.

    :param tree: the patched source tree of the pin.
    :param arch: ``x86_64`` or ``aarch64``.
    """


# -------------------------------------------------------------------------
# bench
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def harness_bench_arm(kind: str, options: dict[str, Any]) -> Any | None:
    """Create a benchmark arm of ``kind`` that belongs to no engine (the built-in ``fake``; a test's own).
    An engine's arms are its ``EngineImpl.bench_arms``, asked first. Stops at first non-None result."""


@hookspec
def harness_bench_arm_kinds() -> list[str]:
    """The arm kinds this plugin's ``harness_bench_arm`` creates: ``harness bench`` refuses an unknown
    kind before it measures anything (a plugin that does not say disables the check)."""


@hookspec(firstresult=True)
def harness_sim_target(kind: str, options: dict[str, Any]) -> Any | None:
    """For an engine-free arm kind (an engine's are ``BenchArmKind.sim_target``): the simulation instrument's target for an arm of ``kind`` (:class:`harness.bench.simulation.SimTarget`:
    a command running one request, one thread, at ``options["level"]`` when given), or None when this
    plugin cannot simulate that kind. Stops at first non-None result."""


@hookspec(firstresult=True)
def harness_bench_arm_prepare(kind: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """For an engine-free arm kind (an engine's are ``BenchArmKind.prepare``): prepare an arm in the parent process before its worker starts (e.g. build the artifact it
    runs, with progress shown); return the options the worker gets. Stops at first non-None result."""
