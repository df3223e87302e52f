"""OpenAI request bodies -> engine calls, and every refusal as an OpenAI-shaped error.

Pure functions over parsed JSON: no engine, no HTTP. Each refusal names the field
(``param``) the way OpenAI's API does, e.g. ``messages[1].role`` or ``temperature``.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from harness.core import errors
from harness.runtime import requests as engine_requests
from harness.runtime.api import Completion
from harness.runtime.embeddings import LONG_TEXT_MODES
from harness.runtime.sampling import Sampling

#: Request bodies larger than this are refused before they are parsed.
MAX_BODY_BYTES = 32 << 20
#: Request bodies nesting arrays/objects deeper than this are refused (a JSON schema of 30 levels fits).
MAX_JSON_DEPTH = 100


@dataclass(frozen=True)
class APIError(Exception):
    """An HTTP error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def __str__(self) -> str:
        return self.message


def invalid(param: str | None, message: str, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def from_engine_error(e: BaseException) -> APIError:
    """The HTTP answer for an error the engine raised while taking or running a request."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, errors.ContextOverflowError):
        return APIError(400, str(e), param="messages", code="context_length_exceeded")
    if isinstance(e, errors.InvalidRequestError):
        return APIError(400, str(e), param=_param_in(str(e)))
    if isinstance(e, errors.KVCacheFullError):
        return APIError(503, f"{e} (retry later)", type="server_error", code="kv_cache_full",
                        headers={"Retry-After": "1"})
    if isinstance(e, errors.EngineClosedError):
        return APIError(503, str(e), type="server_error", code="engine_closed")
    if isinstance(e, errors.EngineCrashError):
        return APIError(503, f"{e}; the server is stopping: retry once it is back", type="server_error",
                        code="engine_crashed")
    return APIError(500, f"{type(e).__name__}: {e}", type="server_error")


def from_embedding_error(e: BaseException) -> APIError:
    """:func:`from_engine_error` for ``/v1/embeddings``: the engine's ``texts[i]`` is the request's ``input[i]``."""
    out = from_engine_error(e)
    text = re.match(r"texts\[(\d+)\]", str(e))
    if isinstance(e, errors.ContextOverflowError) or (text and out.status == 400):
        param = f"input[{text.group(1)}]" if text else "input"
        return APIError(out.status, out.message, type=out.type, param=param, code=out.code, headers=out.headers)
    return out


_PARAM_NAMES = ("messages", "tools", "tool_choice", "response_format", "prompt", "input", "temperature", "top_p",
                "top_k", "min_p", "max_tokens", "seed", "presence_penalty", "frequency_penalty", "stop",
                "repetition_penalty", "grammar", "dimensions", "long_text_mode")


def _param_in(message: str) -> str | None:
    """The request field an engine message is about (its first word that names one)."""
    for m in re.finditer(r"[A-Za-z_][A-Za-z_0-9]*(?:\[\d+\])?(?:\.[A-Za-z_]+)*", message):
        head = m.group(0).split("[")[0].split(".")[0]
        if head in _PARAM_NAMES:
            return m.group(0)
    return None


# ---------------------------------------------------------------- field checks

def _obj(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid(None, f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def _number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise invalid(name, f"{name} must be a number, got {v!r:.60}")
    if not lo <= v <= hi:
        raise invalid(name, f"{name} must be in [{lo:g}, {hi:g}], got {v}")
    return float(v)


def _int(body: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid(name, f"{name} must be an integer, got {v!r:.60}")
    if not lo <= v <= hi:
        raise invalid(name, f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def _bool(body: dict[str, Any], name: str) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise invalid(name, f"{name} must be true or false, got {v!r:.60}")
    return v


def _model(body: dict[str, Any]) -> str:
    m = body.get("model")
    if not isinstance(m, str) or not m:
        raise invalid("model", "model is required: the name of a served model (GET /v1/models lists them)")
    return m


def _check_keys(body: dict[str, Any], known: frozenset[str]) -> None:
    for k in body:
        if k not in known:
            hint = errors.did_you_mean(k, sorted(known))
            raise invalid(k, f"unrecognized request argument supplied: {k}{hint}")


def _unsupported(body: dict[str, Any]) -> None:
    """What the API has and this server does not do: refused by name, never silently ignored."""
    n = _int(body, "n", 1, 128)
    if n not in (None, 1):
        raise invalid("n", f"n={n} is not supported: this server returns one choice per request (n=1)")
    if body.get("logprobs") not in (None, False, 0):
        raise invalid("logprobs", "logprobs are not supported by this server; leave logprobs unset")
    if body.get("top_logprobs") not in (None, 0):
        raise invalid("top_logprobs", "top_logprobs needs logprobs, which this server does not support")
    if body.get("logit_bias") not in (None, {}):
        raise invalid("logit_bias", "logit_bias is not supported by this server")


_SAMPLING_KEYS = frozenset({"temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop",
                            "presence_penalty", "frequency_penalty",
                            # llama-server's extensions, taken under the same names
                            "top_k", "min_p", "repeat_penalty", "repetition_penalty", "ignore_eos"})
#: Fields clients send that change nothing here (OpenAI's bookkeeping), accepted and ignored.
_IGNORED = frozenset({"user", "store", "metadata", "service_tier", "parallel_tool_calls", "n", "logprobs",
                      "top_logprobs", "logit_bias", "stream_options", "stream"})


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The request's sampling values (only those it sets: the config's defaults fill the rest)."""
    out: dict[str, Any] = {}
    t = _number(body, "temperature", 0, 2)
    if t is not None:
        out["temperature"] = t
    p = _number(body, "top_p", 0, 1)
    if p is not None:
        if p == 0:
            raise invalid("top_p", "top_p must be > 0 (1 disables nucleus sampling)")
        out["top_p"] = p
    for name in ("presence_penalty", "frequency_penalty"):
        v = _number(body, name, -2, 2)
        if v is not None:
            out[name] = v
    for name in ("repeat_penalty", "repetition_penalty"):
        v = _number(body, name, 0, 10)
        if v is not None:
            if v == 0:
                raise invalid(name, f"{name} must be > 0 (1 disables it)")
            out["repetition_penalty"] = v
    m = _number(body, "min_p", 0, 1)
    if m is not None:
        out["min_p"] = m
    k = _int(body, "top_k", 0, engine_requests.LIMITS.top_k)
    if k is not None:
        out["top_k"] = k
    for name in ("max_tokens", "max_completion_tokens"):
        v = _int(body, name, 1, engine_requests.LIMITS.max_tokens)
        if v is not None:
            out["max_tokens"] = v
    seed = _int(body, "seed", -(2**63), 2**63 - 1)
    if seed is not None:
        out["seed"] = seed % 2**32  # OpenAI takes any 64-bit integer
    if body.get("ignore_eos") is not None:
        out["ignore_eos"] = _bool(body, "ignore_eos")
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise invalid("stop", "stop must be a non-empty string or a list of them")
        if len(stops) > engine_requests.LIMITS.stop_strings:
            raise invalid("stop", f"stop takes at most {engine_requests.LIMITS.stop_strings} strings, got {len(stops)}")
        out["stop"] = stops
    try:
        Sampling.make(out)
    except errors.InvalidRequestError as e:
        raise invalid(_param_in(str(e).removeprefix("invalid sampling: ")), str(e)) from None
    return out


def _include_usage(body: dict[str, Any]) -> bool:
    so = body.get("stream_options")
    if so is None:
        return False
    if not isinstance(so, dict):
        raise invalid("stream_options", f"stream_options must be an object, got {type(so).__name__}")
    if so and not _bool(body, "stream"):
        raise invalid("stream_options", "stream_options is only allowed when stream is true")
    extra = set(so) - {"include_usage", "include_obfuscation"}
    if extra:
        raise invalid(f"stream_options.{sorted(extra)[0]}", f"unknown stream option {sorted(extra)[0]!r}")
    v = so.get("include_usage", False)
    if not isinstance(v, bool):
        raise invalid("stream_options.include_usage", f"stream_options.include_usage must be true or false, got {v!r:.40}")
    return v


# ---------------------------------------------------------------- requests

@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    sampling: dict[str, Any]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] = "auto"
    response_format: dict[str, Any] | None = None
    stream: bool = False
    include_usage: bool = False

    def engine_kwargs(self) -> dict[str, Any]:
        return {"tools": self.tools, "tool_choice": self.tool_choice, "response_format": self.response_format,
                "sampling": self.sampling}


