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
    from harness_plugins.llamacpp.bench import BindingArm

    arm = BindingArm({"model": model, "threads": threads, "max_num_seqs": 1, "n_ctx": pn + gn + 64, "variant": "cpu"})
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


def scaling(rows: list[dict[str, Any]], *, blocks: int, slowdown: float, gate: float) -> list[str]:
    """What the measured spread means for other block counts: the per-block spread of the B/A ratio
    from the A/A runs' half-widths (half-width = t(0.975, n-1) x sd / sqrt(n)), then the blocks a
    comparison needs for 95% power against a ``slowdown`` % regression at a ``gate`` % gate (the
    whole interval below 1 - gate/100 in 95% of runs: t(0.975) x se + 1.645 x se <= slowdown - gate)."""
    from scipy import stats

    aa = sorted(r["halfwidth_pct"] for r in rows if r["kind"] == "aa")
    if not aa:
        return []
    hw = statistics.median(aa)
    sd_block = hw * blocks ** 0.5 / float(stats.t.ppf(0.975, blocks - 1))
    per_block_s = statistics.median(r["wall_s"] for r in rows) / blocks
    margin = slowdown - gate  # percent between the true ratio and the gate's floor
    need = blocks
    while need < 100_000:
        se = sd_block / need ** 0.5
        if float(stats.t.ppf(0.975, need - 1)) * se + 1.645 * se <= margin:
            break
        need += 2
    lines = [f"Scaling (from the A/A runs' median 95% half-width ±{hw:.2f}% at {blocks} blocks): the B/A ratio of "
             f"one block (one fresh process per arm) varies by sd {sd_block:.2f}%; a block costs {per_block_s:.1f} s "
             "here.", "", "| blocks | expected 95% half-width | wall-clock per comparison |", "|---:|---:|---:|"]
    for n in sorted({blocks, 2 * blocks, 4 * blocks, need}):
        width = float(stats.t.ppf(0.975, n - 1)) * sd_block / n ** 0.5
        lines.append(f"| {n} | ±{width:.2f}% | {n * per_block_s / 60:.1f} min |")
    lines += ["", f"For 95% power against a real {slowdown:g}% slowdown at a {gate:g}% gate a comparison needs about "
              f"**{need} blocks ({need * per_block_s / 60:.0f} min)** at this shape on this host; a {gate:g}% gate "
              f"passes a clean run only when the half-width is under {gate:g}%."]
    return lines


def render(doc: dict[str, Any]) -> list[str]:
    rows = doc["rows"]
    cal = doc["calibration"]
    return [f"# --fail-on-slower error rates: {Path(doc['model']).name}, p{doc['pn']} g{doc['gn']}, {doc['blocks']} "
            f"blocks, {doc['threads']} threads", "", *table(rows, doc["runs"], doc["gate_pct"], doc["slowdown_pct"]), "",
            f"calibration: {cal['decode_tps']:.2f} tok/s ({cal['token_ms']:.2f} ms/token); B sleeps "
            f"{cal['delay_us']} us per generating step", "",
            *scaling(rows, blocks=doc["blocks"], slowdown=doc["slowdown_pct"], gate=doc["gate_pct"]), "",
            f"load average before {doc['load_before']}, after {doc['load_after']}; study wall-clock "
            f"{doc['wall_s'] / 60:.1f} min", f"command: `{doc['command']}`", "",
            "Per comparison (kind, run, verdict, B/A decode ratio, 95% half-width, wall s, 1-min load before):", "",
            *(f"- {r['kind']} {r['run']}: {r['status']}, {r['ratio']:.4f}, ±{r['halfwidth_pct']:.2f}%, "
              f"{r['wall_s']:.0f} s, load {r['load_1min_before']:.2f}" for r in rows)]


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
    p.add_argument("--render", type=Path, default=None, metavar="RESULTS_JSON",
                   help="only re-render report.md beside an earlier run's results.json")
    args = p.parse_args()
    if args.render is not None:
        lines = render(json.loads(args.render.read_text()))
        (args.render.parent / "report.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return 0
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
    lines = render(doc)
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
