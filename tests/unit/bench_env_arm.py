"""Bench arm ``env-probe`` (a test plugin): the fake arm, describing the environment its worker
process started with.

Read from ``os.environ``, not ``/proc/self/environ``: glibc's tunables parser cuts the original
``GLIBC_TUNABLES`` string there at each ``:`` (it writes NULs into it) after copying it into the
environment the process then uses.
"""

from __future__ import annotations

import os
from typing import Any

from harness.engine.plugin import hookimpl

KEYS = ("GLIBC_TUNABLES", "HARNESS_MALLOC_HUGETLB")


@hookimpl
def harness_bench_arm(kind: str, options: dict[str, Any]) -> Any | None:
    if kind != "env-probe":
        return None
    from harness.bench.fake import FakeArm

    class EnvArm(FakeArm):
        def describe(self) -> dict[str, Any]:
            return {**super().describe(), "environ": {k: os.environ.get(k) for k in KEYS}, "pid": os.getpid()}

    return EnvArm(options)
