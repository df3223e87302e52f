"""An earlier round's AMX stall, put back in a test build of the binding: which check catches it.

    python scripts/stall_study.py --model $HARNESS_MODEL [--blocks 6] [--out DIR]

The stall (engines/llamacpp/binding/src/engine.h, above ``init``): the model was loaded on the Python
thread, whose load-time AMX weight repack opened an OpenMP team; decode then ran on the engine
thread's team. With two teams in the process libgomp counts more threads than CPUs and throttles its
spinning, and the decode team's hand-offs sleep on a futex: decode at a quarter of llama-bench's speed
on that AMX host. The fix: one engine thread loads and computes, as llama-bench does.

The test build puts the cause back on any CPU, AMX or not: right after the load, the calling thread
decodes one token on a second context with the engine's thread count, so ggml's CPU backend opens an
OpenMP team there, whose pool threads live as long as the process (a load-time repack does the same).
Decode keeps running on the engine thread's team, now the second in the process.

Three instruments, each asked whether it sees the stalled build:

- **the threading check** (``engines/llamacpp/e2e/test_engine_ceiling.py::test_one_openmp_team``, run by
  qualify's e2e stage): the threads that loading and decoding add to the process must be the engine
  thread plus its pool of n_threads - 1. Counted for the base and the stalled build;
- **wall-clock, the ceiling's instrument**: ABBA of llama-bench (A) against each build (B) on the same
  artifact and level, one stream, ``--blocks`` blocks, the ceiling's 3% floor;
- **simulation**: blind to it by construction (Valgrind runs one thread at a time and counts no
  waiting); not run here.

Writes ``<out>/stall-study.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _injection  # scripts/_injection.py (scripts/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parents[1]
#: the end of Engine::Engine: the engine thread has loaded the model and runs its loop
ANCHOR = ("    try {\n        loaded.get();\n    } catch (...) {\n        worker_.join();\n        free_all();\n"
          "        throw;\n    }\n")
STALL = """    {  // TEST ONLY (scripts/stall_study.py): a second OpenMP team, on the calling thread
        auto cp = llama_context_default_params();
        cp.n_ctx = 64;
        cp.n_batch = 8;
        cp.n_threads = cp.n_threads_batch = params_.n_threads > 0 ? params_.n_threads : 2;
        llama_context * second = llama_init_from_model(model_, cp);
        if (second) {
            llama_token t = llama_vocab_bos(llama_model_get_vocab(model_));
            if (t < 0) t = 0;
            llama_decode(second, llama_batch_get_one(&t, 1));
            llama_free(second);
        }
    }
"""


def thread_count(model: str, threads: int, env: dict[str, str]) -> dict[str, Any]:
    """The threading check's own child (test_engine_ceiling.CHILD): threads added by load + decode."""
    sys.path.insert(0, str(ROOT))
    from tests.e2e.llamacpp.test_engine_ceiling import CHILD

    r = subprocess.run([sys.executable, "-c", CHILD, model, str(threads)], capture_output=True, text=True,
                       timeout=600, check=False, env=env)
    if r.returncode != 0:
        raise SystemExit(f"the thread-count child failed:\n{r.stderr[-3000:]}")
    facts = json.loads(r.stdout.strip().splitlines()[-1])
    facts["caught"] = facts["new_threads"] != threads
    return facts


