"""The real bench arms: our binding on a built variant, and the ``xllamacpp`` peer wheel.

Both take the same options (``model``, ``threads``, ``n_ctx``) and measure the same
shapes: a pN-token prompt (token ids, so both arms see the same prompt), gN
generated tokens with EOS ignored, and C concurrent requests. Prefix caching is
off in both, so blocks never reuse each other's KV.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import __version__
from harness.bench.arms import IN_PROCESS, run_concurrently
from harness.core import hugepages, paths, progress
from harness.core.errors import BenchError
from harness.core.host import default_threads
from harness.core.jsonvalue import json_value
from harness.core.pyexec import python_argv
from harness_plugins.llamacpp.bench_tasks import TASKS, copy_prompt, free_prompt

#: The peer baseline, pinned (moved by hand: a peer is not an engine pin).
XLLAMACPP_VERSION = "2026.10.11549"


def _opts(options: dict[str, Any]) -> dict[str, Any]:
    clean = {k: v for k, v in options.items() if not k.startswith("_")}
    if "model" not in clean:
        msg = "bench arm needs model=PATH (e.g. --a in-process:model=$HARNESS_MODEL)"
        raise BenchError(msg)
    clean["model"] = str(Path(str(clean["model"])).expanduser())
    clean.setdefault("threads", default_threads())
    clean.setdefault("n_ctx", 2048)
    return clean


def synthetic_prompt(pn: int, n_vocab: int, salt: int = 0) -> list[int]:
    """pN token ids, the same for every arm on the same model; ``salt`` varies concurrent streams.

    Ids skip the first few (usually control tokens) and stay inside the vocabulary.
    """
    lo, span = 4, max(1, min(n_vocab, 32000) - 4)
    return [lo + (i * 7919 + salt * 104729 + 17) % span for i in range(pn)]


def n_vocab_of(path: str) -> int:
    import gguf

    field = gguf.GGUFReader(path).get_field("tokenizer.ggml.tokens")
    if field is None:
        raise BenchError(f"{path} has no tokenizer.ggml.tokens")
    return len(field.data)


def _model_facts(path: str) -> dict[str, Any]:
    size = Path(path).stat().st_size
    n_params = None
    try:
        import gguf
        import numpy as np

        reader = gguf.GGUFReader(path)
        n_params = int(sum(int(np.prod(t.shape)) for t in reader.tensors))
    except Exception:
        pass
    return {"name": Path(path).name, "path": path, "bytes": size, "n_params": n_params}


def _metrics(pn: int, wall: float, runs: list[tuple[float, float, int]]) -> dict[str, Any]:
    """(ttft_s, decode tok/s, generated) per request -> the bench metrics."""
    ttft = max(r[0] for r in runs)
    return {"ttft_s": ttft, "decode_tps": sum(r[1] for r in runs) / len(runs),
            "aggregate_tps": sum(r[2] for r in runs) / wall, "prefill_tps": pn * len(runs) / ttft if ttft else 0.0}


#: Binding arm options that are speculative-decoding settings (Engine.load's names) and their types.
SPEC_OPTIONS: dict[str, type] = {"spec_type": str, "draft_model": str, "n_draft": int, "ngram_n": int,
                                 "spec_min_acceptance": float,
                                 # benchmark calibration: a real per-step slowdown (the error-rate study)
                                 "token_delay_us": int}


def _spec_args(opts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, kind in SPEC_OPTIONS.items():
        if key in opts:
            try:
                out[key] = kind(opts[key])
            except ValueError as e:
                msg = f"binding arm option {key}={opts[key]!r}: expected {kind.__name__}"
                raise BenchError(msg) from e
    if "draft_model" in out:
        out["draft_model"] = str(Path(out["draft_model"]).expanduser())
    return out


#: Options :func:`prepare_in_process` adds for another recipe's binding: the folders the worker puts
#: on ``$HARNESS_ENGINES_PATH`` (that recipe's descriptor and ABI surface) and ``$HARNESS_BINDING_PATH``.
RECIPE_OPTIONS = {"_engines_path": "HARNESS_ENGINES_PATH", "_binding_path": "HARNESS_BINDING_PATH"}


def prepare_in_process(options: dict[str, Any]) -> dict[str, Any] | None:
    """``pin=VERSION`` / ``rev=GITREV`` on an in-process arm: that recipe's binding, built here.

    The recipe (descriptor, patches, ABI surface and binding source of the commit that
    pins it: :mod:`harness.build.recipes`) builds its artifact and its binding wheel, which is
    unpacked (not installed) into the cache; the arm's worker then finds that recipe's descriptor
    and that binding first (:data:`RECIPE_OPTIONS`), so it loads the old pin while this
    environment keeps its own binding. The working tree's own pin is the installed binding. Each
    step is stamped: a second run costs seconds. None: an arm without pin/rev (nothing to do).
    """
    if "pin" not in options and "rev" not in options:
        return None
    from harness.binding.wheel import unpacked_binding
    from harness.build import pipeline, recipes

    engine = str(options.get("engine", "llamacpp"))
    variant = str(options.get("variant", "cpu"))
    spec = recipes.resolve(engine, pin=str(options["pin"]) if "pin" in options else None,
                           rev=str(options["rev"]) if "rev" in options else None)
    if not spec.recipe_commit:
        return dict(options)
    progress.info(f"in-process arm: {engine} {spec.pin} {variant}, recipe from commit {spec.recipe_commit[:12]}")
    result = pipeline.build_variant(spec, variant)
    if result.built:
        progress.info(f"built {result.artifact} in {result.seconds:.0f} s")
    site = unpacked_binding(spec, result.artifact)
    return {**options, "_engines_path": str(spec.root.parent), "_binding_path": str(site)}


def _use_recipe(options: dict[str, Any]) -> None:
    """In the arm's worker: find the prepared recipe's descriptor and binding first (one engine per worker)."""
    for key, env in RECIPE_OPTIONS.items():
        if key in options:
            os.environ[env] = str(options[key])


#: Integer binding arm options handed to the engine's load as they are.
ENGINE_INT_OPTIONS = ("n_batch", "n_ubatch", "n_gpu_layers", "device_budget_mib", "fit_margin_mib")
#: String binding arm options handed to the engine's load as they are (n_gpu_layers=auto: fitted).
ENGINE_STR_OPTIONS = ("device",)


class BindingArm:
    """Our engine (harness.runtime) on one installed variant, or another pin's binding (``pin=`` /
    ``rev=``: :func:`prepare_in_process`).

    Options beyond model/threads/n_ctx: ``max_num_seqs``; ``task`` (synthetic, copy, free: see
    :mod:`harness_plugins.llamacpp.bench_tasks`); the speculative settings ``spec_type``
    (none, ngram-simple, draft-simple), ``draft_model``, ``n_draft``, ``ngram_n``,
    ``spec_min_acceptance``, so that A (speculation off) and B (on) run on the same artifact;
    ``n_batch``/``n_ubatch``; ``n_gpu_layers`` (layers whose weights live on a GPU variant's
    device, -1: all; without it the engine's default 0 keeps every weight in host memory and ggml
    offloads only the matrix products of large batches, so a GPU row would be partly a CPU row; auto:
    the layers fitted to the device's memory); ``device`` (a name or GPU index), ``device_budget_mib``
    and ``fit_margin_mib`` (the memory a fit may use and leaves free).
    Its metrics add the draft acceptance rate and generated tokens per forward pass.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        from harness.runtime import Runtime

        _use_recipe(options)
        self.opts = _opts(options)
        self.variant = self.opts.get("variant")
        self.task = str(self.opts.get("task", "synthetic"))
        if self.task not in TASKS:
            msg = f"binding arm option task={self.task!r}: expected one of {', '.join(TASKS)}"
            raise BenchError(msg)
        self.level = _force_level(self.opts.get("level"))
        sizes: dict[str, Any] = {k: "auto" if k == "n_gpu_layers" and str(self.opts[k]) == "auto" else int(self.opts[k])
                                 for k in ENGINE_INT_OPTIONS if k in self.opts}
        sizes.update({k: str(self.opts[k]) for k in ENGINE_STR_OPTIONS if k in self.opts})
        self.engine = Runtime.load(self.opts["model"], variant=self.variant, n_ctx=int(self.opts["n_ctx"]),
                                  threads=int(self.opts["threads"]), max_num_seqs=int(self.opts.get("max_num_seqs", 4)),
                                  prefix_caching=False, **sizes, **_spec_args(self.opts))
        got = self.engine.info()["cpu_variant"]
        if self.level and got != self.level:
            self.engine.close()
            msg = (f"binding arm level={self.level}: the engine loaded CPU level {got!r} instead; "
                   "this CPU cannot run that level (harness engine info lists the levels it runs)")
            raise BenchError(msg)
        self.n_vocab = n_vocab_of(self.opts["model"])

    def _prompt(self, pn: int, salt: int) -> list[int]:
        if self.task == "copy":
            return list(self.engine.tokenize(copy_prompt(pn, self.engine.tokenize, salt)))
        if self.task == "free":
            return list(self.engine.tokenize(free_prompt(salt)))
        return synthetic_prompt(pn, self.n_vocab, salt=salt)

    def warmup(self) -> None:
        self.engine.complete(synthetic_prompt(64, self.n_vocab), temperature=0.0, max_tokens=8, ignore_eos=True)

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        prompts = [self._prompt(pn, i) for i in range(concurrency)]
        done, wall = run_concurrently(
            lambda p: self.engine.complete(p, temperature=0.0, max_tokens=gn, ignore_eos=True), prompts, IN_PROCESS)
        out = _metrics(sum(len(p) for p in prompts) // len(prompts), wall,
                       [(r.ttft_s, r.decode_tokens_per_s, r.n_generated) for r in done])
        drafted, steps = sum(r.n_drafted for r in done), sum(r.n_steps for r in done)
        out["acceptance"] = sum(r.n_accepted for r in done) / drafted if drafted else 0.0
        out["tokens_per_step"] = sum(r.n_generated for r in done) / steps if steps else 1.0
        out["drafted_per_step"] = drafted / steps if steps else 0.0
        # the engine's own stamps are what this arm measures: the same figures the server arms report
        # from their servers' timings, beside the client's
        out["engine_ttft_s"], out["engine_decode_tps"] = out["ttft_s"], out["decode_tps"]
        return out

    def describe(self) -> dict[str, Any]:
        info = self.engine.info()
        return {"kind": IN_PROCESS, "engine": "llamacpp", "pin": info["pin"], "variant": info["variant"],
                "binding": str(self.engine.candidate.location),
                "cpu_variant": info["cpu_variant"], "devices": info.get("devices"),
                "abi_fingerprint": info["abi_fingerprint"],
                "versions": {"harness": __version__}, "options": self.opts,
                "model": _model_facts(self.opts["model"])}

    # ------------------------------------------------------------ agreement (harness agree)
    def tokenize(self, text: str) -> list[int]:
        """The model's tokens of ``text``, no BOS: what ``harness agree`` cuts into windows."""
        return [int(t) for t in self.engine.tokenize(text, add_special=False)]

    def evaluate(self, windows: list[list[int]], batch: int, chunk: int, out: list[str]) -> dict[str, Any]:
        """Next-token logits after every token of each window, written as raw float32 to ``out``
        (raw logits: :func:`harness.agree.stats.compare_window` normalises them).

        Windows go ``batch`` at a time into one evaluation (a short last group is filled with
        companion copies of its first window, so every window sees the same batch shape), each
        decode holding ``chunk`` tokens of every window. Returns the seconds spent in the engine
        (``decode_s``: in llama_decode only) and the vocabulary size.
        """
        if len(out) != len(windows):
            msg = f"evaluate: {len(windows)} windows but {len(out)} output paths"
            raise BenchError(msg)
        before = self.engine.stats()
        t0 = time.perf_counter()
        for lo in range(0, len(windows), batch):
            group = windows[lo:lo + batch]
            padded = group + [group[0]] * (batch - len(group))
            arrays = self.engine.evaluate(padded, chunk=chunk, log_softmax=False)
            for i in range(len(group)):
                arrays[i].tofile(out[lo + i])
        after = self.engine.stats()
        return {"seconds": time.perf_counter() - t0, "n_vocab": self.n_vocab,
                "decode_s": (after["eval_decode_us"] - before["eval_decode_us"]) / 1e6,
                "engine_s": (after["eval_us"] - before["eval_us"]) / 1e6}

    def close(self) -> None:
        self.engine.close()


# ---------------------------------------------------------------------------
# the xllamacpp peer, installed into a venv the harness manages
# ---------------------------------------------------------------------------


def peer_venv(version: str = XLLAMACPP_VERSION) -> Path:
    """``<cache>/peers/xllamacpp-<version>``: created once; the harness env never gets xllamacpp."""
    from filelock import FileLock

    root = paths.cache_root() / "peers" / f"xllamacpp-{version}"
    stamp = root / ".harness-peer.json"
    with FileLock(str(paths.locks_dir() / f"peer-xllamacpp-{version}.lock")):
        if stamp.is_file():
            return root
        subprocess.run([*python_argv("-m", "venv"), "--clear", str(root)], check=True, capture_output=True)
        py = root / "bin" / "python"
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            f"xllamacpp=={version}"], capture_output=True, text=True, check=False)
        if r.returncode:
            from harness.core.errors import SubprocessError

            raise SubprocessError([str(py), "-m", "pip", "install", f"xllamacpp=={version}"], r.returncode,
                                  r.stdout + r.stderr, hint="the peer baseline could not be installed")
        stamp.write_text(json.dumps({"version": version, "created_at": time.time()}))
    return root


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise BenchError(f"{venv} has no site-packages")
    return found[0]


