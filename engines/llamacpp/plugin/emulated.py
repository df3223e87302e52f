"""A cross-built llama.cpp artifact's CPU levels, each run under the QEMU CPU model that isolates it.

The level set and each level's checked features come from the pinned source
(:func:`harness_plugins.variant_cpu.harness_artifact_cpu_levels`). What each QEMU CPU model
offers is measured, not looked up: a probe program built from the pinned ``ggml-feats.h`` (the
code ggml's loader scores levels with) runs under every model and prints what ggml would see.
Each level then runs under the model chosen by :func:`harness_plugins.cross_gnu.choose_cpu_models`,
with only that level's library in the plugin dir (forced, as ``$HARNESS_CPU_LEVEL`` does natively),
using the artifact's own programs: ``llama-completion`` greedy-decodes the prompt and
``llama-bench`` runs a short shape. A run that dies by a signal is a crash with signal and level.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from harness.core import crash, paths, progress
from harness.core.errors import HostError
from harness.core.pyexec import python_argv
from harness.runtime import levels
from harness_plugins import cross_gnu

PROMPT = "The capital of France is"
EXPECT = "Paris"
#: Per run: a 135M model decodes at a few tokens/s under emulation.
RUN_TIMEOUT_S = 900
_FIELD_RE = re.compile(r"^\s*bool\s+has_(\w+)\s*;", re.M)
_LOADED_RE = re.compile(r"loaded CPU backend from \S*libggml-cpu-([\w.]+)\.so")
_EVAL_RE = re.compile(r"\S+:\s+eval time =.*?([\d.]+) tokens per second")
_PROMPT_EVAL_RE = re.compile(r"\S+:\s+prompt eval time =.*?([\d.]+) tokens per second")
_QEMU_SIGNAL_RE = re.compile(r"qemu: uncaught target signal (\d+)")


# ---------------------------------------------------------------- what each QEMU CPU model offers
def feats_header(tree: Path) -> Path:
    for cand in (tree / "ggml" / "src" / "ggml-feats.h", tree / "src" / "ggml-feats.h"):
        if cand.is_file():
            return cand
    msg = (f"no ggml/src/ggml-feats.h in {tree}: the pinned ggml moved its CPU feature detection; "
           "update harness_plugins.llamacpp.emulated")
    raise HostError(msg)


def probe_source(header: Path) -> str:
    """A program that prints, as JSON, every ``has_*`` field of ggml's run-time feature struct."""
    fields = _FIELD_RE.findall(header.read_text())
    if not fields:
        msg = f"{header} defines no 'bool has_*' fields: cannot tell what ggml detects"
        raise HostError(msg)
    prints = "\n".join(f'    std::printf("%s\\"{f}\\": %d", first ? "" : ", ", (int) f.has_{f}); first = false;'
                       for f in fields)
    return ('#include <cstdio>\n#include "ggml-feats.h"\nint main() {\n'
            "    const ggml_feats_arch64_runtime_t f = ggml_feats_get_arch64_runtime();\n"
            '    bool first = true;\n    std::printf("{");\n' + prints
            + '\n    std::printf(", \\"sve_bytes\\": %d}\\n", f.sve_cnt);\n    return 0;\n}\n')


def feature_probe(tree: Path, tc: cross_gnu.CrossToolchain) -> Path:
    """The probe, cross-compiled once per header and compiler (static: no sysroot needed to run)."""
    header = feats_header(tree)
    src = probe_source(header)
    key = hashlib.sha256(f"{src}\0{header.read_text()}\0{tc.cxx}\0{tc.compiler_version}".encode()).hexdigest()[:12]
    out = paths.cache_root() / "toolchains" / f"ggml-feats-probe-{tc.triple}-{key}"
    with FileLock(str(paths.locks_dir() / f"{out.name}.lock")):
        if out.is_file():
            return out
        if tc.cxx is None:
            raise HostError("; ".join(tc.missing()))
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            cpp = Path(tmp) / "probe.cpp"
            cpp.write_text(src)
            r = subprocess.run([tc.cxx, *tc.compiler_args, "-O1", "-static", f"-I{header.parent}", str(cpp), "-o", str(out) + ".tmp"],
                               capture_output=True, text=True, check=False)
            if r.returncode:
                msg = f"cannot build the ggml feature probe with {tc.cxx}: {r.stderr.strip()[-800:]}"
                raise HostError(msg)
        Path(str(out) + ".tmp").replace(out)
    return out


