"""The binding loads and runs the model the way the engine's own benchmark tool does.

An AMX host once ran the binding's decode at a quarter of llama-bench's speed on the same
artifact: the model was loaded on the Python thread, whose load-time AMX weight repack opened
a second OpenMP team; libgomp then counted more threads than CPUs and made every barrier of the
decode team sleep on a futex. These specs check, on whatever CPU level this host runs, what can
differ between the two without timing anything (speed is qualify's engine-ceiling stage):

- the weight buffer types (CPU_Mapped, CPU_REPACK, CPU_AMX, ...) and the KV buffer, as both
  processes' own load logs print them;
- flash attention as resolved, the KV cache type and the thread count (llama-bench's JSON);
- one OpenMP team: loading and decoding add exactly the engine thread plus n_threads - 1 pool
  threads to the process, as llama-bench's single thread that loads and computes does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.qualify.specs import model_path
from harness_plugins.llamacpp.bench import _llama_bench_at_level

THREADS = 2
BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size")
KV = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size")
PREFERRED = re.compile(r"cannot be used with preferred buffer type (\S+)")
FLASH = re.compile(r"llama_context: flash_attn\s+= (\S+)")
FA_RESOLVED = re.compile(r"Flash Attention (enabled|disabled)")

CHILD = textwrap.dedent("""
    import json, os, sys
    import harness_plugins.llamacpp.engine  # numpy's OpenBLAS starts its threads at import: before the count
    from harness.runtime import Runtime
    def threads():
        return len(os.listdir("/proc/self/task"))
    before = threads()
    eng = Runtime.load(sys.argv[1], variant="cpu", threads=int(sys.argv[2]), n_ctx=256, max_num_seqs=1,
                      prefix_caching=False, verbose=True)
    r = eng.complete("The capital of France is", temperature=0.0, max_tokens=8, ignore_eos=True)
    after = threads()
    info = eng.info()
    eng.close()
    print(json.dumps({"new_threads": after - before, "cpu_level": info.get("cpu_variant"), "n": r.n_generated}))
""")


def _facts(log: str) -> dict[str, object]:
    return {"weights": sorted(set(BUFFER.findall(log))), "kv": sorted(set(KV.findall(log))),
            "not_extra": sorted(set(PREFERRED.findall(log))), "flash_attn": sorted(set(FLASH.findall(log))),
            "flash_resolved": sorted(set(FA_RESOLVED.findall(log)))}


@pytest.fixture(scope="module")
def binding_run() -> tuple[dict[str, object], str]:
    r = subprocess.run([sys.executable, "-c", CHILD, str(model_path("HARNESS_MODEL")), str(THREADS)],
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@pytest.fixture(scope="module")
def bench_run(artifact: Path, binding_run: tuple[dict[str, object], str]) -> tuple[dict[str, object], str, str]:
    level = binding_run[0]["cpu_level"]
    chosen, exe = _llama_bench_at_level(artifact, level)
    argv = [str(exe), "-m", str(model_path("HARNESS_MODEL")), "-p", "8", "-n", "8", "-r", "1", "-t", str(THREADS),
            "-v", "-o", "json"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    rows = json.loads(r.stdout)
    return rows[0], r.stderr, str(chosen)


def test_both_run_the_same_cpu_level(binding_run: tuple[dict[str, object], str],
                                     bench_run: tuple[dict[str, object], str, str]) -> None:
    assert binding_run[0]["n"] == 8
    assert bench_run[2] == binding_run[0]["cpu_level"], (bench_run[2], binding_run[0])
    loaded = re.findall(r"loaded CPU backend from (\S+)", bench_run[1])
    assert loaded and all(f"libggml-cpu-{bench_run[2]}.so" in p for p in loaded), loaded


def test_weights_kv_and_attention_as_llama_bench(binding_run: tuple[dict[str, object], str],
                                                 bench_run: tuple[dict[str, object], str, str]) -> None:
    ours, theirs = _facts(binding_run[1]), _facts(bench_run[1])
    assert ours["weights"], f"no 'model buffer size' line in the binding's verbose load log:\n{binding_run[1][-3000:]}"
    assert ours == theirs, f"binding {ours} vs llama-bench {theirs} (level {bench_run[2]})"


def test_thread_count_and_kv_type_as_llama_bench(bench_run: tuple[dict[str, object], str, str]) -> None:
    row = bench_run[0]
    assert row["n_threads"] == THREADS
    # the binding's defaults for what llama-bench reports (engine.cpp: f16 KV unless kv_cache_type)
    assert row["type_k"] == "f16" and row["type_v"] == "f16"


def test_one_openmp_team(binding_run: tuple[dict[str, object], str]) -> None:
    """The engine thread loads and decodes: it and its pool of THREADS - 1 are all that is added."""
    assert binding_run[0]["new_threads"] == THREADS, (
        f"loading and decoding added {binding_run[0]['new_threads']} threads, expected {THREADS} "
        "(the engine thread + an OpenMP pool of n_threads - 1): a second team is running, on the loading "
        "thread or another caller, and libgomp throttles the decode team's barriers")
