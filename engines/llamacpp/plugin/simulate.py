"""llama.cpp under the simulation instrument (:mod:`harness.bench.simulation`): the binding and the
artifact's own llama-bench as commands that run one request, one thread, at a forced CPU level.

The binding runs :mod:`harness_plugins.llamacpp.sim_worker` (load, one greedy completion of the
synthetic prompt every bench arm uses, exit); llama-bench runs its ``-pg PN,GN`` test once without
warm-up (``--no-warmup``; a pin without it runs the prompt twice, which the target states as
``prompt_passes``). Both see the same weights, prompt length and generated length; llama-bench's
tokens are random ids, the binding's the synthetic prompt: a Q4 matrix product executes the same
instructions whatever the ids.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from harness.bench.simulation import SimCommand
from harness.core import hugepages
from harness.core.errors import BenchError
from harness.core.pyexec import python_argv
from harness.runtime import levels
from harness_plugins.llamacpp.bench import (
    RECIPE_OPTIONS,
    _llama_bench_at_level,
    _model_facts,
    prepare_llama_bench,
)


def _model(options: dict[str, Any]) -> str:
    if "model" not in options:
        raise BenchError("a simulated arm needs model=PATH (e.g. --a in-process:model=$HARNESS_MODEL)")
    return str(Path(str(options["model"])).expanduser())


class BindingTarget:
    """Our binding (``in-process`` arm) on an installed variant, or another pin's (``pin=``/``rev=``,
    prepared as the in-process arm is: the recipe's descriptor and binding first on the paths);
    ``lib_dir=DIR``: the CPU levels of another artifact of the same pin (``$HARNESS_BINDING_LIB_DIR``)."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.opts = dict(options)
        self.model = _model(self.opts)
        self.level = str(self.opts["level"]) if self.opts.get("level") else None
        self.variant = str(self.opts.get("variant", "cpu"))
        self.name = str(self.opts.get("name") or f"in-process:{self.variant}")

    def command(self, pn: int, gn: int) -> SimCommand:
        env = hugepages.engine_env()
        for key, var in RECIPE_OPTIONS.items():
            if key in self.opts:
                env[var] = str(self.opts[key])
        if self.level:
            env[levels.LEVEL_ENV] = self.level
        if self.opts.get("lib_dir"):
            env[levels.LIB_DIR_ENV] = str(self.opts["lib_dir"])
        env["HARNESS_NO_PROGRESS"] = "1"
        # numpy's OpenBLAS starts a thread pool whose idle spinning is counted, differently each run
        # (98% of the run-to-run difference, cg_diff); one thread starts none
        env["OPENBLAS_NUM_THREADS"] = "1"
        argv = (*python_argv("-m", "harness_plugins.llamacpp.sim_worker"), "--model", self.model,
                "--variant", self.variant, "--pn", str(pn), "--gn", str(gn))
        return SimCommand(argv=argv, env=env)

    def describe(self) -> dict[str, Any]:
        return {"kind": "in-process", "engine": "llamacpp", "variant": self.variant, "cpu_level": self.level,
                "threads": 1, "command": "python -m harness_plugins.llamacpp.sim_worker --model M --pn PN --gn GN",
                "pin": self.opts.get("pin") or self.opts.get("rev"), "model": _model_facts(self.model)}


class LlamaBenchTarget:
    """An artifact's own llama-bench (``artifact=DIR``, or ``pin=``/``rev=`` built as the arm does)."""

    def __init__(self, options: dict[str, Any]) -> None:
        opts = dict(options)
        if "artifact" not in opts:
            opts = prepare_llama_bench(opts)
        self.opts = opts
        self.model = _model(opts)
        self.artifact = Path(str(opts["artifact"])).expanduser()
        if not (self.artifact / "bin" / "llama-bench").is_file():
            msg = f"no llama-bench in {self.artifact}: not an artifact dir (harness artifacts lists them)"
            raise BenchError(msg)
        self.level, self.exe = _llama_bench_at_level(self.artifact, opts.get("level"))
        self.name = str(opts.get("name") or f"llama-bench {opts.get('pin') or opts.get('rev') or self.artifact.name}")
        self.no_warmup = _has_flag(self.exe, "--no-warmup")

    @property
    def prompt_passes(self) -> int:
        """How often a run processes its prompt: twice when the tool cannot skip its warm-up."""
        return 1 if self.no_warmup else 2

    def command(self, pn: int, gn: int) -> SimCommand:
        argv = [str(self.exe), "-m", self.model, "-t", "1", "-p", "0", "-n", "0", "-pg", f"{pn},{gn}", "-r", "1",
                "-o", "json"]
        if self.no_warmup:
            argv.append("--no-warmup")
        return SimCommand(argv=tuple(argv), env=hugepages.engine_env())

    def describe(self) -> dict[str, Any]:
        import hashlib

        from harness.build.cmake import read_manifest

        pin = read_manifest(self.artifact).get("pin")
        manifest = hashlib.sha256((self.artifact / "manifest.json").read_bytes()).hexdigest()
        return {"kind": "llama-bench", "engine": "llamacpp", "pin": pin, "artifact": str(self.artifact),
                "artifact_real": os.path.realpath(self.artifact), "manifest_sha256": manifest,
                "cpu_level": self.level, "threads": 1, "prompt_passes": self.prompt_passes,
                "command": f"llama-bench -m M -t 1 -p 0 -n 0 -pg PN,GN -r 1 -o json"
                           f"{' --no-warmup' if self.no_warmup else ''}", "model": _model_facts(self.model)}


def _has_flag(exe: Path, flag: str) -> bool:
    """Whether ``exe --help`` lists ``flag`` (llama-bench's options move between pins)."""
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=False, timeout=60,
                       env={**os.environ, "LD_LIBRARY_PATH": str(exe.parent.parent / "lib")})
    return flag in (r.stdout + r.stderr)