def model_features(tc: cross_gnu.CrossToolchain, probe: Path) -> dict[str, dict[str, Any]]:
    """QEMU CPU model spelling -> what ggml detects under it (plain models, and ``max``-like ones
    with SME and SVE switched off). Spellings qemu refuses are left out; duplicates keep the first."""
    out: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for model in cross_gnu.cpu_models(tc):
        for spelling in (model, f"{model},sme=off", f"{model},sve=off,sme=off"):
            r = subprocess.run([*tc.run_argv(spelling), str(probe)], capture_output=True, text=True,
                               timeout=60, check=False)
            if r.returncode:
                continue
            feats = json.loads(r.stdout.strip().splitlines()[-1])
            sig = json.dumps({k: v for k, v in feats.items() if k != "sve_bytes"}, sort_keys=True)
            if sig not in seen:
                seen.add(sig)
                out[spelling] = feats
    return out


# ---------------------------------------------------------------- running one level
@dataclass(frozen=True, kw_only=True)
class LevelRun:
    level: str
    model: str
    status: str
    """ran | crashed | failed | wrong-level (ggml loaded another level: the model lacks a feature)"""
    loaded: str | None
    text: str = ""
    eval_tok_s: float | None = None
    prompt_tok_s: float | None = None
    seconds: float = 0.0
    error: str = ""


def forced_tree(artifact: Path, level: str, scratch: Path) -> Path:
    """``scratch/<level>/{bin,lib}``: the artifact's programs (copied: ``$ORIGIN/../lib`` must resolve
    here) over a lib dir holding only ``level``'s CPU library."""
    root = scratch / level
    (root / "bin").mkdir(parents=True, exist_ok=True)
    for exe in (artifact / "bin").iterdir():
        if not (root / "bin" / exe.name).exists():
            shutil.copy2(exe, root / "bin" / exe.name)
    levels.level_dir(artifact / "lib", [level], root / "lib")
    return root


def _died(r: subprocess.CompletedProcess[str]) -> str | None:
    sig = crash.signal_of(r.returncode)
    m = _QEMU_SIGNAL_RE.search(r.stderr)
    if m:
        sig = int(m.group(1))
    return crash.signal_text(sig) if sig else None


def run_completion(tc: cross_gnu.CrossToolchain, root: Path, level: str, cpu_model: str, model: Path, *,
                   n_tokens: int, threads: int) -> LevelRun:
    argv = [*tc.run_argv(cpu_model), str(root / "bin" / "llama-completion"), "-m", str(model), "-p", PROMPT,
            "-n", str(n_tokens), "--temp", "0", "--seed", "1", "-no-cnv", "--no-display-prompt", "--no-warmup",
            "-c", "256", "-t", str(threads),
            # debug verbosity: the only way llama-completion prints which CPU level ggml loaded
            "-lv", "4"]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, capture_output=True, encoding="utf-8", errors="replace", timeout=RUN_TIMEOUT_S, check=False,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return LevelRun(level=level, model=model.name, status="failed", loaded=None,
                        error=f"hung for {RUN_TIMEOUT_S} s", seconds=RUN_TIMEOUT_S)
    secs = round(time.perf_counter() - t0, 1)
    m = _LOADED_RE.search(r.stderr)
    loaded = m.group(1) if m else None
    died = _died(r)
    if died:
        return LevelRun(level=level, model=model.name, status="crashed", loaded=loaded, seconds=secs,
                        error=f"crashed: {died} on level {loaded or level} under {cpu_model}")
    if r.returncode:
        tail = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-1:] or [f"exit {r.returncode}"]
        return LevelRun(level=level, model=model.name, status="failed", loaded=loaded, seconds=secs,
                        error=f"exit {r.returncode}: {tail[0]}")
    if loaded != level:
        return LevelRun(level=level, model=model.name, status="wrong-level", loaded=loaded, seconds=secs,
                        error=f"ggml loaded {loaded or 'no CPU level'}, not {level}: {cpu_model} lacks a feature "
                        "the level checks")
    ev, pev = _EVAL_RE.search(r.stderr), _PROMPT_EVAL_RE.search(r.stderr)
    return LevelRun(level=level, model=model.name, status="ran", loaded=loaded, text=r.stdout, seconds=secs,
                    eval_tok_s=float(ev.group(1)) if ev else None, prompt_tok_s=float(pev.group(1)) if pev else None)


