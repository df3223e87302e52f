"""Variant backend ``vulkan``: glslc + Vulkan headers; lavapipe gives a CPU device to run on."""

from __future__ import annotations

from harness.matrix import generic_reasons, version_at_least
from harness.plugin import hookimpl
from harness.types import Buildability, HostInfo, Variant


@hookimpl
def harness_variant_requirements(variant: Variant, host: HostInfo) -> Buildability | None:
    if variant.backend != "vulkan":
        return None
    reasons = generic_reasons(variant, host)
    notes = []
    minimum = str(variant.extra.get("vulkan_headers_min", "1.3"))
    if host.vulkan_headers is None:
        reasons.append("Vulkan headers not found (libvulkan-dev): bash scripts/install-system-deps.sh --vulkan")
    elif not version_at_least(host.vulkan_headers, minimum):
        reasons.append(f"Vulkan headers {host.vulkan_headers} found, the pinned ggml-vulkan needs >= {minimum}")
    devices = [g for g in host.gpus if g.api == "vulkan"]
    if not devices:
        notes.append("no Vulkan device: compile-only (mesa-vulkan-drivers provides lavapipe)")
    elif all("CPU" in g.device_type.upper() for g in devices):
        notes.append("only CPU Vulkan devices (lavapipe): run with GGML_VK_VISIBLE_DEVICES=0")
    return Buildability(variant=variant.name, buildable=not reasons, runnable=bool(devices) and not reasons,
                        reasons=tuple(reasons), notes=tuple(notes))

