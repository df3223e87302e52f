"""Variant backend ``metal``: macOS arm64 only; shaders embedded in the library."""

from __future__ import annotations

from harness.matrix import generic_reasons
from harness.plugin import hookimpl
from harness.types import Buildability, HostInfo, Variant


@hookimpl
def harness_variant_requirements(variant: Variant, host: HostInfo) -> Buildability | None:
    if variant.backend != "metal":
        return None
    reasons = generic_reasons(variant, host)
    return Buildability(variant=variant.name, buildable=not reasons, runnable=not reasons, reasons=tuple(reasons))
