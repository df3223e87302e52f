"""OpenAI request bodies -> engine calls: what is taken, what is refused, and the field named."""

from __future__ import annotations

from typing import Any

import pytest

from harness.cli.serve import check_options
from harness.core import errors
from harness.core.errors import UsageError
from harness.serve import protocol
from harness.serve.protocol import APIError

USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def refused(fn: Any, body: Any) -> APIError:
    with pytest.raises(APIError) as e:
        fn(body)
    assert e.value.status == 400 and e.value.message
    return e.value


def test_a_chat_request_maps_onto_the_engine_call() -> None:
    r = protocol.chat_request({"model": "m", "messages": USER, "temperature": 0.2, "max_completion_tokens": 7,
                               "stop": "\n", "seed": -1, "tools": [TOOL], "tool_choice": "required",
                               "stream": True, "stream_options": {"include_usage": True}, "top_k": 5,
                               "repeat_penalty": 1.1, "user": "someone", "parallel_tool_calls": False})
    assert r.model == "m" and r.stream and r.include_usage
    assert r.sampling == {"temperature": 0.2, "max_tokens": 7, "stop": ["\n"], "seed": 2**32 - 1, "top_k": 5,
                          "repetition_penalty": 1.1}
    assert r.engine_kwargs()["tools"] == [TOOL] and r.engine_kwargs()["tool_choice"] == "required"


def test_only_what_a_request_sets_reaches_the_sampling() -> None:
    """Unset values stay unset, so the config's defaults fill them in the engine."""
    assert protocol.chat_request({"model": "m", "messages": USER}).sampling == {}


def test_developer_messages_are_system_messages() -> None:
    r = protocol.chat_request({"model": "m", "messages": [{"role": "developer", "content": "be brief"}, *USER]})
    assert r.messages[0]["role"] == "system"


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": USER}, "model"),
    ({"model": "m"}, "messages"),
    ({"model": "m", "messages": "hi"}, "messages"),
    ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "messages": [USER[0], {"role": "user"}]}, "messages[1].content"),
    ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0]"),
    ({"model": "m", "messages": USER, "temperature": 2.5}, "temperature"),
    ({"model": "m", "messages": USER, "temperature": "hot"}, "temperature"),
    ({"model": "m", "messages": USER, "top_p": 0}, "top_p"),
    ({"model": "m", "messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"model": "m", "messages": USER, "max_tokens": 1.5}, "max_tokens"),
    ({"model": "m", "messages": USER, "presence_penalty": 3}, "presence_penalty"),
    ({"model": "m", "messages": USER, "stop": ["", "x"]}, "stop"),
    ({"model": "m", "messages": USER, "stop": [str(i) for i in range(17)]}, "stop"),
    ({"model": "m", "messages": USER, "n": 2}, "n"),
    ({"model": "m", "messages": USER, "logprobs": True}, "logprobs"),
    ({"model": "m", "messages": USER, "tools": {"type": "function"}}, "tools"),
    ({"model": "m", "messages": USER, "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
    ({"model": "m", "messages": USER, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]},
     "tools[0].function.parameters"),
    ({"model": "m", "messages": USER, "tool_choice": "required"}, "tool_choice"),
    ({"model": "m", "messages": USER, "tool_choice": "sometimes", "tools": [TOOL]}, "tool_choice"),
    ({"model": "m", "messages": USER, "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "other"}}},
     "tool_choice"),
    ({"model": "m", "messages": USER, "response_format": {"type": "yaml"}}, "response_format.type"),
    ({"model": "m", "messages": USER, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 7}}}},
     "response_format"),
    ({"model": "m", "messages": USER, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"model": "m", "messages": USER, "stream": True, "stream_options": {"include_usage": "yes"}},
     "stream_options.include_usage"),
    ({"model": "m", "messages": USER, "temprature": 0}, "temprature"),
    ({"model": "m", "messages": USER, "functions": [{}]}, "functions"),
])
def test_bad_chat_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    assert refused(protocol.chat_request, body).param == param


def test_an_unknown_field_gets_did_you_mean() -> None:
    e = refused(protocol.chat_request, {"model": "m", "messages": USER, "temprature": 0})
    assert "temperature" in e.message


def test_the_body_must_be_an_object() -> None:
    assert refused(protocol.chat_request, [1, 2]).param is None


@pytest.mark.parametrize(("prompt", "taken"), [
    ("Once", "Once"), (["Once"], "Once"), ([1, 2, 3], [1, 2, 3]), ([[1, 2]], [1, 2]),
])
def test_completion_prompts(prompt: Any, taken: Any) -> None:
    assert protocol.completion_request({"model": "m", "prompt": prompt}).prompt == taken


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m", "prompt": ""}, "prompt"),
    ({"model": "m", "prompt": ["a", "b"]}, "prompt"),
    ({"model": "m", "prompt": [1, "a"]}, "prompt"),
    ({"model": "m", "prompt": 3}, "prompt"),
    ({"model": "m", "prompt": "x", "echo": True}, "echo"),
    ({"model": "m", "prompt": "x", "suffix": "y"}, "suffix"),
    ({"model": "m", "prompt": "x", "best_of": 3}, "best_of"),
    ({"model": "m", "prompt": "x", "grammar": 5}, "grammar"),
])
def test_bad_completion_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    assert refused(protocol.completion_request, body).param == param


