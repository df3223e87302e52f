"""The e2e stage: the engine's e2e spec files on every row the build stage built by default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.qualify.context import Built, Models, QualifyContext
from harness.qualify.result import SkippedStage, StageResult

#: The marker of specs that measure this harness's own instruments rather than the engine's pin (the
#: bench runner's A/A, the agreement gate's power on a deliberately broken kernel). Qualification
#: deselects them: its own stages are those instruments, run on the pin; the test command runs them.
SELFTEST = "harness_selftest"


def e2e(ctx: QualifyContext) -> StageResult:
    """Each spec file in a process of its own, per row: a crash names its signal, spec and CPU
    level, and the other files' results are kept. Specs marked ``harness_selftest`` are deselected
    (named in the result, with the reason). An untrusted engine folder's specs are skipped, with what
    ``harness e2e NAME`` refuses them with."""
    from harness.core import paths
    from harness.engine import registry
    from harness.engine.trust import untrusted_specs

    engine = ctx.engine
    # the check `harness e2e NAME` makes: an untrusted folder's specs are code, and so are the specs its
    # plugin would list (a plugin of another distribution's, under the same name, runs them against what
    # the untrusted recipe built)
    if (why := untrusted_specs(engine.name, engine.root)) is not None:
        raise SkippedStage(why)
    impl = registry.engines(ctx.pm).get(engine.name)
    # the engine folder's e2e/ (engines/<name>/e2e/), unless its plugin lists specs of its own
    # (an engine installed from another distribution keeps them in its package)
    found = impl.e2e_specs() if impl is not None and impl.e2e_specs else sorted((engine.root / "e2e").glob("test_*.py"))
    specs = [str(p) for p in found]
    if not specs:
        raise SkippedStage(f"no e2e specs for {engine.name}: none in {engine.root / 'e2e'} and none from its plugin")
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant
    from harness.qualify.e2e import run_specs

    model_env = ctx.product("models", Models).env
    per: dict[str, Any] = {}
    failed = []
    for v in ctx.product("build", Built).variants:
        env = {**os.environ, **model_env, "HARNESS_NO_PROGRESS": "1",
               "HARNESS_ARTIFACT": str(artifact_dir(engine, get_variant(v)))}
        res = run_specs([Path(p) for p in specs], pytest_args=["-q", "--variant", v, "-m", f"not {SELFTEST}"], env=env,
                        cwd=paths.project_root())
        per[v] = {"passed": res.passed, "failures": len(res.failed), "errors": 0, "skipped": res.skipped,
                  "deselected": res.deselected,
                  "failed_tests": res.failed, "crashes": res.crashes, "files": res.as_dict()["files"]}
        if not res.ok:
            failed.append(v)
    if failed:
        msg = "e2e failures on " + ", ".join(
            f"{v} ({per[v]['failures']} failed: {'; '.join(per[v]['failed_tests'])}"
            + (f"; crashed: {'; '.join(per[v]['crashes'])}" if per[v]["crashes"] else "") + ")" for v in failed)
        raise HarnessError(msg)
    summary = "; ".join(f"{v}: {c.get('passed')} passed, {c.get('skipped')} skipped" for v, c in per.items())
    deselected = max((c["deselected"] for c in per.values()), default=0)
    if deselected:
        summary += (f"; {deselected} harness self-tests deselected (marker {SELFTEST}: they measure the "
                    "harness's instruments, not the pin; the test command runs them)")
    return StageResult(summary, {"variants": per, "deselected_marker": SELFTEST})
