"""The benchmark of the benchmark: how often does ``--fail-on-slower`` cry wolf, and how often does it see?

    python scripts/bench_error_rates.py [--model PATH] [--runs 20] [--slowdown 3] [--gate 2]
                                        [--blocks 6] [--pn 128] [--gn 64] [--out DIR]

Runs, alternately, ``--runs`` A/A comparisons (the binding against itself: any FAILED is a false
alarm) and ``--runs`` power comparisons (the binding against the binding slowed by a real,
calibrated ``--slowdown`` percent: each FAILED is a detection) of decode at concurrency 1, each a
full ``harness bench`` run (fresh worker processes per block, ABBA, the gate's three verdicts).

The slowdown is real: the engine sleeps ``token_delay_us`` after every generating step, on the
thread that decodes, calibrated first as ``slowdown`` percent of this host's measured time per
token, so B's decode speed is ``1 - slowdown/100`` of A's. The output table (false alarms out of
N, detections out of N, undecided counts, half-widths, wall-clock per comparison) is what
``--fail-on-slower`` can promise at this shape and budget; results.json and report.md go to
``--out`` (default ``reports/<time>-bench-error-rates``). Run it on a quiet host.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def calibrate(model: str, pn: int, gn: int, threads: int, slowdown_pct: float) -> dict[str, float]:
    """Seconds per generated token on this host (median of 3 after a warm-up) -> the delay for ``slowdown_pct``."""
    from harness_plugins.llamacpp.bench import BackendArm

    arm = BackendArm({"model": model, "threads": threads, "max_num_seqs": 1, "n_ctx": pn + gn + 64, "variant": "cpu"})
    try:
        arm.warmup()
        arm.measure(pn, gn, 1)
        tps = statistics.median(arm.measure(pn, gn, 1)["decode_tps"] for _ in range(3))
    finally:
        arm.close()
    token_s = 1.0 / tps
    # B's speed = (1 - s) x A's  <=>  B's time per token = A's / (1 - s)
    delay_s = token_s * (1.0 / (1.0 - slowdown_pct / 100.0) - 1.0)
    return {"decode_tps": tps, "token_ms": 1000 * token_s, "delay_us": round(delay_s * 1e6)}


def one_run(a: str, b: str, *, blocks: int, pn: int, gn: int, gate: float) -> dict[str, Any]:
    from harness.bench.abba import BenchConfig, run_abba
    from harness.bench.arms import ArmSpec
    from harness.bench.gate import evaluate, resolve_gate
    from harness.bench.stats import analyze

    config = BenchConfig(blocks=blocks, pn=pn, gn=gn, concurrency=(1,))
    t0 = time.perf_counter()
    result = run_abba(ArmSpec.parse(a), ArmSpec.parse(b), config, name="error-rates")
    wall = time.perf_counter() - t0
    analysis = analyze(result.samples)
    check = evaluate(resolve_gate({"decode": gate}, (1,)), analysis, pn).checks[0]
    iv = check.speed
    assert iv is not None and iv.lo is not None and iv.hi is not None
    return {"status": check.status, "ratio": iv.point, "lo": iv.lo, "hi": iv.hi,
            "halfwidth_pct": check.halfwidth_pct, "wall_s": wall, "blocks": result.blocks_run}


def table(rows: list[dict[str, Any]], runs: int, gate: float, slowdown: float) -> list[str]:
    def count(kind: str, status: str) -> int:
        return sum(1 for r in rows if r["kind"] == kind and r["status"] == status)

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["kind"] == kind)

    done = {k: sum(1 for r in rows if r["kind"] == k) for k in ("aa", "power")}
    return [
        "| comparison | runs | FAILED | undecided | passed | median ratio | median ±% | median wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        f"| A/A (no difference): false alarms | {done['aa']} | **{count('aa', 'FAILED')}** | {count('aa', 'undecided')} | "
        f"{count('aa', 'passed')} | {med('aa', 'ratio'):.4f} | {med('aa', 'halfwidth_pct'):.2f} | {med('aa', 'wall_s'):.0f} |",
        f"| B {slowdown:g}% slower: detections | {done['power']} | **{count('power', 'FAILED')}** | "
        f"{count('power', 'undecided')} | {count('power', 'passed')} | {med('power', 'ratio'):.4f} | "
        f"{med('power', 'halfwidth_pct'):.2f} | {med('power', 'wall_s'):.0f} |",
        "",
        f"gate: `--fail-on-slower decode={gate:g}`; targets: at most 1 of {runs} A/A runs FAILED, at least "
        f"{runs - 1} of {runs} {slowdown:g}% slowdowns FAILED.",
    ]


@contextlib.contextmanager
def _locked(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    import fcntl

    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=os.environ.get("HARNESS_BANDWIDTH_MODEL"),
                   help="GGUF model (default: $HARNESS_BANDWIDTH_MODEL; `eval \"$(harness models env)\"`)")
    p.add_argument("--runs", type=int, default=20, help="A/A runs and power runs, each (default: 20)")
    p.add_argument("--slowdown", type=float, default=3.0, help="B's real slowdown in the power runs, percent")
    p.add_argument("--gate", type=float, default=2.0, help="--fail-on-slower decode=PCT (default: 2)")
    p.add_argument("--blocks", type=int, default=6, help="ABBA blocks per comparison (default: 6)")
    p.add_argument("--pn", type=int, default=128)
    p.add_argument("--gn", type=int, default=64)
    p.add_argument("--threads", type=int, default=None, help="default: the host's physical cores")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--lock", type=Path, default=None,
                   help="hold this lock file (flock) during each comparison, so other heavy work on a shared "
                   "host runs between comparisons, never during one")
    args = p.parse_args()
    if not args.model:
        p.error("no model: pass --model or set HARNESS_BANDWIDTH_MODEL (eval \"$(harness models env)\")")
    from harness.core.host import resolve_threads

    threads = args.threads or resolve_threads(None)[0]
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    with _locked(args.lock):
        cal = calibrate(args.model, args.pn, args.gn, threads, args.slowdown)
    print(f"calibration: {cal['decode_tps']:.2f} tok/s, {cal['token_ms']:.2f} ms/token -> token_delay_us="
          f"{cal['delay_us']} for {args.slowdown:g}% slower", flush=True)
    base = f"in-process:model={args.model},variant=cpu,threads={threads},max_num_seqs=1,n_ctx={args.pn + args.gn + 64}"
    slow = f"{base},token_delay_us={cal['delay_us']},name=slowed"
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    for i in range(args.runs):  # alternate, so a drift of the host hits both kinds alike
        for kind, b in (("aa", base), ("power", slow)):
            with _locked(args.lock):
                load = os.getloadavg()[0]
                r = {"kind": kind, "run": i, "load_1min_before": load,
                     **one_run(base, b, blocks=args.blocks, pn=args.pn, gn=args.gn, gate=args.gate)}
            rows.append(r)
            print(json.dumps(r), flush=True)
    load_after = os.getloadavg()
    out = args.out or Path("reports") / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-bench-error-rates")
    out.mkdir(parents=True, exist_ok=True)
    doc = {"model": args.model, "runs": args.runs, "slowdown_pct": args.slowdown, "gate_pct": args.gate,
           "blocks": args.blocks, "pn": args.pn, "gn": args.gn, "threads": threads, "calibration": cal,
           "load_before": load_before, "load_after": load_after, "wall_s": time.time() - t0, "rows": rows,
           "command": " ".join([os.path.basename(sys.executable), *sys.argv])}
    (out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [f"# --fail-on-slower error rates: {Path(args.model).name}, p{args.pn} g{args.gn}, {args.blocks} blocks, "
             f"{threads} threads", "", *table(rows, args.runs, args.gate, args.slowdown), "",
             f"calibration: {cal['decode_tps']:.2f} tok/s ({cal['token_ms']:.2f} ms/token); B sleeps "
             f"{cal['delay_us']} us per generating step", f"load average before {load_before}, after {load_after}; "
             f"study wall-clock {doc['wall_s'] / 60:.1f} min", f"command: `{doc['command']}`"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
