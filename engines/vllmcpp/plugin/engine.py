"""vllm.cpp as its users call it: load, complete, stream, start/cancel, chat.

A thin typed layer over the binding (``_core``, a pybind11 module over vllm.cpp's C ABI):
every request goes to vllm.cpp's own scheduler (``vllm_request_submit``: continuous batching
across requests), a library thread calls back per step, and Python only waits (GIL released).

What the C ABI does not say, this layer does not invent: its streaming callback carries text only,
and the library coalesces the steps a slow reader missed into one delta (measured: a tiny model
finished 12 tokens before the first callback, which carried all of them). So a streamed or
started request reports the deliveries it saw as ``n_generated`` (a lower bound), no prompt
token count (0), and ``length`` only when it saw ``max_tokens`` deliveries, else ``stop`` (or
``cancelled``); :meth:`Engine.complete` (``vllm_complete``) returns the library's own counts
and finish reason.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from harness.config.options import parameter
from harness.core import errors
from harness.runtime import discovery
from harness.runtime.api import (
    STREAM_STALL_TIMEOUT_S,
    Completion,
    Pending,
    Stream,
    completion_from,
)
from harness.runtime.native import translate_error
from harness.runtime.sampling import Sampling, config_sampling

if TYPE_CHECKING:
    from harness.config.effective import Effective
    from harness.runtime.contract import TextEngine

ENGINE = "vllmcpp"
#: vllm.cpp reads its CPU thread count from this variable when its thread pool starts.
THREADS_ENV = "VLLM_CPP_CPU_THREADS"

#: Core parameters (vllm_model_params fields) by the config parameter that sets each: the names
#: ``harness config show`` prints (``max_model_len`` and ``context_size`` feed ``n_ctx``,
#: ``max_num_seqs`` feeds ``n_parallel``); the core's own names are taken too.
_CORE: dict[str, str] = {
    "block_size": "block_size", "num_blocks": "num_blocks", "n_parallel": "max_num_seqs",
    "n_ctx": "max_model_len", "tool_parser": "tool_parser", "reasoning_parser": "reasoning_parser",
    "tokenizer_config_path": "tokenizer_config_path", "threads": "threads",
}
#: Integer core parameters and their bounds (0 = vllm.cpp's default).
_INT_BOUNDS: dict[str, tuple[int, int]] = {
    "block_size": (0, 2**31 - 1), "num_blocks": (0, 2**31 - 1), "max_num_seqs": (0, 2**31 - 1),
    "max_model_len": (0, 2**31 - 1), "threads": (1, 4096),
}


def _target(key: str) -> str | None:
    if key in _CORE.values():
        return key
    return _CORE.get(parameter(key))


def core_params(engine_args: Mapping[str, Any]) -> dict[str, Any]:
    """The binding's parameters (and ``threads``) from engine arguments in config spellings
    (``max_num_seqs``, ``context_size``, ``max_model_len``, ``tool_call_parser``...) or core names."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for k, v in engine_args.items():
        target = _target(k)
        if target is None:
            known = sorted({*_CORE, *_CORE.values()})
            raise errors.InvalidRequestError(f"unknown engine argument {k!r} for vllm.cpp{errors.did_you_mean(k, known)}")
        if v is None:
            continue
        bound = _INT_BOUNDS.get(target)
        if bound is not None and (isinstance(v, bool) or not isinstance(v, int) or not bound[0] <= v <= bound[1]):
            raise errors.InvalidRequestError(f"engine argument {k} must be an integer in [{bound[0]}, {bound[1]}], got {v!r}")
        if bound is None and not isinstance(v, (str, os.PathLike)):
            raise errors.InvalidRequestError(f"engine argument {k} must be a string, got {v!r}")
        if target in out and out[target] != v:
            raise errors.InvalidRequestError(f"engine arguments {given[target]} and {k} both set {target} "
                                             f"({out[target]!r} and {v!r}); give one")
        out[target], given[target] = (str(v) if bound is None else v), k
    return out


def config_args(effective: Effective) -> dict[str, Any]:
    """Engine arguments from a model config's effective parameters: the values it sets (a default
    of the config schema is left to vllm.cpp's own default, which the C ABI fills)."""
    return {name: s.value for name, s in effective.params.items()
            if name in _CORE and s.value is not None and not s.source.startswith("default")}