class XllamacppArm:
    """Xinference's llama.cpp driver through its in-process server API."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.opts = _opts(options)
        version = str(self.opts.get("version", XLLAMACPP_VERSION))
        venv = peer_venv(version)
        # This worker process serves only this arm: borrowing the peer venv's packages is safe here,
        # and so is sending the peer's native log lines (its server logs every request) to a file.
        sys.path.insert(0, str(_site_packages(venv)))
        log = open(venv / "peer.log", "ab")  # noqa: SIM115 - lives as long as this worker
        os.dup2(log.fileno(), 2)
        import xllamacpp as xlc

        self.xlc = xlc
        self.version = version
        p = xlc.CommonParams()
        p.model.path = self.opts["model"]
        p.n_ctx = int(self.opts["n_ctx"])
        p.n_parallel = int(self.opts.get("max_num_seqs", 4))
        p.cpuparams.n_threads = int(self.opts["threads"])
        p.cpuparams_batch.n_threads = int(self.opts["threads"])
        p.cache_prompt = False
        self.server = xlc.Server(p)
        self.n_vocab = n_vocab_of(self.opts["model"])

    def _one(self, prompt: list[int], gn: int) -> dict[str, Any]:
        """One streamed request: TTFT on the client side (queueing included, as for our arm)."""
        t0 = time.perf_counter()
        first: list[float] = []
        last: list[dict[str, Any]] = []

        def on_chunk(chunk: dict[str, Any]) -> None:
            if not first:
                first.append(time.perf_counter() - t0)
            last[:] = [chunk]

        self.server.handle_completions({"prompt": prompt, "max_tokens": gn, "temperature": 0, "stream": True,
                                        "ignore_eos": True, "cache_prompt": False}, on_chunk)
        if not last or "error" in last[0] or "timings" not in last[0]:
            raise BenchError(f"xllamacpp: {last[0] if last else 'no response'}")
        return {**last[0]["timings"], "ttft_s": first[0]}

    def warmup(self) -> None:
        self._one(synthetic_prompt(64, self.n_vocab), 8)

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        prompts = [synthetic_prompt(pn, self.n_vocab, salt=i) for i in range(concurrency)]
        done, wall = run_concurrently(lambda p: self._one(p, gn), prompts, "xllamacpp")
        return _metrics(pn, wall, [(r["ttft_s"], r["predicted_per_second"], r["predicted_n"]) for r in done])

    def describe(self) -> dict[str, Any]:
        return {"kind": "xllamacpp", "engine": "xllamacpp", "pin": self.version,
                "build_info": json_value(getattr(self.xlc, "BUILD_INFO", None)), "versions": {"harness": __version__},
                "options": self.opts, "model": _model_facts(self.opts["model"])}

    def close(self) -> None:
        self.server = None


# ---------------------------------------------------------------------------
# llama-bench on any built artifact: the arm for "old pin vs new pin"
# ---------------------------------------------------------------------------


def prepare_llama_bench(options: dict[str, Any]) -> dict[str, Any]:
    """Resolve ``pin=``/``rev=`` to an artifact, building that pin's recipe when needed.

    The recipe of a pin other than the working tree's comes from git history
    (:mod:`harness.build.recipes`); each stage is a no-op when already stamped, so a second run
    costs seconds. ``artifact=DIR`` is used as given.
    """
    if "artifact" in options:
        return dict(options)
    if "pin" not in options and "rev" not in options:
        raise BenchError("llama-bench arm needs artifact=DIR, pin=VERSION or rev=GITREV")
    from harness.build import pipeline, recipes

    engine = str(options.get("engine", "llamacpp"))
    variant = str(options.get("variant", "cpu"))
    try:
        spec = recipes.resolve(engine, pin=str(options["pin"]) if "pin" in options else None,
                               rev=str(options["rev"]) if "rev" in options else None)
    except recipes.RecipeError:
        # No recipe on record, but that pin may have been built from another checkout (a
        # working-tree recipe: no @commit suffix).
        built = paths.artifacts_dir() / f"{engine}-{options.get('pin')}-{variant}"
        if "rev" not in options and (built / "manifest.json").is_file():
            progress.info(f"llama-bench arm: no recipe for {engine} {options['pin']} here; using {built}")
            return {**options, "artifact": str(built)}
        raise
    origin = f"commit {spec.recipe_commit[:12]}" if spec.recipe_commit else "the working tree"
    progress.info(f"llama-bench arm: {engine} {spec.pin} {variant}, recipe from {origin}")
    result = pipeline.build_variant(spec, variant)
    if result.built:
        progress.info(f"built {result.artifact} in {result.seconds:.0f} s")
    return {**options, "artifact": str(result.artifact)}


class LlamaBenchArm:
    """The artifact's own ``llama-bench`` (single stream): comparable across pins.

    Options: ``artifact=DIR``, or ``pin=VERSION`` / ``rev=GITREV`` (+ ``variant``, default cpu;
    ``engine``, default llamacpp), ``model``, ``threads``, ``depth`` (KV depth of the decode test,
    default: the prompt length, so tg is measured where the other arms decode: after a pN-token
    prompt; pp is always at depth 0, as ``pp512`` means). ``harness bench`` resolves a pin or
    rev to its artifact before the worker starts, building that pin's recipe (descriptor,
    patches and ABI surface from the newest commit that pinned it) when it is not built yet.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        self.opts = _opts(options)
        if "artifact" not in self.opts:
            # Outside `harness bench` (which prepares arms), build here.
            self.opts = _opts(prepare_llama_bench(self.opts))
        self.artifact = Path(str(self.opts["artifact"])).expanduser()
        self.exe = self.artifact / "bin" / "llama-bench"
        if not self.exe.is_file():
            msg = (f"no llama-bench in {self.artifact}: not an artifact dir "
                   "(harness artifacts lists them; or pass pin=VERSION to build one)")
            raise BenchError(msg)
        self.manifest = json.loads((self.artifact / "manifest.json").read_text())
        #: The CPU level it runs: ``level=`` or $HARNESS_CPU_LEVEL forces one (through a view of the
        #: artifact whose lib/ holds only that level), else the one the runtime would pick here, so
        #: that it and the binding arm run the same kernels.
        self.level, self.exe = _llama_bench_at_level(self.artifact, self.opts.get("level"))

    def command_forms(self) -> list[str]:
        """The command lines a measurement runs, PN and GN standing for the shape (describe() is asked
        before the first measurement)."""
        base = f"{self.exe} -m {self.opts['model']} -t {self.opts['threads']}"
        depth = self.opts.get("depth")
        tg = "-p 0 -n GN" + (f" -d {depth}" if depth is not None else " -d PN")
        return [f"{base} -p PN -n 0 -r 1 -o json", f"{base} {tg} -r 1 -o json"]

    def _ts(self, *args: str) -> float:
        """Tokens/s of the one test ``args`` select (``-p N -n 0`` or ``-p 0 -n N -d D``)."""
        argv = [str(self.exe), "-m", self.opts["model"], "-t", str(self.opts["threads"]), *args, "-r", "1",
                "-o", "json"]
        # an engine process: glibc's malloc hugepages as the other arms get them (harness.core.hugepages)
        r = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600,
                           env=hugepages.engine_env())
        if r.returncode:
            from harness.core.errors import SubprocessError

            raise SubprocessError(argv, r.returncode, r.stdout + r.stderr)
        rows = json.loads(r.stdout)
        if len(rows) != 1:
            raise BenchError(f"llama-bench {' '.join(args)} reported {len(rows)} tests; expected one")
        return float(rows[0]["avg_ts"])

    def _depth(self, pn: int) -> int:
        depth = self.opts.get("depth")
        return pn if depth is None else int(depth)

    def warmup(self) -> None:
        self._ts("-p", "32", "-n", "0")
        self._ts("-p", "0", "-n", "8")

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        if concurrency != 1:
            msg = "llama-bench measures a single stream: run this arm with --concurrency 1"
            raise BenchError(msg)
        pp = self._ts("-p", str(pn), "-n", "0")
        depth = self._depth(pn)
        tg = self._ts("-p", "0", "-n", str(gn), "-d", str(depth)) if depth else self._ts("-p", "0", "-n", str(gn))
        ttft = pn / pp
        return {"ttft_s": ttft, "decode_tps": tg, "aggregate_tps": gn / (ttft + gn / tg), "prefill_tps": pp,
                "depth": float(depth)}

    def describe(self) -> dict[str, Any]:
        m = self.manifest
        return {"kind": "llama-bench", "engine": m.get("engine"), "pin": m.get("pin"), "variant": m.get("variant"),
                "recipe_commit": m.get("recipe_commit"), "upstream": m.get("upstream"), "abi_fingerprint": m.get("abi_fingerprint"),
                "cpu_level": self.level, "commands": self.command_forms(),
                "versions": {"harness": __version__}, "options": self.opts, "model": _model_facts(self.opts["model"])}

    def close(self) -> None:
        pass


