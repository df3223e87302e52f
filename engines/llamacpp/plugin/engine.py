"""The engine as its users call it: load, complete, stream, chat, embed.

A thin typed layer over the binding (``_core``): the C++ side owns the
decode loop, batching, sampling and streaming; Python never loops per token.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import psutil

from harness.config.localai import vocabulary
from harness.config.model import OPTION_ALIASES
from harness.config.options import parameter, tristate
from harness.core import crash, errors
from harness.runtime import discovery, embeddings, levels, requests
from harness.runtime.api import (
    STREAM_STALL_TIMEOUT_S,
    ChatResult,
    ChatStream,
    Completion,
    Pending,
    Stream,
    completion_from,
)
from harness.runtime.native import translate_error
from harness.runtime.sampling import Sampling, config_sampling
from harness.runtime.state import StateInfo
from harness_plugins.llamacpp import sessions
from harness_plugins.llamacpp.bounds import RUNTIME_BOUNDS
from harness_plugins.llamacpp.models import resolve_model

if TYPE_CHECKING:
    from harness.config.effective import Effective
    from harness.runtime.contract import (
        ChatEngine,
        EmbeddingEngine,
        SessionEngine,
        TextEngine,
        TokenEngine,
    )

ENGINE = "llamacpp"

#: This engine's core parameters by the config parameter each takes: the names ``harness config
#: show`` prints. Every other spelling of those (vLLM's and LocalAI's, the aliases) is the config
#: package's (:func:`harness.config.options.parameter`); the core parameters' own names are taken too.
_CORE: dict[str, str] = {
    "n_ctx": "n_ctx", "threads": "n_threads", "threads_batch": "n_threads_batch", "n_batch": "n_batch",
    "max_num_batched_tokens": "n_batch", "n_ubatch": "n_ubatch", "n_parallel": "max_num_seqs",
    "cache_type_k": "kv_cache_type", "cache_type_v": "kv_cache_type",
    "enable_prefix_caching": "prefix_caching", "n_gpu_layers": "n_gpu_layers", "flash_attn": "flash_attn",
    "spec_type": "spec_type", "draft_model": "draft_model", "spec_n_max": "n_draft",
    "spec_ngram_size_n": "ngram_n", "spec_min_acceptance": "spec_min_acceptance",
    "context_shift": "context_shift", "context_erase": "context_erase",
    "device": "device", "fit_target": "fit_margin_mib",
}
#: The speculative decoding kinds the binding runs (the config's spec_type values).
SPEC_TYPES = ("none", "ngram-simple", "draft-simple")
#: Core parameters no config parameter sets: taken under their own names only.
_OWN = frozenset({"seed", "embeddings", "verbose", "token_delay_us", "device_budget_mib", "memory_check",
                  "host_available_bytes"})
#: Engine arguments (and config parameters) of the Python side of embeddings, not the core's.
_EMBED_ARGS = ("long_text_mode", "matryoshka")
#: The binding's n_batch when none is given (module.cpp): an embedding's window is at most this.
_CORE_N_BATCH = 512
#: llama.cpp's flash-attention type (-1 auto, 0 off, 1 on) for each tri-state encoding.
_FLASH_ATTN = {0: -1, 1: 1, 2: 0}


#: integer core parameters and their bounds (n_ctx 0 = the model's own context length).
_INT_ARGS = RUNTIME_BOUNDS


def _target(key: str) -> str | None:
    """The core parameter an engine argument sets; None when it sets none."""
    if key in _OWN or key in _CORE.values():
        return key
    return _CORE.get(parameter(key))


def _spellings() -> list[str]:
    """Every engine argument taken (for did-you-mean)."""
    names = {*_OWN, *_CORE, *_CORE.values(), *OPTION_ALIASES, *vocabulary().used("config")}
    return sorted(n for n in names if _target(n) is not None)


def _tristate(key: str, value: Any) -> int:
    try:
        return tristate(value)
    except ValueError as e:
        raise errors.InvalidRequestError(f"engine argument {key}: {e}") from e


def core_params(engine_args: Mapping[str, Any]) -> dict[str, Any]:
    """The binding's parameters from engine arguments (config spellings or core names)."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for k, v in engine_args.items():
        target = _target(k)
        if target is None:
            raise errors.InvalidRequestError(f"unknown engine argument {k!r}{errors.did_you_mean(k, _spellings())}")
        if v is None:
            continue
        if target == "n_gpu_layers" and v == "auto":
            # llama.cpp's -ngl auto: layers fitted to the device's memory (engine_memory.cpp)
            target, v = "gpu_layers_auto", True
        bound = _INT_ARGS.get(target)
        if bound is not None and (isinstance(v, bool) or not isinstance(v, int) or not bound[0] <= v <= bound[1]):
            raise errors.InvalidRequestError(f"engine argument {k} must be an integer in [{bound[0]}, {bound[1]}], got {v!r}")
        if target == "prefix_caching":
            v = _tristate(k, v)
        elif target == "flash_attn":
            v = _FLASH_ATTN[_tristate(k, v)]
        elif target == "spec_type" and v not in SPEC_TYPES:
            raise errors.InvalidRequestError(f"engine argument {k} must be one of {', '.join(SPEC_TYPES)}, got {v!r}"
                                             f"{errors.did_you_mean(str(v), SPEC_TYPES)}")
        elif target == "spec_min_acceptance" and (isinstance(v, bool) or not isinstance(v, (int, float))
                                                  or not 0.0 <= v <= 1.0):
            raise errors.InvalidRequestError(f"engine argument {k} must be a number in [0, 1], got {v!r}")
        elif target == "context_shift":
            v = _tristate(k, v) == 1  # on or off; unset is LocalAI's and llama.cpp's default, off
        elif target == "context_erase" and (isinstance(v, bool) or not isinstance(v, (int, float))
                                            or not 0.0 < v < 1.0):
            raise errors.InvalidRequestError(f"engine argument {k} must be a number in (0, 1) (the share of the "
                                             f"context erased), got {v!r}")
        elif target == "device" and (not isinstance(v, (str, int)) or isinstance(v, bool) or not str(v)):
            raise errors.InvalidRequestError(f"engine argument {k} must be a device name (harness devices lists them), "
                                             f"an index among the GPU devices or none, got {v!r}")
        elif target in ("fit_margin_mib", "device_budget_mib", "host_available_bytes") and (isinstance(v, bool) or not isinstance(v, int)
                                                                     or v < 0):
            raise errors.InvalidRequestError(f"engine argument {k} must be a whole number >= 0, got {v!r}")
        elif target == "memory_check" and not isinstance(v, bool):
            raise errors.InvalidRequestError(f"engine argument {k} must be true or false, got {v!r}")
        elif target == "draft_model":
            if not isinstance(v, (str, os.PathLike)) or not str(v):
                raise errors.InvalidRequestError(f"engine argument {k} must be a path to a .gguf draft model, got {v!r}")
            try:
                v = str(resolve_model(Path(v)))
            except errors.ModelError as e:
                raise errors.ModelError(f"draft model ({k}): {e}") from e
        if target in out and out[target] != v:
            raise errors.InvalidRequestError(f"engine arguments {given[target]} and {k} both set {target} "
                                             f"({out[target]!r} and {v!r}); give one")
        out[target], given[target] = v, k
    if "draft_model" in out and "spec_type" not in out:
        out["spec_type"] = "draft-simple"
    if out.get("spec_type") == "draft-simple" and "draft_model" not in out:
        raise errors.InvalidRequestError("spec_type draft-simple needs draft_model (a .gguf of the same vocabulary)")
    if out.get("max_num_seqs", 1) < 1:
        raise errors.InvalidRequestError("max_num_seqs must be >= 1")
    if "device" in out:
        out["device"] = str(out["device"])
    if out.get("gpu_layers_auto") and "n_gpu_layers" in out:
        raise errors.InvalidRequestError(f"n_gpu_layers is both auto and {out['n_gpu_layers']}: give one")
    if out.get("n_ctx", 0) < 0:
        raise errors.InvalidRequestError("context size must be >= 0")
    return out