_CHAT_KEYS = frozenset({"model", "messages", "tools", "tool_choice", "response_format", "functions"}) \
    | _SAMPLING_KEYS | _IGNORED


def chat_request(body: Any) -> ChatRequest:
    b = _obj(body)
    _check_keys(b, _CHAT_KEYS)
    model = _model(b)
    _unsupported(b)
    if "functions" in b:
        raise invalid("functions", "functions is deprecated by OpenAI and not supported: use tools")
    msgs = b.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise invalid("messages", "messages must be a non-empty array of {\"role\": ..., \"content\": ...} objects")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise invalid(f"messages[{i}]", f"messages[{i}] must be an object, got {type(m).__name__}")
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise invalid(f"messages[{i}].role", f"messages[{i}].role must be one of system, developer, user, "
                                                 f"assistant, tool; got {role!r:.40}")
        content = m.get("content")
        if content is None and role != "assistant":
            raise invalid(f"messages[{i}].content", f"messages[{i}].content is required for role {role}")
        if content is not None and not isinstance(content, (str, list)):
            raise invalid(f"messages[{i}].content",
                          f"messages[{i}].content must be a string or an array of parts, got {type(content).__name__}")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise invalid(f"messages[{i}].content[{j}]",
                                  f"messages[{i}].content[{j}] must be a text part ({{\"type\": \"text\", \"text\": ...}}): "
                                  "this server takes text only")
    # developer is OpenAI's newer name for system; chat templates know system
    messages = [{**m, "role": "system"} if m.get("role") == "developer" else m for m in msgs]
    tools = b.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise invalid("tools", "tools must be an array of {\"type\": \"function\", \"function\": {...}} objects")
        for i, t in enumerate(tools):
            if not isinstance(t, dict) or t.get("type", "function") != "function":
                raise invalid(f"tools[{i}].type", f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}")
            fn = t.get("function")
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                raise invalid(f"tools[{i}].function.name", f"tools[{i}].function.name is required")
            if "parameters" in fn:
                try:
                    engine_requests.check_schema(fn["parameters"], f"tools[{i}].function.parameters")
                except errors.InvalidRequestError as e:
                    raise invalid(f"tools[{i}].function.parameters", str(e)) from None
    choice = b.get("tool_choice", "auto")
    if choice is None:
        choice = "auto"
    try:
        engine_requests.tool_choice(choice)
    except errors.InvalidRequestError as e:
        raise invalid("tool_choice", str(e)) from None
    if choice not in ("auto", "none") and not tools:
        raise invalid("tool_choice", f"tool_choice {choice!r:.80} needs tools")
    if isinstance(choice, dict) and tools:
        wanted = choice["function"]["name"]
        if wanted not in [t["function"]["name"] for t in tools]:
            raise invalid("tool_choice", f"tool_choice names function {wanted!r}, which is not in tools")
    fmt = b.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
            raise invalid("response_format.type", "response_format.type must be text, json_object or json_schema")
        try:
            engine_requests.response_schema(fmt)
        except errors.InvalidRequestError as e:
            raise invalid("response_format", str(e)) from None
    return ChatRequest(model=model, messages=messages, sampling=_sampling(b), tools=tools or None,
                       tool_choice=choice, response_format=fmt, stream=_bool(b, "stream"),
                       include_usage=_include_usage(b))