def _force_level(level: Any) -> str | None:
    """``level=NAME``: this worker process loads only that CPU level (``$HARNESS_CPU_LEVEL``).

    An arm runs in its own worker process, so setting the variable there forces the level for
    the one engine it loads (an in-process arm, in tests, sets it for the whole process).
    """
    from harness.runtime import levels

    if level is None or str(level) == "":
        return os.environ.get(levels.LEVEL_ENV) or None
    os.environ[levels.LEVEL_ENV] = str(level)
    return str(level)


def _llama_bench_at_level(artifact: Path, level: Any) -> tuple[str | None, Path]:
    """(CPU level, llama-bench to run): the artifact's own, or a view that exposes one level only.

    ggml loads every ``libggml-cpu-<level>.so`` beside libggml and keeps the best this CPU runs;
    the binding instead loads what :func:`harness.runtime.levels.select` chose (the probe's
    verdict, or $HARNESS_CPU_LEVEL). The view (``bin/llama-bench`` copied, ``lib/`` linked with
    only the chosen level) makes llama-bench run that same level: its RUNPATH ``$ORIGIN/../lib``
    finds the view's libggml, which searches its own directory for plugins.
    """
    import shutil

    from harness.runtime import levels

    exe = artifact / "bin" / "llama-bench"
    lib = artifact / "lib"
    if not levels.cpu_levels(lib):
        return None, exe  # one built-in level
    chosen = str(level) if level else None
    if chosen is None:
        sel = levels.select(lib)
        if not sel.forced and sel.lib_dir == lib:
            return sel.level, exe  # every level loads: ggml's own pick, as the binding's
        chosen = sel.level
    if chosen not in levels.cpu_levels(lib):
        msg = f"llama-bench arm level={chosen}: not a CPU level of {artifact} ({', '.join(levels.cpu_levels(lib))})"
        raise BenchError(msg)
    view = paths.cache_root() / "cpu-levels" / "llama-bench" / levels.artifact_key(lib) / chosen
    levels.level_dir(lib, [chosen], view / "lib")
    (view / "bin").mkdir(parents=True, exist_ok=True)
    target = view / "bin" / "llama-bench"
    if not target.is_file() or target.stat().st_size != exe.stat().st_size:
        tmp = target.with_suffix(f".tmp-{os.getpid()}")
        shutil.copy2(exe, tmp)
        os.replace(tmp, target)
    return chosen, target
