"""OpenAI's Responses API (``POST /v1/responses``) on the chat path.

A Responses request becomes the chat request the engine runs: ``instructions`` and ``input``
items become messages (a ``function_call`` item an assistant tool call, a ``function_call_output``
item a tool message), flat function tools become chat tools, ``text.format`` the
``response_format``, ``max_output_tokens`` the ``max_tokens``; then :func:`protocol.chat_request`
checks it, each refusal naming the Responses field. The result becomes a Response object, and a
stream of chat deltas the Responses stream events, in OpenAI's order: ``response.created``,
``response.in_progress``, per output item (reasoning, message, function call) ``output_item.added``,
its deltas and ``.done`` events, and ``response.completed`` (``response.incomplete`` at the token
limit; an ``error`` event and ``response.failed`` when the engine fails).

This server stores no responses: ``previous_response_id`` and ``conversation`` are refused (send
the conversation so far in ``input``; a previous response's output items go in as they are).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from harness.core import errors
from harness.runtime.api import ChatDelta, ChatResult, Completion, coalesce
from harness.serve import protocol
from harness.serve.protocol import APIError, invalid

#: Request fields: the Responses API's, and llama-server's sampling extensions under the chat names.
_KEYS = frozenset({
    "model", "input", "instructions", "tools", "tool_choice", "text", "max_output_tokens", "temperature", "top_p",
    "stream", "stream_options", "store", "metadata", "user", "parallel_tool_calls", "reasoning", "include",
    "truncation", "service_tier", "previous_response_id", "conversation", "background", "prompt", "top_logprobs",
    "max_tool_calls", "safety_identifier", "prompt_cache_key",
    "top_k", "min_p", "repeat_penalty", "repetition_penalty", "seed", "presence_penalty", "frequency_penalty",
    "ignore_eos"})
#: Fields passed on to the chat request as they are (sampling).
_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "repetition_penalty", "seed",
             "presence_penalty", "frequency_penalty", "ignore_eos")


def new_id(prefix: str) -> str:
    """An id in OpenAI's Responses form (``resp_...``, ``msg_...``, ``fc_...``)."""
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True, kw_only=True)
class ResponsesRequest:
    chat: protocol.ChatRequest
    """what the engine runs"""
    echo: dict[str, Any]
    """the request's settings as a Response object repeats them"""


