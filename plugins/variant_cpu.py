"""Variant backend ``cpu``: the portable run-time-dispatched build and ``cpu-native``."""

from __future__ import annotations

from harness.matrix import generic_reasons
from harness.plugin import hookimpl
from harness.types import Buildability, EngineSpec, HostInfo, Variant


@hookimpl
def harness_variant_requirements(variant: Variant, host: HostInfo) -> Buildability | None:
    if variant.backend != "cpu":
        return None
    reasons = generic_reasons(variant, host)
    notes = []
    if variant.defines.get("GGML_NATIVE") == "ON":
        notes.append(f"tuned for this host ({host.microarch}); not portable")
    if not host.tool("ccache").found:
        notes.append("ccache not found: cold builds every time (bash scripts/install-system-deps.sh)")
    return Buildability(variant=variant.name, buildable=not reasons, runnable=not reasons,
                        reasons=tuple(reasons), notes=tuple(notes))


@hookimpl
def harness_variant_configure(engine: EngineSpec, variant: Variant, host: HostInfo) -> dict[str, str] | None:
    if variant.backend != "cpu":
        return None
    # Metal is on by default on macOS; a CPU row must not pick it up silently.
    return {"GGML_METAL": "OFF"} if host.os == "darwin" else {}
