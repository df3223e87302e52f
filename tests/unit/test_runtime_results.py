"""Results as OpenAI clients read them: arguments as the JSON string, finish reasons, usage."""

from __future__ import annotations

import pytest

from harness.core import errors
from harness.runtime import ChatDelta, ChatResult, Completion, parse_arguments


def _completion(reason: str) -> Completion:
    return Completion(text="", finish_reason=reason, n_prompt=10, n_cached=3, n_generated=5, ttft_s=0.1, total_s=0.5)


CALL = {"id": "call_1_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_tool_call_arguments_stay_the_json_string() -> None:
    r = ChatResult(message={"role": "assistant", "content": "", "tool_calls": [CALL]}, completion=_completion("stop"))
    assert r.tool_calls[0]["function"]["arguments"] == '{"city": "Paris"}'
    assert parse_arguments(r.tool_calls[0]) == {"city": "Paris"}
    assert r.finish_reason == "tool_calls"


def test_a_call_cut_short_finishes_by_length() -> None:
    r = ChatResult(message={"role": "assistant", "tool_calls": [CALL]}, completion=_completion("length"))
    assert r.finish_reason == "length"


@pytest.mark.parametrize("args", ['{"city": "Par', "[1, 2]", "null"])
def test_arguments_that_are_not_an_object(args: str) -> None:
    with pytest.raises(errors.EngineError, match="get_weather"):
        parse_arguments({"function": {"name": "get_weather", "arguments": args}})


def test_usage() -> None:
    u = _completion("stop").usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens, u.cached_tokens) == (10, 5, 15, 3)
    assert u.as_openai() == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                             "prompt_tokens_details": {"cached_tokens": 3}}


def test_a_chat_delta_in_openais_shape() -> None:
    assert ChatDelta(content="Hi").as_openai() == {"content": "Hi"}
    d = ChatDelta(tool_calls=({"index": 0, "function": {"arguments": '{"ci'}},))
    assert d.as_openai() == {"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}