def sampling_core(s: Sampling) -> dict[str, Any]:
    """A request's sampling in the binding's keys (vllm_sampling_params)."""
    d: dict[str, Any] = {
        "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "min_p": s.min_p,
        "max_tokens": s.max_tokens or 0, "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty, "repetition_penalty": s.repetition_penalty,
        "ignore_eos": s.ignore_eos, "stop": list(s.stop),
    }
    if s.seed is not None:
        d["seed"] = s.seed
    if s.grammar:
        d["grammar"] = s.grammar
    if s.repeat_last_n is not None:
        msg = "vllm.cpp applies penalties to the whole sequence: repeat_last_n is not a parameter of its C ABI"
        raise errors.InvalidRequestError(msg)
    return d


def resolve_model(path: Path) -> Path:
    """A ``.gguf`` file or a directory holding ``config.json`` (SPEC §4: anything else is refused,
    since other loaders would probe it greedily)."""
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and (path / "config.json").is_file():
        return path
    what = "does not exist" if not path.exists() else ("is a directory without config.json" if path.is_dir()
                                                        else "is not a .gguf file")
    raise errors.ModelError(f"vllm.cpp loads a .gguf file or a model directory with config.json; {path} {what}")


def handshake(module: Any, cand: discovery.Candidate | None = None) -> None:
    """Refuse a module compiled for another C ABI than the loaded libvllm's, or for other libraries
    than the ones beside it, naming both sides."""
    compiled, library = int(module.COMPILED_ABI_VERSION), int(module.library_abi_version())
    where = f" ({cand.location / 'lib'})" if cand is not None else ""
    if compiled != library:
        raise errors.BindingError(
            f"refusing the vllm.cpp binding: it was compiled against VLLM_ABI_VERSION {compiled}, the loaded "
            f"libvllm{where} reports vllm_abi_version() {library}. Rebuild it against that library: "
            f"harness build-binding vllmcpp --variant {cand.variant if cand else 'cpu'}")
    if cand is not None:
        manifest = cand.location / "lib" / "manifest.json"
        lib_fp = json.loads(manifest.read_text()).get("abi_fingerprint") if manifest.is_file() else None
        if lib_fp != module.ABI_FINGERPRINT or cand.identity.get("pin") != module.PIN:
            raise errors.BindingError(
                f"refusing binding {cand.name}: module built for pin {module.PIN} ABI {str(module.ABI_FINGERPRINT)[:16]}, "
                f"libraries in {cand.location / 'lib'} are pin {cand.identity.get('pin')} ABI {str(lib_fp)[:16]}. "
                f"Rebuild it: harness build-binding vllmcpp --variant {cand.variant}")


