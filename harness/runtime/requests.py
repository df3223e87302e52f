"""Request validation for the runtime: one place holds the limits, every refusal is typed.

Whatever a caller passes (a prompt, token ids, chat messages, tools, a response format,
sampling values), the answer is a result or an :class:`~harness.core.errors.InvalidRequestError`
naming the field: never a raw ``TypeError`` from a comparison, nor a pybind11 cast error
from the C++ side.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from harness.core.errors import InvalidRequestError


@dataclass(frozen=True, kw_only=True)
class RequestLimits:
    """Bounds on what one request may ask for (an engine may narrow them, never widen)."""

    max_tokens: int = 1 << 20
    """A generation longer than any context we load is a mistake, not a request."""
    top_k: int = 1 << 20
    seed: int = 1 << 32
    stop_strings: int = 16
    stop_chars: int = 512
    prompt_chars: int = 16 << 20
    grammar_chars: int = 1 << 20
    json_chars: int = 16 << 20
    """messages, tools and response formats, serialized"""
    json_depth: int = 64


LIMITS = RequestLimits()


def _utf8(text: str, field: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        msg = f"{field} is not valid Unicode text: {e.reason} at index {e.start} ({text[e.start:e.end]!r})"
        raise InvalidRequestError(msg) from None


def _depth(value: Any, limit: int, field: str) -> None:
    """Refuse nesting deeper than ``limit`` without recursion (so no RecursionError)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            msg = f"{field} is nested deeper than {limit} levels"
            raise InvalidRequestError(msg)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend((x, d + 1) for x in v)


def as_json(value: Any, field: str, limits: RequestLimits = LIMITS) -> str:
    """``value`` serialized for the C++ side, after the depth, size and text checks."""
    _depth(value, limits.json_depth, field)
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        msg = f"{field} is not JSON data: {e}"
        raise InvalidRequestError(msg) from None
    if len(text) > limits.json_chars:
        msg = f"{field} is {len(text)} characters of JSON, more than the limit of {limits.json_chars}"
        raise InvalidRequestError(msg)
    _utf8(text, field)
    return text


def prompt(value: Any, n_vocab: int, limits: RequestLimits = LIMITS) -> str | list[int]:
    """A text prompt or a list of token ids, checked."""
    if isinstance(value, str):
        if len(value) > limits.prompt_chars:
            msg = f"prompt is {len(value)} characters, more than the limit of {limits.prompt_chars}"
            raise InvalidRequestError(msg)
        _utf8(value, "prompt")
        return value
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence):
        msg = f"prompt must be a string or a sequence of token ids, got {type(value).__name__}"
        raise InvalidRequestError(msg)
    ids = list(value)
    if not ids:
        raise InvalidRequestError("prompt has no tokens")
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int):
            msg = f"prompt[{i}] must be a token id (int), got {t!r}"
            raise InvalidRequestError(msg)
        if not 0 <= t < n_vocab:
            msg = f"prompt[{i}] = {t} is not a token id of this model (0 <= id < {n_vocab})"
            raise InvalidRequestError(msg)
    return ids


def messages(value: Any, limits: RequestLimits = LIMITS) -> str:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise InvalidRequestError("messages must be a non-empty list of {'role': ..., 'content': ...} objects")
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            msg = f"messages[{i}] must be an object with a string 'role', got {m!r:.80}"
            raise InvalidRequestError(msg)
    return as_json(list(value), "messages", limits)


def tools(value: Any, limits: RequestLimits = LIMITS) -> str:
    if not value:
        return ""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Sequence):
        raise InvalidRequestError("tools must be a list of {'type': 'function', 'function': {...}} objects")
    for i, t in enumerate(value):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            msg = f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., 'parameters': ...}}}}"
            raise InvalidRequestError(msg)
        if "parameters" in fn:
            check_schema(fn["parameters"], f"tools[{i}].function.parameters")
    return as_json(list(value), "tools", limits)


def tool_choice(choice: Any) -> str:
    if isinstance(choice, dict):
        fn = choice.get("function", {})
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidRequestError('tool_choice must be "auto", "required", "none" or {"function": {"name": ...}}')
        return name
    if choice not in ("auto", "required", "none"):
        raise InvalidRequestError(f'tool_choice must be "auto", "required", "none" or a function, got {choice!r}')
    return str(choice)


def check_schema(schema: Any, field: str) -> None:
    """A JSON Schema the grammar converter can take: a valid schema whose regex patterns compile."""
    if not isinstance(schema, dict):
        msg = f"{field} must be a JSON Schema object, got {type(schema).__name__}"
        raise InvalidRequestError(msg)
    _depth(schema, LIMITS.json_depth, field)
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        msg = f"{field} is not a valid JSON Schema" + (f" at {where}" if where else "") + f": {e.message}"
        raise InvalidRequestError(msg) from None


def response_schema(fmt: Any) -> dict[str, Any] | None:
    """OpenAI's ``{"type": "json_schema", "json_schema": {"schema": ...}}``, ``json_object``, or a bare schema."""
    if fmt is None or fmt == {}:
        return None
    if not isinstance(fmt, dict):
        msg = f"response_format must be an object, got {type(fmt).__name__}"
        raise InvalidRequestError(msg)
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        inner = fmt.get("json_schema")
        if not isinstance(inner, dict):
            msg = f'response_format.json_schema must be an object ({{"name": ..., "schema": {{...}}}}), got {inner!r:.60}'
            raise InvalidRequestError(msg)
        schema = inner.get("schema", inner)
        check_schema(schema, "response_format.json_schema.schema")
        return dict(schema)
    check_schema(fmt, "response_format")
    return dict(fmt)
