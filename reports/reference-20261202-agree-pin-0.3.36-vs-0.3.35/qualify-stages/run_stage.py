"""Qualification's pin-move stages alone (old-pin-abi, old-pin-agreement), as `harness qualify --old-pin 0.3.35`
runs them, and the PR material (qualify.md) rendered from their results."""
import os
import sys
import time
from pathlib import Path

from harness.build import pipeline
from harness.core import host as hostmod
from harness.engine.descriptor import load_engine
from harness.engine.plugin import make_manager
from harness.qualify import Qualification
from harness.qualify.bench_plan import BenchPlan
from harness.qualify.context import Built, Models, QualifyContext, QualifyOptions
from harness.qualify.report import render_markdown
from harness.qualify.stages import abi, agreement


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    engine = load_engine("llamacpp")
    host = hostmod.probe()
    ctx = QualifyContext(engine=engine, pm=make_manager(), host=host, plan=BenchPlan(threads=2), report=out,
                         options=QualifyOptions(old_pin="0.3.35"))
    ctx = ctx.with_product("patch", pipeline.patched_tree(engine)).with_product("build", Built(variants=("cpu",)))
    ctx = ctx.with_product("models", Models(env={"HARNESS_CHAT_MODEL": os.environ["HARNESS_CHAT_MODEL"]}))
    q = Qualification(engine="llamacpp")
    t0 = time.perf_counter()
    q.run("old-pin-abi", lambda: abi.old_pin(ctx))
    q.run("old-pin-agreement", lambda: agreement.old_pin(ctx))
    for s in q.stages:
        print(s.name, s.status, round(s.seconds, 1), s.summary)
    md = render_markdown({"engine": "llamacpp", "pin": engine.pin, "upstream": engine.upstream,
                          "host": {"os": host.os, "arch": host.arch, "cpu_model": host.cpu_model,
                                   "microarch": host.microarch, "cores": host.cores, "memory_bytes": host.memory_bytes},
                          "started_at": "stage-only run", "passed": q.passed,
                          "stages": [{"name": s.name, "status": s.status, "seconds": s.seconds, "summary": s.summary,
                                      "data": s.data} for s in q.stages]})
    (out / "qualify.md").write_text(md)
    print(f"{time.perf_counter() - t0:.0f} s; passed={q.passed}")


if __name__ == "__main__":
    main()
