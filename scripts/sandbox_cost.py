"""What the build sandbox costs, measured as a benchmark (never a timed test): cold builds of one
matrix row, ABBA-interleaved, in the bubblewrap sandbox (A) and on the host (B, ``--no-sandbox``).

    python scripts/sandbox_cost.py [--engine llamacpp] [--variant cpu] [--blocks 1] [--out DIR]

Every build is cold: its build dir removed first and ccache off (``CCACHE_DISABLE=1``), so each
one compiles every unit; the source and patched tree are fetched once before (not timed). A block
is A B B A; the figure is the mean of the B/A ratios of the pairs (sandbox cost = A/B - 1), with
every run's seconds, the load average before and after each run, and the CPU model in
``<out>/sandbox-cost.json`` and ``.md``. Run it on a quiet host: a figure taken while anything else
compiles or tests is not evidence.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _harness(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "harness", *argv], env=env, capture_output=True, text=True,
                          check=False)


def _one(engine: str, variant: str, sandbox: bool, env: dict[str, str]) -> dict[str, object]:
    from harness.core import paths

    for build in (paths.work_dir()).glob("*/build"):
        shutil.rmtree(build)  # cold: nothing of an earlier configure or compile
    run_env = {**env, "CCACHE_DISABLE": "1", "HARNESS_NO_PROGRESS": "1"}
    if not sandbox:
        run_env["HARNESS_NO_SANDBOX"] = "1"
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    r = _harness("build", engine, "--variant", variant, "--force", "--json", env=run_env)
    wall = time.perf_counter() - t0
    if r.returncode:
        sys.exit(f"build failed (exit {r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    manifest = json.loads((Path(json.loads(r.stdout)[0]["artifact"]) / "manifest.json").read_text())
    if manifest.get("sandbox") != ("bubblewrap" if sandbox else None):
        sys.exit(f"expected sandbox={sandbox}, the manifest says {manifest.get('sandbox')!r}")
    return {"sandbox": sandbox, "seconds": round(wall, 1), "build_seconds": manifest.get("build_seconds"),
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", default="llamacpp")
    p.add_argument("--variant", default="cpu")
    p.add_argument("--blocks", type=int, default=1, help="ABBA blocks (default 1: four cold builds)")
    p.add_argument("--out", type=Path, default=None, help="report dir (default reports/<stamp>-sandbox-cost)")
    args = p.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = (args.out or root / "reports" / f"{stamp}-sandbox-cost").resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    r = _harness("patch", args.engine, env=env)  # fetch + patch once, untimed
    if r.returncode:
        sys.exit(f"harness patch {args.engine} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    runs = []
    for block in range(args.blocks):
        for sandbox in (True, False, False, True):
            run = _one(args.engine, args.variant, sandbox, env)
            run["block"] = block
            runs.append(run)
            print(json.dumps(run), flush=True)
    ratios = []  # sandboxed / host, per A-B pair of each block (A B | B A)
    for b in range(args.blocks):
        a1, b1, b2, a2 = (float(str(x["seconds"])) for x in runs[4 * b: 4 * b + 4])
        ratios += [a1 / b1, a2 / b2]
    result = {"engine": args.engine, "variant": args.variant, "cpu": _cpu(), "cores": os.cpu_count(), "runs": runs,
              "ratios_sandbox_over_host": [round(x, 4) for x in ratios],
              "cost_percent": round(100 * (statistics.mean(ratios) - 1), 2)}
    (out / "sandbox-cost.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# Sandbox cost: cold {args.engine} {args.variant} builds, ABBA", "",
             f"Host: {result['cpu']}, {result['cores']} cores. Each build cold (build dir removed, CCACHE_DISABLE=1).", "",
             "| block | sandbox | seconds | load before | load after |", "|---|---|---|---|---|"]
    lines += [f"| {x['block']} | {'bubblewrap' if x['sandbox'] else 'host'} | {x['seconds']} | {x['load_before']} | "
              f"{x['load_after']} |" for x in runs]
    lines += ["", f"Sandboxed / host per pair: {', '.join(f'{x:.4f}' for x in ratios)}; "
              f"cost {result['cost_percent']:+.2f}% (mean of the pairs)."]
    (out / "sandbox-cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