def run_bench(tc: cross_gnu.CrossToolchain, root: Path, level: str, cpu_model: str, model: Path, *,
              pp: int, tg: int, threads: int) -> dict[str, Any]:
    """``llama-bench`` with a short shape, one repetition: pp/tg tokens/s under emulation."""
    argv = [*tc.run_argv(cpu_model), str(root / "bin" / "llama-bench"), "-m", str(model), "-p", str(pp),
            "-n", str(tg), "-r", "1", "-t", str(threads), "-o", "json", "--no-warmup"]
    try:
        r = subprocess.run(argv, capture_output=True, encoding="utf-8", errors="replace", timeout=RUN_TIMEOUT_S, check=False,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "error": f"hung for {RUN_TIMEOUT_S} s"}
    died = _died(r)
    if died:
        return {"status": "crashed", "error": f"crashed: {died} on level {level} under {cpu_model}"}
    if r.returncode:
        tail = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-1:] or [f"exit {r.returncode}"]
        return {"status": "failed", "error": f"exit {r.returncode}: {tail[0]}"}
    rows = json.loads(r.stdout)
    out: dict[str, Any] = {"status": "ran", "model": model.name}
    for row in rows:
        key = f"pp{row['n_prompt']}" if row.get("n_prompt") else f"tg{row['n_gen']}"
        out[key] = round(float(row["avg_ts"]), 2)
    return out


# ---------------------------------------------------------------- token divergence
_TOKENIZE_CHILD = r"""
import json, sys
from harness.runtime import Runtime
texts = json.loads(sys.stdin.read())
with Runtime.load(sys.argv[1], n_ctx=256, max_num_seqs=1) as eng:
    print(json.dumps([eng.tokenize(t, add_special=False) for t in texts]))
"""


