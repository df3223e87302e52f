"""The e2e stage: the engine's e2e spec files on every row the build stage built by default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.qualify.context import Built, Models, QualifyContext
from harness.qualify.result import SkippedStage, StageResult


def e2e(ctx: QualifyContext) -> StageResult:
    """Each spec file in a process of its own, per row: a crash names its signal, spec and CPU
    level, and the other files' results are kept."""
    from harness.core import paths
    from harness.engine import registry

    engine = ctx.engine
    impl = registry.engines(ctx.pm).get(engine.name)
    specs = [str(p) for p in impl.e2e_specs()] if impl is not None and impl.e2e_specs else []
    if not specs:
        raise SkippedStage(f"no plugin lists e2e specs for {engine.name}")
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant
    from harness.qualify.e2e import run_specs

    model_env = ctx.product("models", Models).env
    per: dict[str, Any] = {}
    failed = []
    for v in ctx.product("build", Built).variants:
        env = {**os.environ, **model_env, "HARNESS_NO_PROGRESS": "1",
               "HARNESS_ARTIFACT": str(artifact_dir(engine, get_variant(v)))}
        res = run_specs([Path(p) for p in specs], pytest_args=["-q", "--variant", v], env=env,
                        cwd=paths.project_root())
        per[v] = {"passed": res.passed, "failures": len(res.failed), "errors": 0, "skipped": res.skipped,
                  "failed_tests": res.failed, "crashes": res.crashes, "files": res.as_dict()["files"]}
        if not res.ok:
            failed.append(v)
    if failed:
        msg = "e2e failures on " + ", ".join(
            f"{v} ({per[v]['failures']} failed: {'; '.join(per[v]['failed_tests'])}"
            + (f"; crashed: {'; '.join(per[v]['crashes'])}" if per[v]["crashes"] else "") + ")" for v in failed)
        raise HarnessError(msg)
    return StageResult("; ".join(f"{v}: {c.get('passed')} passed, {c.get('skipped')} skipped"
                                 for v, c in per.items()), {"variants": per})
