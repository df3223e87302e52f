"""Variant platform ``metal``: macOS arm64 only; shaders embedded in the library."""

from __future__ import annotations

from harness.core.types import Buildability, HostInfo, Variant
from harness.engine.plugin import hookimpl


@hookimpl
def harness_variant_requirements(variant: Variant, host: HostInfo) -> Buildability | None:
    from harness.build.matrix import generic_reasons
    if variant.platform != "metal":
        return None
    reasons = generic_reasons(variant, host)
    return Buildability(variant=variant.name, buildable=not reasons, runnable=not reasons, reasons=tuple(reasons))