def _text(content: Any, param: str, role: str) -> str | list[dict[str, Any]]:
    """A message's content: a string, or its text parts as chat text parts (text only)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(param, f"{param} must be a string or an array of input_text parts")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "refusal") or not isinstance(part.get(
                "refusal" if kind == "refusal" else "text"), str):
            raise invalid(f"{param}[{j}]", f"{param}[{j}] must be a text part ({{\"type\": \"input_text\", \"text\": ...}}"
                                           f"{', or output_text for an assistant' if role == 'assistant' else ''}): "
                                           "this server takes text only")
        parts.append({"type": "text", "text": part["refusal" if kind == "refusal" else "text"]})
    return parts


def _string(item: dict[str, Any], key: str, param: str) -> str:
    v = item.get(key)
    if not isinstance(v, str) or not v:
        raise invalid(f"{param}.{key}", f"{param}.{key} is required (a non-empty string)")
    return v


def _messages(b: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The chat messages of ``instructions`` and ``input``, and the field each came from."""
    messages: list[dict[str, Any]] = []
    origin: list[str] = []
    instructions = b.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise invalid("instructions", "instructions must be a string (the system message)")
        messages.append({"role": "system", "content": instructions})
        origin.append("instructions")
    inp = b.get("input")
    if isinstance(inp, str):
        if not inp:
            raise invalid("input", "input must not be empty")
        messages.append({"role": "user", "content": inp})
        origin.append("input")
        return messages, origin
    if not isinstance(inp, list) or not inp:
        raise invalid("input", "input must be a string or a non-empty array of input items")
    for i, item in enumerate(inp):
        p = f"input[{i}]"
        if not isinstance(item, dict):
            raise invalid(p, f"{p} must be an object, got {type(item).__name__}")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise invalid(f"{p}.role", f"{p}.role must be one of user, system, developer, assistant; "
                                           f"got {role!r:.40}")
            messages.append({"role": role, "content": _text(item.get("content"), f"{p}.content", role)})
            origin.append(p)
        elif kind == "function_call":
            arguments = item.get("arguments") or "{}"
            if not isinstance(arguments, str):
                raise invalid(f"{p}.arguments", f"{p}.arguments must be a JSON string")
            call = {"id": _string(item, "call_id", p), "type": "function",
                    "function": {"name": _string(item, "name", p), "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # one assistant turn: its text and its calls
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                origin.append(p)
        elif kind == "function_call_output":
            out = item.get("output")
            content = out if isinstance(out, str) else _text(out, f"{p}.output", "tool")
            messages.append({"role": "tool", "tool_call_id": _string(item, "call_id", p), "content": content})
            origin.append(p)
        elif kind == "reasoning":
            continue  # the model's reasoning in an earlier turn: chat templates leave it out
        else:
            raise invalid(f"{p}.type", f"input item type {kind!r:.40} is not supported: this server takes message, "
                                       "function_call, function_call_output and reasoning items")
    if not messages:
        raise invalid("input", "input holds no message")
    return messages, origin


def _tools(b: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = b.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise invalid("tools", "tools must be an array of {\"type\": \"function\", \"name\": ...} objects")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function":
            kind = t.get("type") if isinstance(t, dict) else None
            raise invalid(f"tools[{i}].type", f"tools[{i}] is a {kind!r:.40} tool: this server runs function tools "
                                              "only (type: function); built-in tools are not available")
        fn: dict[str, Any] = {"name": _string(t, "name", f"tools[{i}]")}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        if t.get("parameters") is not None:
            fn["parameters"] = t["parameters"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(b: dict[str, Any]) -> str | dict[str, Any]:
    choice = b.get("tool_choice", "auto")
    if choice is None or choice in ("auto", "none", "required"):
        return choice or "auto"
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise invalid("tool_choice", "tool_choice must be auto, none, required or {\"type\": \"function\", \"name\": ...}")


def _format(b: dict[str, Any]) -> dict[str, Any] | None:
    text = b.get("text")
    if text is None:
        return None
    if not isinstance(text, dict) or set(text) - {"format", "verbosity"}:
        raise invalid("text", "text must be an object with format (and verbosity)")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise invalid("text.format.type", "text.format.type must be text, json_object or json_schema")


def _refuse_unsupported(b: dict[str, Any]) -> None:
    """What the API has and this server does not do: refused by name, never silently ignored."""
    for key in ("previous_response_id", "conversation"):
        if b.get(key) is not None:
            raise invalid(key, f"{key} is not supported: this server stores no responses; send the conversation "
                               "so far in input (a previous response's output items go in as they are)")
    if b.get("background"):
        raise invalid("background", "background responses are not supported: stream, or wait for the answer")
    if b.get("prompt") is not None:
        raise invalid("prompt", "reusable prompts are not supported: send instructions and input")
    if b.get("top_logprobs") not in (None, 0):
        raise invalid("top_logprobs", "logprobs are not supported by this server; leave top_logprobs unset")
    if b.get("truncation") not in (None, "disabled"):
        raise invalid("truncation", "truncation auto is not supported: an input larger than the context is "
                                    "refused (truncation: disabled)")
    include = b.get("include")
    if include is not None and (not isinstance(include, list) or "message.output_text.logprobs" in include):
        raise invalid("include", "include must be an array; message.output_text.logprobs is not supported")


#: chat request fields -> the Responses fields they came from, for refusals
_RENAMED = (("max_tokens", "max_output_tokens"), ("response_format", "text.format"))


def _renamed(e: APIError, origin: list[str]) -> APIError:
    """A refusal of the chat request, naming the Responses field it came from."""
    param = e.param
    if param is None:
        return e
    new = param
    if m := re.match(r"messages\[(\d+)\](.*)", param):
        src = origin[int(m.group(1))]
        new = src + (m.group(2) if src.startswith("input[") else "")
    elif param == "messages":
        new = "input"
    elif m := re.match(r"tools\[(\d+)\]\.function(.*)", param):
        new = f"tools[{m.group(1)}]{m.group(2)}"
    else:
        for old, replacement in _RENAMED:
            if param.startswith(old):
                new = replacement + param[len(old):]
    if new == param:
        return e
    message = e.message.replace("response_format.json_schema.", "text.format.").replace(param, new)
    return APIError(e.status, message, type=e.type, param=new, code=e.code, headers=e.headers)


def responses_request(body: Any) -> ResponsesRequest:
    if not isinstance(body, dict):
        raise invalid(None, f"the request body must be a JSON object, got {type(body).__name__}")
    for k in body:
        if k not in _KEYS:
            raise invalid(k, f"unrecognized request argument supplied: {k}{errors.did_you_mean(k, sorted(_KEYS))}")
    _refuse_unsupported(body)
    messages, origin = _messages(body)
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages,
                            "tool_choice": _tool_choice(body), "stream": body.get("stream", False)}
    tools = _tools(body)
    if tools is not None:
        chat["tools"] = tools
    fmt = _format(body)
    if fmt is not None:
        chat["response_format"] = fmt
    for key in _SAMPLING:
        if key in body:
            chat[key] = body[key]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    try:
        req = protocol.chat_request(chat)
    except APIError as e:
        raise _renamed(e, origin) from None
    echo = {
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "temperature": body.get("temperature"), "top_p": body.get("top_p"),
        "tool_choice": body.get("tool_choice") or "auto", "tools": body.get("tools") or [],
        "text": {"format": (body.get("text") or {}).get("format") or {"type": "text"}},
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "metadata": body.get("metadata") or {}, "user": body.get("user"),
        "reasoning": {"effort": None, "summary": None}, "truncation": "disabled", "store": False,
        "previous_response_id": None, "background": False,
    }
    return ResponsesRequest(chat=req, echo=echo)


# ---------------------------------------------------------------- answers

def _usage(c: Completion | None, reasoning: bool) -> dict[str, Any] | None:
    if c is None:
        return None
    usage: dict[str, Any] = {"input_tokens": c.n_prompt, "input_tokens_details": {"cached_tokens": c.n_cached},
                             "output_tokens": c.n_generated, "total_tokens": c.n_prompt + c.n_generated}
    if not reasoning:  # the reasoning share of a reasoning model's tokens is not counted apart
        usage["output_tokens_details"] = {"reasoning_tokens": 0}
    return usage


def _status(finish_reason: str | None) -> tuple[str, dict[str, Any] | None]:
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: ".encode() + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


class ResponseEvents:
    """One response, answered whole (:meth:`complete`) or as its stream of events (:meth:`opening`,
    :meth:`feed` per batch of chat deltas, then :meth:`finish` or :meth:`fail`)."""

    def __init__(self, rid: str, model: str, req: ResponsesRequest) -> None:
        self.id = rid
        self.model = model
        self.req = req
        self.created = protocol.now()
        self.output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._calls: dict[int, tuple[int, dict[str, Any]]] = {}
        """the engine's tool-call index -> (output index, item)"""
        self._seq = 0
        self._reasoned = False

    def response(self, status: str, *, usage: dict[str, Any] | None = None, error: dict[str, Any] | None = None,
                 incomplete: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status, "error": error,
                "incomplete_details": incomplete, "model": self.model, "output": self.output, "usage": usage,
                **self.req.echo}

    # ---------------------------------------------------------------- whole
    def complete(self, result: ChatResult) -> dict[str, Any]:
        message = result.message
        if message.get("reasoning_content"):
            self._reasoned = True
            self.output.append({"type": "reasoning", "id": new_id("rs"), "summary": [], "status": "completed",
                                "content": [{"type": "reasoning_text", "text": message["reasoning_content"]}]})
        if message.get("content"):
            self.output.append({"type": "message", "id": new_id("msg"), "status": "completed", "role": "assistant",
                                "content": [{"type": "output_text", "text": message["content"], "annotations": [],
                                             "logprobs": []}]})
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            self.output.append({"type": "function_call", "id": new_id("fc"), "call_id": call.get("id") or new_id("call"),
                                "name": fn.get("name") or "", "arguments": fn.get("arguments") or "",
                                "status": "completed"})
        status, incomplete = _status(result.finish_reason)
        if incomplete and self.output:
            self.output[-1]["status"] = "incomplete"
        return self.response(status, usage=_usage(result.completion, self._reasoned), incomplete=incomplete)

    # ---------------------------------------------------------------- streamed
    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return _sse(kind, data)

    def opening(self) -> bytes:
        return (self._event("response.created", response=self.response("in_progress"))
                + self._event("response.in_progress", response=self.response("in_progress")))

    def feed(self, deltas: list[ChatDelta]) -> bytes:
        out: list[bytes] = []
        for d in coalesce(deltas):
            if d.reasoning_content:
                self._reasoned = True
                out.append(self._text("reasoning", d.reasoning_content))
            if d.content:
                out.append(self._text("message", d.content))
            for call in d.tool_calls:
                out.append(self._call(call))
        return b"".join(out)

    def _add(self, item: dict[str, Any], part: dict[str, Any] | None) -> bytes:
        self.output.append(item)
        self._open = item
        index = len(self.output) - 1
        out = self._event("response.output_item.added", output_index=index, item=item)
        if part is not None:
            out += self._event("response.content_part.added", item_id=item["id"], output_index=index,
                               content_index=0, part=part)
            item["content"].append(part)
        return out

    def _text(self, kind: str, text: str) -> bytes:
        out = b""
        if self._open is None or self._open["type"] != kind:
            out += self._close("completed")
            if kind == "message":
                out += self._add({"type": "message", "id": new_id("msg"), "status": "in_progress", "role": "assistant",
                                  "content": []}, {"type": "output_text", "text": "", "annotations": [], "logprobs": []})
            else:
                out += self._add({"type": "reasoning", "id": new_id("rs"), "summary": [], "status": "in_progress",
                                  "content": []}, {"type": "reasoning_text", "text": ""})
        item = self._open
        assert item is not None
        item["content"][0]["text"] += text
        index = len(self.output) - 1
        if kind == "message":
            return out + self._event("response.output_text.delta", item_id=item["id"], output_index=index,
                                     content_index=0, delta=text, logprobs=[])
        return out + self._event("response.reasoning_text.delta", item_id=item["id"], output_index=index,
                                 content_index=0, delta=text)

    def _call(self, call: dict[str, Any]) -> bytes:
        """A tool-call delta: a call's opening (its index first seen: id and name) adds its item,
        argument fragments go to the item of their index."""
        out = b""
        fn = call.get("function") or {}
        key = int(call.get("index", 0))
        if key not in self._calls:
            out += self._close("completed")
            item = {"type": "function_call", "id": new_id("fc"), "call_id": call.get("id") or new_id("call"),
                    "name": fn.get("name") or "", "arguments": "", "status": "in_progress"}
            self._calls[key] = (len(self.output), item)
            out += self._add(item, None)
        index, item = self._calls[key]
        args = str(fn.get("arguments") or "")
        if args:
            item["arguments"] += args
            out += self._event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                               delta=args)
        return out

    def _close(self, status: str) -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        index = len(self.output) - 1
        out = b""
        if item["type"] == "function_call":
            out += self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                               name=item["name"], arguments=item["arguments"])
        else:
            part = item["content"][0]
            if item["type"] == "message":
                out += self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                   content_index=0, text=part["text"], logprobs=[])
            else:
                out += self._event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                   content_index=0, text=part["text"])
            out += self._event("response.content_part.done", item_id=item["id"], output_index=index,
                               content_index=0, part=part)
        item["status"] = status
        return out + self._event("response.output_item.done", output_index=index, item=item)

    def finish(self, result: Completion | None, finish_reason: str | None) -> bytes:
        status, incomplete = _status(finish_reason or (result.finish_reason if result else None))
        out = self._close("incomplete" if incomplete else "completed")
        kind = "response.incomplete" if incomplete else "response.completed"
        return out + self._event(kind, response=self.response(status, usage=_usage(result, self._reasoned),
                                                              incomplete=incomplete))

    def fail(self, error: APIError) -> bytes:
        out = self._close("incomplete")
        out += self._event("error", code=error.code or error.type, message=error.message, param=error.param)
        failed = {"code": "server_error" if error.status >= 500 else "invalid_prompt", "message": error.message}
        return out + self._event("response.failed", response=self.response("failed", error=failed))