def tokenize_on_host(model: Path, texts: list[str]) -> list[list[int]] | None:
    """Token ids of ``texts`` with this host's own binding (a tokenizer does not depend on the
    CPU level); None when no host binding is installed."""
    try:
        r = subprocess.run([*python_argv("-c", _TOKENIZE_CHILD), str(model)], input=json.dumps(texts),
                           capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode:
        return None
    return [list(t) for t in json.loads(r.stdout.strip().splitlines()[-1])]


def _diverges(ref: list[int], got: list[int]) -> int | None:
    if got == ref:
        return None
    return next((i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), min(len(ref), len(got)))


# ---------------------------------------------------------------- the level table
def emulated_levels(artifact: Path, tree: Path, models: dict[str, Path], *, expect: dict[str, str] | None = None,
                    n_tokens: int = 12, bench_model: str | None = None, bench_shape: tuple[int, int] = (16, 8),
                    threads: int = 2, only: list[str] | None = None) -> dict[str, Any]:
    """Every CPU level of a cross-built ``artifact``, forced, under its QEMU CPU model.

    ``models``: label -> GGUF; ``expect``: label -> text the answer must hold (a label without one
    passes when it decodes). ``bench_model``: the label ``llama-bench`` runs on (None: no bench).
    """
    from harness.build.cmake import read_manifest
    from harness.engine.plugin import get_manager

    manifest = read_manifest(artifact)
    triple = str(manifest.get("target") or "")
    if not triple:
        msg = f"{artifact} is not a cross-built artifact (its manifest names no target)"
        raise HostError(msg)
    arch = triple.split("-", 1)[0]
    cross = dict(manifest.get("cross") or {})
    tc = cross_gnu.toolchain(triple, {"cc": str(cross.get("cc") or ""), "cxx": str(cross.get("compiler") or "")}
                             if cross.get("compiler") else None)
    cpu_levels = get_manager().hook.harness_artifact_cpu_levels(tree=tree, arch=arch) or []
    built = set(levels.cpu_levels(artifact / "lib"))
    defs = [lvl for lvl in cpu_levels if lvl.name in built and (only is None or lvl.name in only)]
    t0 = time.perf_counter()
    probe = feature_probe(tree, tc)
    offered = model_features(tc, probe)
    choices = cross_gnu.choose_cpu_models({lvl.name: frozenset(lvl.checked) for lvl in cpu_levels if lvl.name in built},
                                          {m: frozenset(k for k, v in f.items() if k != "sve_bytes" and v)
                                           for m, f in offered.items()})
    expect = expect or {}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="harness-emulated-") as tmp:
        for lvl in defs:
            choice = choices[lvl.name]
            row: dict[str, Any] = {"level": lvl.name, "checked": list(lvl.checked), **choice.as_dict(), "runs": {}}
            if choice.model is None:
                row["runs"] = {label: {"status": "not-run", "error": choice.note} for label in models}
                rows.append(row)
                continue
            root = forced_tree(artifact, lvl.name, Path(tmp))
            for label, model in models.items():
                progress.info(f"{lvl.name} under qemu -cpu {choice.model}: {label} ...")
                run = run_completion(tc, root, lvl.name, choice.model, model, n_tokens=n_tokens, threads=threads)
                ok = run.status == "ran" and (expect.get(label) is None or expect[label] in run.text)
                row["runs"][label] = {"status": run.status, "ok": ok, "loaded": run.loaded, "text": run.text,
                                      "eval_tok_s": run.eval_tok_s, "prompt_tok_s": run.prompt_tok_s,
                                      "seconds": run.seconds, "error": run.error}
            if bench_model is not None:
                progress.info(f"{lvl.name} under qemu -cpu {choice.model}: llama-bench ...")
                row["bench"] = run_bench(tc, root, lvl.name, choice.model, models[bench_model],
                                         pp=bench_shape[0], tg=bench_shape[1], threads=threads)
            rows.append(row)
    for label, model in models.items():
        ran = [r for r in rows if r["runs"].get(label, {}).get("status") == "ran"]
        toks = tokenize_on_host(model, [r["runs"][label]["text"] for r in ran]) if ran else None
        for i, r in enumerate(ran):
            run = r["runs"][label]
            run["tokens"] = toks[i] if toks else None
            run["diverges_at"] = _diverges(toks[0], toks[i]) if toks else None
        if ran:
            for r in rows:
                r["runs"].get(label, {}).setdefault("diverges_at", None)
            ran[0]["runs"][label]["reference"] = True
    failures = [f"{r['level']}/{label}: {run.get('error') or 'no ' + repr(expect.get(label))}"
                for r in rows for label, run in r["runs"].items()
                if run["status"] != "not-run" and not run.get("ok")]
    failures += [f"{r['level']}/llama-bench: {r['bench']['error']}" for r in rows
                 if r.get("bench", {}).get("status") not in (None, "ran")]
    return {
        "triple": triple, "artifact": str(artifact), "qemu": _qemu_version(tc), "prompt": PROMPT,
        "expect": expect, "models": {k: str(v) for k, v in models.items()}, "threads": threads,
        "n_tokens": n_tokens, "bench_shape": {"pp": bench_shape[0], "tg": bench_shape[1]} if bench_model else None,
        "cpu_models": offered, "levels": rows, "failures": failures,
        "not_isolated": [r["level"] for r in rows if not r["isolated"]],
        "passed": not failures and bool(rows), "seconds": round(time.perf_counter() - t0, 1),
    }


def _qemu_version(tc: cross_gnu.CrossToolchain) -> str | None:
    if tc.qemu is None:
        return None
    r = subprocess.run([tc.qemu, "--version"], capture_output=True, text=True, check=False)
    m = re.search(r"version (\S+)", r.stdout)
    return m.group(1) if m else None