def test_a_completion_grammar_reaches_the_sampling() -> None:
    r = protocol.completion_request({"model": "m", "prompt": "x", "grammar": 'root ::= "a"'})
    assert r.sampling["grammar"] == 'root ::= "a"'


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m"}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": [[1, 2]]}, "input"),
    ({"model": "m", "input": ["a", ""]}, "input[1]"),
    ({"model": "m", "input": "a", "encoding_format": "hex"}, "encoding_format"),
    ({"model": "m", "input": "a", "dimensions": 0}, "dimensions"),
    ({"model": "m", "input": "a", "dimensions": True}, "dimensions"),
    ({"model": "m", "input": "a", "dimensions": "8"}, "dimensions"),
    ({"model": "m", "input": "a", "long_text_mode": "average"}, "long_text_mode"),
])
def test_bad_embedding_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    assert refused(protocol.embedding_request, body).param == param


def test_dimensions_and_long_text_mode_reach_the_engine() -> None:
    r = protocol.embedding_request({"model": "m", "input": "a", "dimensions": 8, "long_text_mode": "truncate"})
    assert r.engine_kwargs() == {"dimensions": 8, "long_text_mode": "truncate"}
    assert protocol.embedding_request({"model": "m", "input": "a"}).engine_kwargs() == {}


def test_error_body_is_openais_shape() -> None:
    e = protocol.invalid("temperature", "temperature must be in [0, 2], got 5")
    assert e.body() == {"error": {"message": "temperature must be in [0, 2], got 5", "type": "invalid_request_error",
                                  "param": "temperature", "code": None}}


@pytest.mark.parametrize(("exc", "status", "code"), [
    (errors.ContextOverflowError("request of 3000 prompt tokens does not fit the context of 2048 tokens"), 400,
     "context_length_exceeded"),
    (errors.InvalidRequestError("tool_choice names function 'x' which is not in tools"), 400, None),
    (errors.KVCacheFullError("KV cache full"), 503, "kv_cache_full"),
    (errors.EngineClosedError("engine is closed"), 503, "engine_closed"),
    (errors.EngineError("decode failed"), 500, None),
])
def test_engine_errors_map_to_http(exc: Exception, status: int, code: str | None) -> None:
    e = protocol.from_engine_error(exc)
    assert (e.status, e.code) == (status, code)
    assert str(exc) in e.message


def test_engine_messages_name_their_field() -> None:
    e = protocol.from_engine_error(errors.InvalidRequestError("tool_choice names function 'x' which is not in tools"))
    assert e.param == "tool_choice"


def test_a_full_kv_cache_says_when_to_retry() -> None:
    assert protocol.from_engine_error(errors.KVCacheFullError("full")).headers == {"Retry-After": "1"}


def test_loopback_by_default_and_a_key_for_anything_else() -> None:
    assert check_options("127.0.0.1", 8080, None, None).host == "127.0.0.1"
    assert check_options("::1", 0, None, None).port == 0
    assert check_options("localhost", 1, None, 0).max_queue == 0
    with pytest.raises(UsageError, match="--api-key"):
        check_options("0.0.0.0", 8080, None, None)
    assert check_options("0.0.0.0", 8080, "k", None).api_key == "k"


@pytest.mark.parametrize(("host", "port", "key", "queue", "match"), [
    ("127.0.0.1", 70000, None, None, "--port"),
    ("127.0.0.1", 8080, "  ", None, "--api-key is empty"),
    ("127.0.0.1", 8080, None, -1, "--max-queue"),
])
def test_bad_serve_options(host: str, port: int, key: str | None, queue: int | None, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        check_options(host, port, key, queue)


@pytest.mark.parametrize(("timeouts", "match"), [
    ((0.0, 30.0, 30.0), "--header-timeout"),
    ((10.0, float("nan"), 30.0), "--body-timeout"),
    ((10.0, 30.0, 1e9), "--write-timeout"),
])
def test_client_timeouts_are_positive_and_bounded(timeouts: tuple[float, float, float], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        check_options("127.0.0.1", 8080, None, None, timeouts)
    assert check_options("127.0.0.1", 8080, None, None, (0.5, 1, 2)).timeouts == (0.5, 1, 2)


def test_an_engine_crash_is_a_503_naming_it() -> None:
    e = protocol.from_engine_error(errors.EngineCrashError("the engine of model m crashed: SIGSEGV"))
    assert e.status == 503 and e.code == "engine_crashed" and "SIGSEGV" in e.message