@dataclass(frozen=True, kw_only=True)
class CompletionRequest:
    model: str
    prompt: str | list[int]
    sampling: dict[str, Any]
    stream: bool = False
    include_usage: bool = False


_COMPLETION_KEYS = frozenset({"model", "prompt", "echo", "suffix", "best_of", "grammar"}) | _SAMPLING_KEYS | _IGNORED


def completion_request(body: Any) -> CompletionRequest:
    b = _obj(body)
    _check_keys(b, _COMPLETION_KEYS)
    model = _model(b)
    _unsupported(b)
    if b.get("echo"):
        raise invalid("echo", "echo is not supported by this server")
    if b.get("suffix"):
        raise invalid("suffix", "suffix (fill-in-the-middle) is not supported by this server")
    if b.get("best_of") not in (None, 1):
        raise invalid("best_of", "best_of is not supported by this server (one choice per request)")
    p = b.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # one prompt given as a batch of one
    if isinstance(p, list) and p and all(isinstance(x, str) for x in p):
        raise invalid("prompt", f"prompt holds {len(p)} prompts: this server takes one prompt per request")
    if isinstance(p, str):
        if not p:
            raise invalid("prompt", "prompt must not be empty")
    elif isinstance(p, list) and p and all(isinstance(x, int) and not isinstance(x, bool) for x in p):
        pass
    else:
        raise invalid("prompt", "prompt must be a string or an array of token ids")
    sampling = _sampling(b)
    grammar = b.get("grammar")
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar:
            raise invalid("grammar", "grammar must be a GBNF string")
        sampling["grammar"] = grammar
    return CompletionRequest(model=model, prompt=p, sampling=sampling, stream=_bool(b, "stream"),
                             include_usage=_include_usage(b))


