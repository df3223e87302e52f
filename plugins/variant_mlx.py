"""Variant platform ``mlx``: Metal plus the MLX GEMM provider from a pinned ``mlx`` wheel."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from harness.core.types import Buildability, HostInfo, Variant
from harness.engine.plugin import hookimpl


def mlx_wheel_problems(variant: Variant) -> list[str]:
    """Check the installed ``mlx`` wheel against the pinned version and required files."""
    pinned = str(variant.extra.get("mlx_wheel", ""))
    try:
        dist = importlib.metadata.distribution("mlx")
    except importlib.metadata.PackageNotFoundError:
        return [f"mlx wheel not installed: pip install mlx=={pinned}"]
    problems = []
    if pinned and dist.version != pinned:
        problems.append(f"mlx {dist.version} installed, the pin couples MLX to mlx=={pinned}")
    root = Path(str(dist.locate_file("mlx")))
    for rel in variant.extra.get("mlx_required_files", []):
        if not (root / rel).exists():
            problems.append(f"mlx wheel lacks {rel}")
    return problems


@hookimpl
def harness_variant_requirements(variant: Variant, host: HostInfo) -> Buildability | None:
    from harness.build.matrix import generic_reasons
    if variant.platform != "mlx":
        return None
    reasons = generic_reasons(variant, host)
    if not reasons:
        reasons += mlx_wheel_problems(variant)
    return Buildability(variant=variant.name, buildable=not reasons, runnable=not reasons, reasons=tuple(reasons))