def config_args(effective: Effective) -> dict[str, Any]:
    """Engine arguments from a model config's effective parameters (what ``harness config show``
    prints): per core parameter the value the config sets, else its default. Two values the
    config sets for one core parameter are both passed, and refused if they differ."""
    picked: dict[str, list[tuple[str, Any, bool]]] = {}
    for name, s in effective.params.items():
        target = _CORE.get(name)
        if target is None or s.value is None or (name == "max_num_batched_tokens" and s.value == 0):
            continue  # max_num_batched_tokens 0: the engine's default batch
        explicit = not s.source.startswith("default")
        held = picked.setdefault(target, [])
        if not held or (explicit and not held[0][2]):
            held[:] = [(name, s.value, explicit)]
        elif explicit:
            held.append((name, s.value, explicit))
    args = {name: value for held in picked.values() for name, value, _ in held}
    abilities = effective.params.get("abilities")
    if abilities is not None and "embeddings" in (abilities.value or ()):
        args["embeddings"] = True
    return args


def _config_defaults(effective: Effective) -> tuple[Sampling, tuple[str, ...]]:
    """(request defaults, the config parameters this runtime does not apply) of a model config."""
    sampling = {k.removeprefix("sampling."): s.value for k, s in effective.params.items()
                if k.startswith("sampling.")}
    taken = {*_CORE, *_EMBED_ARGS, "model", "abilities", *(f"sampling.{k}" for k in sampling)}
    ignored = tuple(k for k, s in effective.params.items() if k not in taken and not s.source.startswith("default"))
    return config_sampling(sampling), ignored


