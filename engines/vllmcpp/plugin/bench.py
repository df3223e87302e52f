"""vllm.cpp's bench arm: its in-process binding (``in-process:engine=vllmcpp,model=DIR``), the same
shapes as llama.cpp's arm so the two stand side by side in one ABBA run.

vllm.cpp's C ABI takes a text prompt (no token ids), so a pN-token prompt is pN common English
words, each one token with a leading space in a byte-level BPE (GPT-2's, the shared model's);
the warm-up checks the library's own prompt-token count, so another tokenizer that cuts them
differently is refused rather than measured at another length. llama.cpp's arm prefills pN
synthetic token ids: another content, the same amount of work. Generation ignores EOS and runs
gN tokens. TTFT is the time to the first step callback; the library coalesces the steps of a slow
reader into one callback, so decode speed is taken from gN and the wall time after the first
token, not from the callbacks' count.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from harness import __version__
from harness.bench.arms import IN_PROCESS, run_concurrently
from harness.core.errors import BenchError
from harness.core.host import default_threads
from harness.core.inputs import open_input

ENGINE = "vllmcpp"
#: One token each, after a space, in GPT-2's byte-level BPE (and most byte-level BPEs since).
_TEXT = (
    "the of and to in is that for it with as was on be at by this had not are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do "
    "first any my now such like our over man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used take "
    "three")
WORDS = tuple(f" {w}" for w in _TEXT.split(" "))


def text_prompt(pn: int, salt: int = 0) -> str:
    """pN words, the same for the same (pn, salt); ``salt`` varies concurrent streams."""
    return "".join(WORDS[(i * 7919 + salt * 104729 + 17) % len(WORDS)] for i in range(pn))


def model_facts(path: str) -> dict[str, Any]:
    """Name, bytes on disk and parameter count (from the safetensors headers) of a model directory."""
    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    n_params = 0
    for f in files:
        if f.suffix != ".safetensors":
            continue
        # a user-named model: read through harness.core.inputs (a regular file, its head only)
        with open_input(f, kind="safetensors-header", error=BenchError, head=True) as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, t in header.items():
            if name != "__metadata__":
                count = 1
                for d in t["shape"]:
                    count *= int(d)
                n_params += count
    size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
    return {"name": p.name, "path": str(p), "bytes": size, "n_params": n_params or None}


class VllmArm:
    """vllm.cpp's binding in the arm's worker process. Options: ``model`` (a directory with
    config.json, or a Qwen3.5 GGUF), ``threads``, ``n_ctx`` (its max_model_len), ``max_num_seqs``."""

    def __init__(self, options: dict[str, Any]) -> None:
        from harness_plugins.vllmcpp.engine import Engine

        self.opts = {k: v for k, v in options.items() if not k.startswith("_")}
        if "model" not in self.opts:
            raise BenchError("the vllm.cpp arm needs model=PATH (e.g. in-process:engine=vllmcpp,model=$HARNESS_VLLM_MODEL)")
        self.opts["model"] = str(Path(str(self.opts["model"])).expanduser())
        self.opts.setdefault("threads", default_threads())
        self.opts.setdefault("n_ctx", 2048)
        variant = self.opts.get("variant")
        self.engine = Engine.load(self.opts["model"], variant=str(variant) if variant else None,
                                  threads=int(self.opts["threads"]), max_model_len=int(self.opts["n_ctx"]),
                                  max_num_seqs=int(self.opts.get("max_num_seqs", 4)))
        self._checked: set[int] = set()

    def _check_length(self, pn: int) -> None:
        if pn in self._checked:
            return
        got = self.engine.complete_exact(text_prompt(pn), temperature=0.0, max_tokens=1).n_prompt
        if got != pn:
            raise BenchError(f"the vllm.cpp arm's {pn}-word prompt is {got} tokens in {self.opts['model']}'s tokenizer; "
                             "its prompts are one token per word in a GPT-2-style byte-level BPE")
        self._checked.add(pn)

    def warmup(self) -> None:
        self._check_length(64)
        self.engine.complete(text_prompt(64), temperature=0.0, max_tokens=8, ignore_eos=True)

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        self._check_length(pn)
        sampling = {"temperature": 0.0, "max_tokens": gn, "ignore_eos": True}
        prompts = [text_prompt(pn, i) for i in range(concurrency)]
        results, wall = run_concurrently(lambda p: self.engine.start(p, sampling).result(), prompts, "vllmcpp")
        bad = [r.finish_reason for r in results if r.finish_reason not in ("length", "stop")]
        if bad:
            raise BenchError(f"a request of the vllm.cpp arm did not finish: {bad}")
        ttft = max(r.ttft_s for r in results)
        decode = [(gn - 1) / (r.total_s - r.ttft_s) for r in results if r.total_s > r.ttft_s]
        return {"ttft_s": ttft, "decode_tps": sum(decode) / len(decode) if decode else 0.0,
                "aggregate_tps": gn * concurrency / wall, "prefill_tps": pn * concurrency / ttft if ttft else 0.0,
                "callbacks_per_token": sum(r.n_generated for r in results) / (gn * concurrency)}

    def describe(self) -> dict[str, Any]:
        info = self.engine.info()
        cand = self.engine.candidate
        return {"kind": IN_PROCESS, "engine": ENGINE, "pin": info["pin"], "variant": info["variant"],
                "binding": str(cand.location) if cand is not None else None, "abi_version": info["abi_version"],
                "library_version": info["library_version"], "versions": {"harness": __version__},
                "options": self.opts, "model": model_facts(self.opts["model"])}

    def close(self) -> None:
        self.engine.close()
