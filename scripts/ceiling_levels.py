"""The binding against llama-bench at every CPU level this host runs: a table for a pull request.

    python scripts/ceiling_levels.py [--model PATH ...] [--pn 512] [--gn 128] [--reps 3] [--levels a,b]

Per level, in the order A B B A (llama-bench, binding, binding, llama-bench), each run a fresh
process: llama-bench on a view of the cpu artifact holding only that level's library, the binding
with HARNESS_CPU_LEVEL set. Prefill is pN tokens from an empty cache (llama-bench -p N -n 0), decode
gN tokens after the pN-token prompt (-p 0 -n N -d pN); each figure is the median of --reps.
A level this CPU cannot run is reported as such. Quick figures, not an ABBA interval: qualify's
engine-ceiling stage (harness bench) is the gate. Run it on a quiet host; load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

#: The binding's arm in a process of its own, with the level forced (the runtime reads it at load).
CHILD = """
import json, sys
from harness_plugins.llamacpp.bench import BindingArm
model, pn, gn, reps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
arm = BindingArm({"model": model, "threads": threads, "n_ctx": pn + gn + 64, "max_num_seqs": 1, "variant": "cpu"})
arm.warmup()
runs = [arm.measure(pn, gn, 1) for _ in range(reps)]
print(json.dumps({"level": arm.describe()["cpu_variant"], "runs": runs}))
arm.close()
"""


def tool(artifact: Path, model: str, level: str, pn: int, gn: int, reps: int, threads: int) -> tuple[float, float]:
    """(prefill, decode) tok/s of llama-bench at ``level``: the bench arm, medians of ``reps``."""
    from harness_plugins.llamacpp.bench import LlamaBenchArm

    arm = LlamaBenchArm({"artifact": str(artifact), "model": model, "threads": threads, "level": level})
    runs = [arm.measure(pn, gn, 1) for _ in range(reps)]
    return statistics.median(r["prefill_tps"] for r in runs), statistics.median(r["decode_tps"] for r in runs)


def binding(model: str, level: str, pn: int, gn: int, reps: int, threads: int) -> tuple[float, float]:
    """(prefill, decode) tok/s of the binding's bench arm with ``level`` forced, medians of ``reps``."""
    env = {**os.environ, "HARNESS_CPU_LEVEL": level}
    r = subprocess.run([sys.executable, "-c", CHILD, model, str(pn), str(gn), str(reps), str(threads)],
                       capture_output=True, text=True, env=env, check=True, timeout=3600)
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["level"] == level, d
    return (statistics.median(x["prefill_tps"] for x in d["runs"]),
            statistics.median(x["decode_tps"] for x in d["runs"]))


def main() -> int:
    from harness.core import paths
    from harness.core.errors import HarnessError
    from harness.runtime import levels

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="GGUF (default: $HARNESS_MODEL and $HARNESS_BANDWIDTH_MODEL)")
    ap.add_argument("--artifact", type=Path, default=paths.artifacts_dir() / "llamacpp-0.3.36-cpu")
    ap.add_argument("--pn", type=int, default=512)
    ap.add_argument("--gn", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", help="comma-separated (default: every level of the artifact)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args()
    models = a.model or [m for m in (os.environ.get("HARNESS_MODEL"), os.environ.get("HARNESS_BANDWIDTH_MODEL")) if m]
    lib = a.artifact / "lib"
    wanted = a.levels.split(",") if a.levels else levels.cpu_levels(lib)
    rows = []
    print(f"load average before: {os.getloadavg()}", flush=True)
    print("| model | level | llama-bench pp | binding pp | ratio | llama-bench tg | binding tg | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for model in models:
        for level in wanted:
            try:
                pp_a1, tg_a1 = tool(a.artifact, model, level, a.pn, a.gn, a.reps, a.threads)
            except HarnessError as e:
                print(f"| {Path(model).name} | {level} | cannot run here ({e}) ||||||", flush=True)
                continue
            pp_b1, tg_b1 = binding(model, level, a.pn, a.gn, a.reps, a.threads)
            pp_b2, tg_b2 = binding(model, level, a.pn, a.gn, a.reps, a.threads)
            pp_a2, tg_a2 = tool(a.artifact, model, level, a.pn, a.gn, a.reps, a.threads)
            pa, pb = (pp_a1 + pp_a2) / 2, (pp_b1 + pp_b2) / 2
            ta, tb = (tg_a1 + tg_a2) / 2, (tg_b1 + tg_b2) / 2
            rows.append({"model": Path(model).name, "level": level, "pp_a": pa, "pp_b": pb, "tg_a": ta, "tg_b": tb})
            print(f"| {Path(model).name} | {level} | {pa:.1f} | {pb:.1f} | {pb / pa:.3f} | {ta:.1f} | {tb:.1f} | "
                  f"{tb / ta:.3f} |", flush=True)
    print(f"load average after: {os.getloadavg()}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