def _embed_settings(engine_args: dict[str, Any], effective: Effective | None) -> dict[str, Any]:
    """``long_text_mode`` and ``matryoshka`` (taken out of ``engine_args``): the engine arguments' over
    the model config's over the defaults."""
    given = {k: s.value for k in _EMBED_ARGS if effective is not None
             and (s := effective.params.get(k)) is not None and s.value is not None}
    given.update({k: v for k in _EMBED_ARGS if (v := engine_args.pop(k, None)) is not None})
    out: dict[str, Any] = {}
    if "long_text_mode" in given:
        out["long_text_mode"] = embeddings.long_text_mode(given["long_text_mode"], "engine argument long_text_mode")
    if "matryoshka" in given:
        if not isinstance(given["matryoshka"], bool):
            raise errors.InvalidRequestError(f"engine argument matryoshka must be true or false, got {given['matryoshka']!r}")
        out["matryoshka"] = given["matryoshka"]
    return out


@dataclass
class Engine:
    """A loaded model on one binding variant. Thread-safe: call it from many threads."""

    core: Any
    module: Any
    candidate: discovery.Candidate
    model_path: Path
    engine_args: dict[str, Any] = field(default_factory=dict)
    stream_stall_timeout: float = STREAM_STALL_TIMEOUT_S
    defaults: Sampling | None = None
    """Request sampling defaults (a model config's); a dict or keywords of a request go over them."""
    not_applied: tuple[str, ...] = ()
    """Parameters the model config sets that this runtime does not take (mmproj, template.*, ...)."""
    long_text_mode: str = embeddings.LONG_TEXT_MODES[0]
    """Embeddings of a text longer than the window: mean of its chunks or truncate (a request may say otherwise)."""
    matryoshka: bool = False
    """The model is Matryoshka-trained: a ``dimensions`` prefix is renormalized (:mod:`harness.runtime.embeddings`)."""
    n_batch: int = _CORE_N_BATCH
    """The core's n_batch: the most tokens one embedding pass takes."""
    _closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @functools.cached_property
    def _n_vocab(self) -> int:
        return int(self.core.info()["n_vocab"])

    @functools.cached_property
    def model_sha256(self) -> str:
        """sha256 of the model file: what a saved state names its model by (hashed on first use)."""
        return sessions.model_sha256(self.model_path)

    # ---------------------------------------------------------------- load
    @classmethod
    def load(cls, model: str | Path, *, variant: str | None = None, effective: Effective | None = None,
             **engine_args: Any) -> Engine:
        """Load a ``.gguf`` file or a Hugging Face dir (config.json + safetensors, converted once).

        :param effective: a model config's effective parameters (``harness config show``; the
            core's ``Engine.load(config=...)`` passes them): its engine arguments and sampling
            defaults apply, and ``engine_args`` given here win over them.
        """
        stall = engine_args.pop("stream_stall_timeout", STREAM_STALL_TIMEOUT_S)
        if isinstance(stall, bool) or not isinstance(stall, (int, float)) or not 0 < stall < float("inf"):
            raise errors.InvalidRequestError(f"stream_stall_timeout must be a positive number of seconds, got {stall!r}")
        embed = _embed_settings(engine_args, effective)
        path, cand, module, params = prepare(model, variant, effective, engine_args)
        defaults: Sampling | None = None
        not_applied: tuple[str, ...] = ()
        if effective is not None:
            defaults, not_applied = _config_defaults(effective)
        try:
            core = module.Engine(str(path), params)
        except Exception as e:
            raise _model_error(e, path) from e
        crash.note(cpu_level=str(core.info().get("cpu_variant") or ""), variant=cand.variant)
        return cls(core=core, module=module, candidate=cand, model_path=path, engine_args=engine_args,
                   stream_stall_timeout=float(stall), defaults=defaults, not_applied=not_applied,
                   n_batch=int(params.get("n_batch", _CORE_N_BATCH)), **embed)

    # ---------------------------------------------------------------- text
    def complete(self, prompt: str | Sequence[int], sampling: Sampling | dict[str, Any] | None = None,
                 **overrides: Any) -> Completion:
        """Generate a completion (blocking; the GIL is released while waiting)."""
        return self.start(prompt, sampling, **overrides).result()

    def start(self, prompt: str | Sequence[int], sampling: Sampling | dict[str, Any] | None = None,
              **overrides: Any) -> Pending[Completion]:
        """Submit a completion and return at once: ``.result()`` waits, ``.cancel()`` stops it."""
        req = self._submit(prompt, self._sampling(sampling, overrides), stream=False)
        return Pending(req, time.perf_counter(), completion_from)

    def stream(self, prompt: str | Sequence[int], sampling: Sampling | dict[str, Any] | None = None,
               **overrides: Any) -> Stream:
        """Iterate text deltas; closing the iterator cancels generation within one token."""
        return Stream(self._submit(prompt, self._sampling(sampling, overrides)), time.perf_counter(),
                      stall_timeout=self.stream_stall_timeout, core=self.core)

    def _sampling(self, sampling: Sampling | dict[str, Any] | None, overrides: dict[str, Any]) -> Sampling:
        """A request's sampling: a dict or keywords over the config's defaults; a Sampling is taken whole."""
        if self.defaults is None or isinstance(sampling, Sampling):
            return Sampling.make(sampling, **overrides)
        return Sampling.make(self.defaults, **{**(sampling or {}), **overrides})

    def _submit(self, prompt: str | Sequence[int], sampling: Sampling, *, stream: bool = True) -> Any:
        self._check_open()
        p = requests.prompt(prompt, self._n_vocab)
        try:
            return self.core.submit(p, sampling.to_core(), stream)
        except Exception as e:
            raise translate_error(e) from e

    # ---------------------------------------------------------------- chat
    def chat(self, messages: Sequence[dict[str, Any]], *, tools: Sequence[dict[str, Any]] | None = None,
             tool_choice: str | dict[str, Any] = "auto", sampling: Sampling | dict[str, Any] | None = None,
             response_format: dict[str, Any] | None = None, **overrides: Any) -> ChatResult:
        """One chat turn with the model's own template; tool calls come back parsed (``arguments``
        as the JSON string, :func:`harness.runtime.parse_arguments` reads it)."""
        return self.start_chat(messages, tools=tools, tool_choice=tool_choice, sampling=sampling,
                               response_format=response_format, **overrides).result()

    def start_chat(self, messages: Sequence[dict[str, Any]], *, tools: Sequence[dict[str, Any]] | None = None,
                   tool_choice: str | dict[str, Any] = "auto", sampling: Sampling | dict[str, Any] | None = None,
                   response_format: dict[str, Any] | None = None, **overrides: Any) -> Pending[ChatResult]:
        """Submit a chat turn and return at once: ``.result()`` waits, ``.cancel()`` stops it."""
        req = self._submit_chat(messages, tools, tool_choice, sampling, response_format, overrides, stream=False)

        def finish(r: Any, started: float) -> ChatResult:
            return ChatResult(message=json.loads(self.core.parse_chat(r)), completion=completion_from(r, started))
        return Pending(req, time.perf_counter(), finish)

    def chat_stream(self, messages: Sequence[dict[str, Any]], *, tools: Sequence[dict[str, Any]] | None = None,
                    tool_choice: str | dict[str, Any] = "auto", sampling: Sampling | dict[str, Any] | None = None,
                    response_format: dict[str, Any] | None = None, **overrides: Any) -> ChatStream:
        """Stream the assistant message as parsed deltas (:class:`ChatDelta`: content, tool-call
        fragments); ``.message`` holds the whole parsed message at the end."""
        req = self._submit_chat(messages, tools, tool_choice, sampling, response_format, overrides)
        return ChatStream(req, time.perf_counter(), self.core, self.stream_stall_timeout)

    def _submit_chat(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None,
                     tool_choice: str | dict[str, Any], sampling: Sampling | dict[str, Any] | None,
                     response_format: dict[str, Any] | None, overrides: dict[str, Any], *,
                     stream: bool = True) -> Any:
        self._check_open()
        s = self._sampling(sampling, overrides)
        choice = requests.tool_choice(tool_choice)
        if choice not in ("auto", "none") and not tools:
            raise errors.InvalidRequestError(f"tool_choice {tool_choice!r} needs tools")
        schema = requests.response_schema(response_format)
        msgs, tls = requests.messages(messages), requests.tools(tools)
        try:
            return self.core.submit_chat(msgs, tls, choice, json.dumps(schema) if schema else "", s.to_core(), stream)
        except Exception as e:
            raise translate_error(e) from e

    # ---------------------------------------------------------------- embeddings & tokens
    def embed(self, texts: Sequence[str], *, normalize: bool = True, dimensions: int | None = None,
              long_text_mode: str | None = None) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One row per text, pooled the way the model says (mean for MiniLM), L2-normalized by default.

        :param dimensions: the first this many components (OpenAI's ``dimensions``), renormalized
            where the model is Matryoshka-trained (``matryoshka``), else the full vector's prefix as
            it is (:mod:`harness.runtime.embeddings` says why); more than the model has is refused.
        :param long_text_mode: for a text longer than the model's window: ``mean`` of its
            window-sized chunks weighted by their tokens (at most 8192 tokens), or ``truncate`` to
            its first window; default: the model config's ``long_text_mode`` (mean, as GPT4All).
        """
        self._check_open()
        if isinstance(texts, str):
            texts = [texts]
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise errors.InvalidRequestError(f"texts[{i}] must be a string, got {type(t).__name__}")
            requests.prompt(t, self._n_vocab)
        mode = embeddings.long_text_mode(self.long_text_mode if long_text_mode is None else long_text_mode)
        dims = embeddings.dimensions(dimensions, self._n_embd)
        window, n_special = self._embed_window
        try:
            chunks = [embeddings.split(t, index=i, mode=mode, window=window, n_special=n_special,
                                       tokenize=self._embed_tokenize, detokenize=self.detokenize)
                      for i, t in enumerate(texts)]
            rows = np.asarray(self.core.embed([c for ch in chunks for c in ch.texts], False), dtype=np.float32)
        except errors.HarnessError:
            raise
        except Exception as e:
            raise translate_error(e) from e
        return embeddings.combine(rows, chunks, normalize=normalize, dims=dims, matryoshka=self.matryoshka)

    def _embed_tokenize(self, text: str, add_special: bool) -> list[int]:
        """The tokens of a text as the core's embed() sees it (special tokens in the text not parsed)."""
        return list(self.core.tokenize(text, add_special, False))

    @functools.cached_property
    def _n_embd(self) -> int:
        return int(self.core.info()["n_embd"])

    @functools.cached_property
    def _embed_window(self) -> tuple[int, int]:
        """(tokens one embedding pass takes, special tokens included; the special tokens the core adds).

        The window is the model's training context (BERT's position embeddings end there), the
        context and the batch, whichever is smallest: as GPT4All's ``min(n_ctx_train, n_batch)``.
        """
        info = self.core.info()
        window = min(n for n in (int(info["n_ctx_train"]), int(info["n_ctx"]), self.n_batch) if n > 0)
        n_special = len(self._embed_tokenize("a", True)) - len(self._embed_tokenize("a", False))
        return window, n_special

    def evaluate(self, sequences: Sequence[Sequence[int]], *, chunk: int | None = None,
                 log_softmax: bool = True) -> list[np.ndarray[Any, np.dtype[np.float32]]]:
        """Log-probabilities of the next token after every token of each sequence (the raw
        logits with ``log_softmax=False``: a caller that normalises them itself, as
        :mod:`harness.agree.stats` does in vectorised float32, saves the engine's scalar pass).

        The sequences are evaluated together, each in its own KV sequence from position 0: one
        ``(len(seq), n_vocab)`` float32 array per sequence, row ``i`` the log-softmax of the
        distribution after ``seq[: i + 1]``. Every ``llama_decode`` holds up to ``chunk`` tokens
        (default: all) of each unfinished sequence, so the caller chooses the batch shape: one
        sequence alone or several side by side, prompt-sized chunks or one token per sequence
        and step (the shape of generation). Load with ``max_num_seqs`` >= the sequences,
        ``n_ctx`` >= their total length and ``n_batch`` = ``n_ubatch`` >= sequences x chunk (a
        smaller ``n_ubatch`` splits each decode). Needs an idle engine; drops the prefix cache.
        """
        self._check_open()
        if not hasattr(self.core, "evaluate"):
            raise errors.BindingError(f"the binding of pin {self.module.PIN} has no evaluate(): it was "
                                      "built from a recipe older than `harness agree`; rebuild it from a recipe "
                                      "that has it (its engines/llamacpp/binding)")
        seqs = [list(requests.prompt(list(s), self._n_vocab)) for s in sequences]
        if not seqs:
            raise errors.InvalidRequestError("evaluate needs at least one token sequence")
        step = max(len(s) for s in seqs) if chunk is None else chunk
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise errors.InvalidRequestError(f"chunk must be a positive number of tokens, got {chunk!r}")
        try:
            return list(self.core.evaluate(seqs, step, log_softmax))
        except Exception as e:
            raise translate_error(e) from e

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise errors.InvalidRequestError(f"text must be a string, got {type(text).__name__}")
        requests.prompt(text, self._n_vocab)
        return list(self.core.tokenize(text, add_special, True))

    def detokenize(self, tokens: Sequence[int]) -> str:
        try:
            return str(self.core.detokenize(list(tokens), False))
        except Exception as e:
            raise translate_error(e) from e

    # ---------------------------------------------------------------- sessions
    def save_state(self, history: sessions.History = None) -> bytes:
        """The state of the conversation ``history`` names (chat messages, a prompt or token ids; None:
        the sequence used last), as bytes :meth:`restore_state` takes: the KV cells and tokens of the
        idle sequence sharing the longest start with it, behind a header naming this engine's model
        (sha256), pin, state format (``LLAMA_STATE_SEQ_VERSION``) and context settings. Save after the
        turn has finished (a running request's sequence is not saved); needs prefix caching."""
        self._check_open()
        return sessions.save(self, history)

    def restore_state(self, data: bytes) -> StateInfo:
        """Put a saved state back: the next request starting with its tokens reuses them instead of
        prefilling them (greedy tokens as if the conversation had never left).

        :raises SessionStateError: a state of another model, pin, state format or cache type, or a
            damaged one: nothing of it is loaded.
        :raises KVCacheFullError: every sequence is running a request, or they leave no room for it.
        """
        self._check_open()
        return sessions.restore(self, data)

    def save_state_file(self, path: str | os.PathLike[str], history: sessions.History = None) -> StateInfo:
        """:meth:`save_state` into a file (written atomically)."""
        self._check_open()
        return sessions.save_file(self, path, history)

    def restore_state_file(self, path: str | os.PathLike[str]) -> StateInfo:
        """:meth:`restore_state` from a file (a regular file, not a link)."""
        self._check_open()
        return sessions.restore_file(self, path)

    # ---------------------------------------------------------------- introspection
    def memory(self) -> dict[str, Any]:
        """The estimate this load was judged by (as :func:`harness_plugins.llamacpp.placement.estimate`
        returns it, without the variant and model)."""
        if not hasattr(self.core, "memory"):
            raise errors.BindingError(f"the binding of pin {self.module.PIN} has no memory estimate: rebuild it")
        return dict(self.core.memory())

    def info(self) -> dict[str, Any]:
        """Architecture, parameters, context, variant, ggml devices, selected CPU variant, layers offloaded."""
        raw = dict(self.core.info())
        out: dict[str, Any] = {k: raw[k] for k in ("arch", "desc", "devices", "cpu_variant", "chat_template")}
        for k in ("n_params", "size_bytes", "n_ctx", "n_ctx_train", "n_embd", "n_vocab", "max_num_seqs"):
            out[k] = int(raw[k])
        out["embedding_only"] = raw["embedding_only"] == "1"
        # speculative decoding as loaded: spec_type none, ngram-simple or draft-simple
        out["spec_type"] = raw.get("spec_type", "none")
        out["draft_model"] = raw.get("draft_model") or None
        for k in ("n_draft", "ngram_n"):
            if k in raw:
                out[k] = int(raw[k])
        out["prefix_caching"] = raw["prefix_caching"] == "1"
        out["context_shift"] = raw.get("context_shift") == "1"
        if "context_erase" in raw:
            out["context_erase"] = float(raw["context_erase"])
        # placement: layers offloaded (of n_layer + 1, the output layer counted), where, and whether fitted
        for k in ("n_gpu_layers", "n_layer"):
            if k in raw:
                out[k] = int(raw[k])
        out["offload_devices"] = raw.get("offload_devices", "")
        out["gpu_layers_fit"] = raw.get("gpu_layers_fit", "")
        out["variant"] = self.candidate.variant
        out["pin"] = self.candidate.identity.get("pin")
        out["abi_fingerprint"] = self.candidate.identity.get("abi_fingerprint")
        out["model"] = str(self.model_path)
        return out

    def stats(self) -> dict[str, int]:
        """Scheduler counters: active/pending requests, KV use, decode calls; for speculation
        ``gen_steps`` (per-sequence forward passes that produced tokens), ``gen_tokens``, ``drafted``
        and ``accepted`` (acceptance = accepted / drafted; tokens per pass = gen_tokens / gen_steps)."""
        return dict(self.core.stats())

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.core.close()

    def _check_open(self) -> None:
        if self._closed:
            raise errors.EngineClosedError("engine is closed")

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _committed_fingerprint() -> str | None:
    return discovery.committed_fingerprint(ENGINE)


#: ggml-vulkan skips CPU-type devices (lavapipe) unless they are listed here (indices in
#: vkEnumeratePhysicalDevices order).
VK_VISIBLE_ENV = "GGML_VK_VISIBLE_DEVICES"


def prepare(model: str | Path, variant: str | None, effective: Effective | None,
            engine_args: Mapping[str, Any]) -> tuple[Path, discovery.Candidate, Any, dict[str, Any]]:
    """(model path, the variant's candidate, its imported core module, the core's parameters) of a load:
    what :meth:`Engine.load` and :func:`harness_plugins.llamacpp.placement.estimate` share."""
    from harness.engine.descriptor import load_engine

    spec = load_engine(ENGINE)
    params = core_params(engine_args)
    if effective is not None:
        params = {**core_params(config_args(effective)), **params}
    path = resolve_model(Path(model))
    cand = discovery.choose(ENGINE, spec.pin, _committed_fingerprint(), variant)
    _admit_cpu_type_devices(cand)
    module = discovery.import_core(cand)
    handshake(module, cand)
    # the CPU levels that passed this host's smoke probe, a forced level, or the plugin dir
    # $HARNESS_BINDING_LIB_DIR names (levels.backend_dir)
    params["backend_dir"] = str(levels.backend_dir(cand.location / "lib"))
    # ggml's CPU device reports all of memory as free: the host's need is judged against what is
    # available now (Linux's MemAvailable)
    params.setdefault("host_available_bytes", int(psutil.virtual_memory().available))
    return path, cand, module, params


def _admit_cpu_type_devices(cand: discovery.Candidate) -> None:
    """A forced vulkan variant on a host whose only Vulkan devices are CPU-type: make ggml-vulkan use
    them, or it would silently run everything on its CPU backend. An explicit setting is kept."""
    if cand.forced_only and cand.identity.get("platform") == "vulkan" and cand.devices \
            and VK_VISIBLE_ENV not in os.environ:
        os.environ[VK_VISIBLE_ENV] = ",".join(map(str, cand.devices))


def handshake(module: Any, cand: discovery.Candidate) -> None:
    """Refuse a module whose libraries are not the ones it was built against."""
    ident = cand.identity
    manifest_path = cand.location / "lib" / "manifest.json"
    lib_fp = json.loads(manifest_path.read_text()).get("abi_fingerprint") if manifest_path.is_file() else None
    problems = []
    if lib_fp != module.ABI_FINGERPRINT:
        problems.append(f"module built against ABI {str(module.ABI_FINGERPRINT)[:16]}, "
                        f"libraries in {cand.location / 'lib'} are {str(lib_fp)[:16]}")
    if ident.get("pin") != module.PIN:
        problems.append(f"module pin {module.PIN} != identity pin {ident.get('pin')}")
    lib_build = module.library_build_number()
    if int(module.BUILD_NUMBER) != int(lib_build):
        problems.append(f"module built for llama.cpp build {module.BUILD_NUMBER}, loaded libllama-common is build {lib_build}")
    if problems:
        raise errors.BindingError(f"refusing binding {cand.name}: " + "; ".join(problems)
                                  + ". Rebuild it: harness build-binding llamacpp --variant " + cand.variant)


def _model_error(e: BaseException, path: Path) -> BaseException:
    msg = str(e)
    import re

    m = re.search(r"unknown model architecture: '([^']+)'", msg)
    if m:
        return errors.ModelError(f"Unsupported model architecture: {m.group(1)} ({path})")
    return translate_error(e) if not isinstance(e, errors.HarnessError) else e


if TYPE_CHECKING:
    # what this engine claims of harness.runtime.contract, checked by mypy --strict (nox lint / tests)
    _CLAIMS: tuple[type[TextEngine], type[ChatEngine], type[EmbeddingEngine], type[TokenEngine],
                   type[SessionEngine]] = (Engine, Engine, Engine, Engine, Engine)