def ceiling_pair(model: str, threads: int, b_opts: dict[str, Any], name: str, blocks: int, out: Path) -> dict[str, Any]:
    """llama-bench (A) against one build (B) at the ceiling's shape and 3% floor, wall-clock."""
    from harness.bench.abba import BenchConfig
    from harness.bench.arms import ArmSpec, prepare_options
    from harness.bench.session import run_and_report
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant
    from harness.engine import registry
    from harness.engine.descriptor import load_engine

    engine = load_engine(_injection.ENGINE)
    kind = registry.get(engine.name).old_pin_bench_arm
    assert kind is not None
    common = {"model": model, "threads": threads, "variant": "cpu", "engine": engine.name}
    artifact = str(artifact_dir(engine, get_variant("cpu")))
    a_opts = prepare_options(kind, {**common, "artifact": artifact}) or {**common, "artifact": artifact}
    a = ArmSpec(kind=kind, name=kind, options=a_opts)
    b = ArmSpec(kind="in-process", name=name, options={"model": model, "threads": threads, "n_ctx": 512,
                                                        "max_num_seqs": 1, "variant": "cpu", **b_opts})
    config = BenchConfig(blocks=blocks, pn=128, gn=128, concurrency=(1,))
    outcome = run_and_report(a, b, config, name=f"stall-study-{name}", out=out, host={}, host_measure=None,
                             gate={"prefill": 3.0, "decode": 3.0})
    row: dict[str, Any] = {"report": str(outcome.files.markdown.parent)}
    for h in outcome.headline:  # B/A as speeds (prefill: prompt tokens per second), > 1: B faster
        if h.speed is not None:
            row[h.label] = {"ratio": h.speed.point, "lo": h.speed.lo, "hi": h.speed.hi, "verdict": h.verdict,
                            "a_tok_s": h.a, "b_tok_s": h.b, "caught": h.speed.hi is not None and h.speed.hi < 0.97}
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the ceiling's model (SmolLM2-135M Q4_1: $HARNESS_MODEL)")
    p.add_argument("--threads", type=int, default=2, help="threads per arm (default 2)")
    p.add_argument("--blocks", type=int, default=6, help="ABBA blocks per wall-clock pair (default 6)")
    p.add_argument("--out", type=Path, default=None, help="report dir (default reports/<stamp>-stall-study)")
    args = p.parse_args(argv)

    from harness.core import paths, progress

    out = (args.out or paths.reports_dir() / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-stall-study").resolve()
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    progress.info("building the stalled binding (a second OpenMP team on the calling thread) ...")
    stalled = _injection.injected_binding(paths.cache_root() / "stall-study", "stall", ANCHOR, STALL)
    stalled_env = {**os.environ, "HARNESS_ENGINES_PATH": stalled["_engines_path"],
                   "HARNESS_BINDING_PATH": stalled["_binding_path"]}
    doc: dict[str, Any] = {"threads": args.threads, "blocks": args.blocks, "cpu": _cpu_model(),
                           "builds": {}}
    for name, env, opts in (("base", dict(os.environ), {}), ("stalled", stalled_env, stalled)):
        progress.info(f"{name}: thread count, then llama-bench against it ({args.blocks} ABBA blocks) ...")
        doc["builds"][name] = {"threading_check": thread_count(args.model, args.threads, env),
                               "wall_clock": ceiling_pair(args.model, args.threads, opts, f"binding-{name}",
                                                          args.blocks, out / name)}
    doc["load_before"], doc["load_after"] = load_before, os.getloadavg()
    (out / "stall-study.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = ["# The AMX stall, reintroduced: which instrument catches it", "",
          f"`python scripts/stall_study.py --model SmolLM2-135M-Instruct.Q4_1.gguf --blocks {args.blocks}`; "
          f"{doc['cpu']}, {os.cpu_count()} CPUs, {args.threads} threads; load average "
          f"{load_before[0]:.2f} before, {doc['load_after'][0]:.2f} after.", "",
          "| build | threads added by load + decode (expected " + str(args.threads) + ") | threading check | "
          "prefill vs llama-bench | decode vs llama-bench | wall-clock ceiling (3% floor) |", "|---|---|---|---|---|---|"]
    for name, b in doc["builds"].items():
        t, w = b["threading_check"], b["wall_clock"]

        def cell(key: str, w: dict[str, Any] = w) -> str:
            m = next((v for k, v in w.items() if k.startswith(key)), None)
            if m is None:
                return "-"
            return f"{m['ratio']:.3f}x [{m['lo']:.3f}, {m['hi']:.3f}]"
        wall = [k.split(" @")[0] for k, v in w.items() if isinstance(v, dict) and v.get("caught")]
        md.append(f"| {name} | {t['new_threads']} | {'caught' if t['caught'] else 'passes'} | {cell('prefill')} | "
                  f"{cell('decode')} | {'caught on ' + ', '.join(wall) if wall else 'not caught'} |")
    md += ["", "Caught by the wall-clock ceiling means the whole 95% interval lies below 0.97x. Simulation is "
           "blind to this regression by construction (one thread under Valgrind, no waiting counted)."]
    (out / "stall-study.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
