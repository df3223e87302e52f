"""How close the engine's memory estimate (``harness inspect memory``, ``Runtime.estimate_memory``) is
to what a load really takes on the CPU: per model and context size, the host row's need (weights + KV
cache + compute) against the process's peak resident memory over the load and one full batch.

    python scripts/memory_accuracy.py [--out DIR] [--variant cpu]

Each (model, n_ctx) runs in a fresh process: it imports the binding and resolves the load (the
baseline, ``VmRSS``), estimates, loads, prefills one ``n_batch`` of tokens (every compute buffer
used) and generates a few, then reads ``VmHWM`` (the peak). The measured figure is peak minus
baseline: what the load added. Models: the registry's chat model (SmolLM2-135M Q4_1), the bandwidth
model (a random 0.7B llama, Q4_0: its weights repacked for the CPU's kernels) and the embedding model
(all-MiniLM-L6-v2, f16), each at three context sizes. Writes ``memory-accuracy.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_CHILD = r"""
import json, os, sys
from harness_plugins.llamacpp.engine import prepare, Engine

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)

model, n_ctx, variant, embed = sys.argv[1], int(sys.argv[2]), sys.argv[3] or None, sys.argv[4] == "1"
args = {"n_ctx": n_ctx, "max_num_seqs": 1, "embeddings": embed}
path, cand, module, params = prepare(model, variant, None, dict(args))
plan = module.estimate_memory(str(path), params)
base = status("VmRSS")
eng = Engine.load(model, variant=variant, **args)
n = min(512, n_ctx - 16)
if embed:
    eng.embed(["word " * (n - 2)])
else:
    v = int(eng.info()["n_vocab"])
    eng.complete([1 + i % (v - 1) for i in range(n)], max_tokens=8, temperature=0.0, ignore_eos=True)
peak = status("VmHWM")
after = {k: status(k) for k in ("VmRSS", "RssAnon", "RssFile")}
print(json.dumps({"plan": plan, "baseline": base, "peak": peak, "after": after, "tokens": n, "variant": cand.variant,
                  "info": {k: v for k, v in eng.info().items() if k in ("desc", "n_ctx", "cpu_variant", "kv_cache_type")}}))
eng.close()
"""


def _models() -> list[tuple[str, str, list[int], bool]]:
    env = os.environ
    out = []
    for key, label, ctxs, embed in (("HARNESS_CHAT_MODEL", "SmolLM2-135M Q4_1", [512, 2048, 8192], False),
                                    ("HARNESS_BANDWIDTH_MODEL", "random llama 0.7B Q4_0", [512, 2048, 4096], False),
                                    ("HARNESS_EMBED_MODEL", "all-MiniLM-L6-v2 f16 (embeddings)", [128, 256, 512],
                                     True)):
        if not env.get(key):
            sys.exit(f"{key} is not set: run `eval \"$(harness models env)\"` after `harness models fetch`")
        out.append((env[key], label, ctxs, embed))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path("reports") / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-memory-accuracy")
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for model, label, ctxs, embed in _models():
        for n_ctx in ctxs:
            r = subprocess.run([sys.executable, "-c", _CHILD, model, str(n_ctx), args.variant, "1" if embed else "0"],
                               capture_output=True, text=True, check=False, env={**os.environ, "HARNESS_NO_PROGRESS": "1"})
            if r.returncode != 0:
                sys.exit(f"{label} n_ctx {n_ctx}: {r.stderr[-2000:]}")
            d = json.loads(r.stdout.strip().splitlines()[-1])
            host = d["plan"]["rows"][-1]
            need = sum(int(host.get(k, 0)) for k in ("weights", "repacked", "kv_cache", "compute", "outputs", "vocabulary"))
            measured = d["peak"] - d["baseline"]
            row = {"model": label, "n_ctx": n_ctx, "tokens": d["tokens"], "weights": host["weights"],
                   "repacked": host["repacked"], "outputs": host["outputs"], "vocabulary": host["vocabulary"],
                   "kv_cache": host["kv_cache"], "compute": host["compute"], "estimate": need, "measured": measured,
                   "baseline": d["baseline"], "peak": d["peak"], "after": d["after"],
                   "resident": d["after"]["VmRSS"] - d["baseline"], "error": need / measured - 1, "variant": d["variant"],
                   "cpu_level": d["info"].get("cpu_variant")}
            rows.append(row)
            print(f"{label:38s} n_ctx {n_ctx:5d}: estimate {need / 2**20:8.1f} MiB, measured {measured / 2**20:8.1f} MiB "
                  f"({row['error']:+.1%}); resident after {row['resident'] / 2**20:8.1f} MiB "
                  f"(anon {d['after']['RssAnon'] / 2**20:.1f}, file {d['after']['RssFile'] / 2**20:.1f})", flush=True)
    load_after = os.getloadavg()
    worst = max(abs(r["error"]) for r in rows)
    doc = {"rows": rows, "worst_abs_error": worst, "load_before": load_before, "load_after": load_after,
           "cpu": platform.processor() or platform.machine(), "command": " ".join(["python", *sys.argv])}
    (out / "memory-accuracy.json").write_text(json.dumps(doc, indent=1) + "\n")
    mib = 1 << 20
    lines = ["# Memory estimate against peak RSS (CPU)", "",
             "Estimate: the host row of the engine's estimate (llama.cpp's metadata-only dry run). Measured: the "
             "process's peak resident memory (VmHWM) after the load, one prefill of `tokens` and 8 generated, minus "
             "its resident memory before the load.", "",
             "| model | n_ctx | weights MiB | repacked MiB | KV MiB | compute MiB | outputs MiB | vocabulary MiB | estimate MiB "
             "| measured MiB | error |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['n_ctx']} | {r['weights'] / mib:.1f} | {r['repacked'] / mib:.1f} | {r['kv_cache'] / mib:.1f} | "
              f"{r['compute'] / mib:.1f} | {r['outputs'] / mib:.1f} | {r['vocabulary'] / mib:.1f} | {r['estimate'] / mib:.1f} | {r['measured'] / mib:.1f} | {r['error']:+.1%} |"
              for r in rows]
    lines += ["", f"Worst |error| {worst:.1%}. Load average {load_before[0]:.2f} before, {load_after[0]:.2f} after.", "",
              f"    {doc['command']}", ""]
    (out / "memory-accuracy.md").write_text("\n".join(lines))
    print(f"worst |error| {worst:.1%}; {out}/memory-accuracy.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
