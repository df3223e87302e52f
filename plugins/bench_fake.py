"""Bench arm ``fake``: deterministic computed timings for tests and dry runs."""

from __future__ import annotations

from typing import Any

from harness.engine.plugin import hookimpl


@hookimpl
def harness_bench_arm_kinds() -> list[str]:
    return ["fake"]


@hookimpl
def harness_bench_arm(kind: str, options: dict[str, Any]) -> Any | None:
    if kind != "fake":
        return None
    from harness.bench.fake import FakeArm

    return FakeArm(options)