@dataclass
class Engine:
    """A loaded vllm.cpp model. Thread-safe: requests from many threads share its scheduler."""

    core: Any
    module: Any
    model_path: Path
    candidate: discovery.Candidate | None = None
    params: dict[str, Any] = field(default_factory=dict)
    stream_stall_timeout: float = STREAM_STALL_TIMEOUT_S
    defaults: Sampling | None = None
    _closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def load(cls, model: str | Path, *, variant: str | None = None, effective: Effective | None = None,
             **engine_args: Any) -> Engine:
        """Load a vllm.cpp model: a ``.gguf`` file or a Hugging Face directory (config.json,
        tokenizer.json, safetensors). ``engine_args`` win over a model config's ``effective`` values."""
        from harness.engine.descriptor import load_engine

        spec = load_engine(ENGINE)
        stall = engine_args.pop("stream_stall_timeout", STREAM_STALL_TIMEOUT_S)
        if isinstance(stall, bool) or not isinstance(stall, (int, float)) or not 0 < stall < float("inf"):
            raise errors.InvalidRequestError(f"stream_stall_timeout must be a positive number of seconds, got {stall!r}")
        params = core_params(engine_args)
        defaults = None
        if effective is not None:
            params = {**core_params(config_args(effective)), **params}
            defaults = config_sampling({k.removeprefix("sampling."): s.value for k, s in effective.params.items()
                                        if k.startswith("sampling.")})
        path = resolve_model(Path(model))
        cand = discovery.choose(ENGINE, spec.pin, discovery.committed_fingerprint(ENGINE), variant)
        module = discovery.import_core(cand)
        handshake(module, cand)
        threads = params.pop("threads", None)
        if threads is not None:
            os.environ[THREADS_ENV] = str(threads)  # read once, when vllm.cpp's thread pool starts
        try:
            core = module.Engine(str(path), params)
        except Exception as e:
            raise _model_error(e, path) from e
        return cls(core=core, module=module, model_path=path, candidate=cand, params=params,
                   stream_stall_timeout=float(stall), defaults=defaults)

    # ---------------------------------------------------------------- text
    def complete(self, prompt: str, sampling: Sampling | dict[str, Any] | None = None, **overrides: Any) -> Completion:
        """Generate a completion (blocking, GIL released): ``vllm_complete``, so the token counts and the
        finish reason are the library's own (:meth:`start` is the cancellable form, with step counts)."""
        return self.complete_exact(prompt, sampling, **overrides)

    def complete_exact(self, prompt: str, sampling: Sampling | dict[str, Any] | None = None,
                       **overrides: Any) -> Completion:
        """One blocking ``vllm_complete``: the library's own token counts and finish reason (not cancellable)."""
        self._check_open()
        s = self._sampling(sampling, overrides)
        t0 = time.perf_counter()
        try:
            out = self.core.complete(self._prompt(prompt), sampling_core(s))
        except Exception as e:
            raise translate_error(e) from e
        return Completion(text=out["text"], finish_reason=out["finish_reason"], n_prompt=out["prompt_tokens"],
                          n_cached=0, n_generated=out["completion_tokens"], ttft_s=0.0,
                          total_s=time.perf_counter() - t0)

    def start(self, prompt: str, sampling: Sampling | dict[str, Any] | None = None, **overrides: Any) -> Pending[Completion]:
        """Submit a completion and return at once: ``.result()`` waits, ``.cancel()`` stops it."""
        req = self._submit(prompt, self._sampling(sampling, overrides), stream=False)
        return Pending(req, time.perf_counter(), completion_from)

    def stream(self, prompt: str, sampling: Sampling | dict[str, Any] | None = None, **overrides: Any) -> Stream:
        """Iterate text deltas; closing the iterator cancels the request."""
        return Stream(self._submit(prompt, self._sampling(sampling, overrides)), time.perf_counter(),
                      stall_timeout=self.stream_stall_timeout)

    def chat(self, messages: Sequence[dict[str, Any]], **request: Any) -> dict[str, Any]:
        """One OpenAI chat request (``messages`` plus ``tools``, ``tool_choice``, ``max_tokens``, ...)
        through the model's own template and vllm.cpp's tool and reasoning parsers: the response object."""
        self._check_open()
        body = {**request, "messages": list(messages), "stream": False}
        try:
            return dict(json.loads(self.core.chat(json.dumps(body))))
        except Exception as e:
            raise translate_error(e) from e

    def _prompt(self, prompt: str) -> str:
        if not isinstance(prompt, str):
            raise errors.InvalidRequestError("vllm.cpp's C ABI takes a text prompt (token ids are not a parameter of it)")
        if "\x00" in prompt:
            raise errors.InvalidRequestError("the prompt holds a NUL character, which a C string cannot carry")
        return prompt

    def _sampling(self, sampling: Sampling | dict[str, Any] | None, overrides: dict[str, Any]) -> Sampling:
        if self.defaults is None or isinstance(sampling, Sampling):
            return Sampling.make(sampling, **overrides)
        return Sampling.make(self.defaults, **{**(sampling or {}), **overrides})

    def _submit(self, prompt: str, sampling: Sampling, *, stream: bool = True) -> Any:
        self._check_open()
        p = self._prompt(prompt)
        try:
            return self.core.submit(p, sampling_core(sampling), stream)
        except Exception as e:
            raise translate_error(e) from e

    # ---------------------------------------------------------------- lifecycle
    def info(self) -> dict[str, Any]:
        return {"engine": ENGINE, "model": str(self.model_path), "library_version": self.module.library_version(),
                "abi_version": int(self.module.library_abi_version()), "pin": self.module.PIN,
                "variant": self.module.VARIANT, **self.params}

    def _check_open(self) -> None:
        if self._closed:
            raise errors.EngineClosedError("the engine is closed")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.core.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _model_error(e: BaseException, path: Path) -> BaseException:
    if type(e).__name__ == "AbiMismatchError":
        return errors.BindingError(str(e))
    if type(e).__name__ == "ModelLoadError":
        return errors.ModelError(f"vllm.cpp cannot load {path}: {e}")
    return translate_error(e) if not isinstance(e, errors.HarnessError) else e


if TYPE_CHECKING:
    # what this engine claims of harness.runtime.contract, checked by mypy --strict (nox lint / tests);
    # its chat() is vllm.cpp's own OpenAI request/response, not ChatEngine's parsed turn
    _CLAIMS: tuple[type[TextEngine]] = (Engine,)