@dataclass(frozen=True, kw_only=True)
class EmbeddingRequest:
    model: str
    inputs: list[str]
    encoding_format: str = "float"
    dimensions: int | None = None
    """OpenAI's: the first this many components (the engine checks them against the model's)."""
    long_text_mode: str | None = None
    """This server's extension (GPT4All's): mean or truncate; unset: the model config's."""

    def engine_kwargs(self) -> dict[str, Any]:
        """What the engine's ``embed`` takes from the request besides the texts."""
        return {k: v for k, v in (("dimensions", self.dimensions), ("long_text_mode", self.long_text_mode))
                if v is not None}


_EMBED_KEYS = frozenset({"model", "input", "encoding_format", "dimensions", "user", "long_text_mode"})
MAX_EMBED_INPUTS = 2048


def embedding_request(body: Any) -> EmbeddingRequest:
    b = _obj(body)
    _check_keys(b, _EMBED_KEYS)
    model = _model(b)
    inp = b.get("input")
    inputs = [inp] if isinstance(inp, str) else inp
    if not isinstance(inputs, list) or not inputs or not all(isinstance(x, str) for x in inputs):
        raise invalid("input", "input must be a string or a non-empty array of strings (token arrays are not taken)")
    if len(inputs) > MAX_EMBED_INPUTS:
        raise invalid("input", f"input holds {len(inputs)} texts, more than {MAX_EMBED_INPUTS}")
    for i, t in enumerate(inputs):
        if not t:
            raise invalid(f"input[{i}]", f"input[{i}] is empty")
    fmt = b.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise invalid("encoding_format", f"encoding_format must be float or base64, got {fmt!r:.40}")
    dims = b.get("dimensions")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise invalid("dimensions", f"dimensions must be a positive integer, got {dims!r:.40}")
    mode = b.get("long_text_mode")
    if mode is not None and mode not in LONG_TEXT_MODES:
        raise invalid("long_text_mode", f"long_text_mode must be {' or '.join(LONG_TEXT_MODES)}, got {mode!r:.40}")
    return EmbeddingRequest(model=model, inputs=list(inputs), encoding_format=fmt, dimensions=dims,
                            long_text_mode=mode)


# ---------------------------------------------------------------- responses

def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def timings(c: Completion) -> dict[str, Any]:
    """llama-server's ``timings`` object for a finished request (a :class:`Completion`),
    measured by the engine itself: ``prompt_ms`` from submission to the first token (queueing and
    prefill), ``predicted_ms`` from the first token to the last, ``predicted_n`` generated tokens.
    Clients that compare the engine's rate with what they read (harness bench's server arms) see how
    much of a gap is delivery and how much is the engine."""
    prompt_ms, predicted_ms = 1e3 * c.ttft_s, 1e3 * max(0.0, c.total_s - c.ttft_s)
    n_prompt = max(0, c.n_prompt - c.n_cached)
    return {"cache_n": c.n_cached, "prompt_n": n_prompt, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / n_prompt if n_prompt else 0.0,
            "prompt_per_second": 1e3 * n_prompt / prompt_ms if prompt_ms > 0 else 0.0,
            "predicted_n": c.n_generated, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / c.n_generated if c.n_generated else 0.0,
            "predicted_per_second": 1e3 * c.n_generated / predicted_ms if predicted_ms > 0 else 0.0}


def finish_reason(engine_reason: str) -> str:
    """OpenAI's finish_reason for the engine's (stop | length | cancelled | tool_calls)."""
    return engine_reason if engine_reason in ("stop", "length", "tool_calls") else "stop"
