"""``POST /v1/responses`` through the official ``openai`` client (its Responses types and its stream
helper), over a scripted chat engine run by the real AsyncRuntime: text and tool calls, whole and
streamed, the input items translated to the chat request the engine runs, and each refusal
naming the Responses field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from harness.runtime.aio import AsyncRuntime
from harness.runtime.api import ChatDelta, ChatResult, Completion
from harness.serve.app import ServedModel, create_app

openai = pytest.importorskip("openai")

CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
FRAGMENTS = ('{"city"', ': "Par', 'is"}')
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _completion(n: int, reason: str) -> Completion:
    return Completion(text="", finish_reason=reason, n_prompt=7, n_cached=2, n_generated=n, ttft_s=0.01, total_s=0.02)


class Scripted:
    """A runtime chat stream: ``deltas``, then its end (finish ``reason``) or ``error``."""

    def __init__(self, deltas: list[ChatDelta], reason: str, error: BaseException | None = None) -> None:
        self.deltas, self.reason, self.error = deltas, reason, error
        self.i = 0
        self.result: Completion | None = None
        self.finish_reason: str | None = None

    def __next__(self) -> ChatDelta:
        if self.i < len(self.deltas):
            self.i += 1
            return self.deltas[self.i - 1]
        if self.error is not None:
            raise self.error
        self.result = _completion(len(self.deltas), "stop" if self.reason == "tool_calls" else self.reason)
        self.finish_reason = self.reason
        raise StopIteration

    def close(self) -> None:
        pass


class Done:
    def __init__(self, result: ChatResult) -> None:
        self._result = result

    def result(self) -> ChatResult:
        return self._result

    def cancel(self) -> None:
        pass


class ChatEngine:
    """Answers every chat with ``deltas`` (streamed) or the message they make (not), and records
    what it was asked."""

    def __init__(self) -> None:
        self.deltas: list[ChatDelta] = [ChatDelta(content=t) for t in (" Paris", ", and", " more.")]
        self.reason = "stop"
        self.error: BaseException | None = None
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    def chat_stream(self, messages: Any, **kw: Any) -> Scripted:
        self.calls.append((list(messages), kw))
        return Scripted(self.deltas, self.reason, self.error)

    def start_chat(self, messages: Any, **kw: Any) -> Done:
        self.calls.append((list(messages), kw))
        content = "".join(d.content for d in self.deltas) or None
        calls: dict[int, dict[str, Any]] = {}
        for d in self.deltas:
            for c in d.tool_calls:
                have = calls.setdefault(c["index"], {**c, "function": dict(c["function"])})
                if have is not c:
                    have["function"]["arguments"] += c["function"].get("arguments", "")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = list(calls.values())
        return Done(ChatResult(message=message, completion=_completion(len(self.deltas), self.reason)))

    def stats(self) -> dict[str, int]:
        return {"active": 0, "pending": 0}

    def info(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


@pytest.fixture
def engine() -> ChatEngine:
    return ChatEngine()


@pytest.fixture
def http(engine: ChatEngine) -> Iterator[TestClient]:
    rt = AsyncRuntime(engine, max_concurrency=4)
    app = create_app({"fake": ServedModel(name="fake", engine=rt, capacity=4, context=256)})
    with TestClient(app) as c:
        yield c
    rt._pool.shutdown(wait=True)


@pytest.fixture
def client(http: TestClient) -> Any:
    """The official client, its HTTP through Starlette's test client (an httpx.Client)."""
    return openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)


def _tool_deltas() -> list[ChatDelta]:
    return [ChatDelta(tool_calls=(CALL,))] + [ChatDelta(tool_calls=({"index": 0, "function": {"arguments": a}},))
                                              for a in FRAGMENTS]


def test_a_text_answer(client: Any, engine: ChatEngine) -> None:
    r = client.responses.create(model="fake", input="capital of France?", instructions="Be brief.",
                                max_output_tokens=40, temperature=0.2)
    assert r.id.startswith("resp_") and r.object == "response" and r.status == "completed"
    assert r.output_text == " Paris, and more."
    (item,) = r.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert r.usage.input_tokens == 7 and r.usage.output_tokens == 3 and r.usage.total_tokens == 10
    assert r.usage.input_tokens_details.cached_tokens == 2
    assert r.max_output_tokens == 40 and r.instructions == "Be brief."
    messages, kw = engine.calls[-1]
    assert messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "capital of France?"}]
    assert kw["sampling"] == {"temperature": 0.2, "max_tokens": 40} and kw["tools"] is None


def test_a_tool_call_answer(client: Any, engine: ChatEngine) -> None:
    engine.deltas, engine.reason = _tool_deltas(), "stop"
    r = client.responses.create(model="fake", input="weather in Paris?", tools=[WEATHER], tool_choice="required")
    (call,) = r.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id == "call_1"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.id.startswith("fc_")
    _, kw = engine.calls[-1]
    assert kw["tools"] == [{"type": "function", "function": {k: WEATHER[k] for k in ("name", "description",
                                                                                      "parameters")}}]
    assert kw["tool_choice"] == "required"
    engine.calls.clear()
    client.responses.create(model="fake", input="x", tools=[WEATHER],
                            tool_choice={"type": "function", "name": "get_weather"})
    assert engine.calls[-1][1]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_a_streamed_text_answer_in_openai_event_order(client: Any) -> None:
    events = list(client.responses.create(model="fake", input="capital of France?", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == " Paris, and more."
    done = events[-1].response
    assert done.status == "completed" and done.output_text == " Paris, and more." and done.usage.output_tokens == 3
    assert len({events[0].response.id, done.id}) == 1
    item_ids = {e.item_id for e in events if hasattr(e, "item_id")}
    assert item_ids == {done.output[0].id}


def test_a_streamed_tool_call_through_the_stream_helper(client: Any, engine: ChatEngine) -> None:
    engine.deltas, engine.reason = [ChatDelta(content="Let me look."), *_tool_deltas()], "tool_calls"
    with client.responses.stream(model="fake", input="weather in Paris?", tools=[WEATHER]) as s:
        events = list(s)
        final = s.get_final_response()
    message, call = final.output
    assert message.type == "message" and message.content[0].text == "Let me look."
    assert call.type == "function_call" and call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert args == "".join(FRAGMENTS)
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [(e.name, e.arguments) for e in done] == [("get_weather", "".join(FRAGMENTS))]
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == [0, 1]


def test_a_conversation_with_tool_results_becomes_chat_messages(client: Any, engine: ChatEngine) -> None:
    client.responses.create(model="fake", input=[
        {"role": "developer", "content": "Use the tools."},
        {"role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city": "Lyon"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "20 C"}]},
    ], tools=[WEATHER])
    messages, _ = engine.calls[-1]
    assert messages == [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "20 C"}]},
    ]


def test_the_token_limit_makes_an_incomplete_response(client: Any, engine: ChatEngine) -> None:
    engine.reason = "length"
    r = client.responses.create(model="fake", input="x", max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete"
    events = list(client.responses.create(model="fake", input="x", max_output_tokens=3, stream=True))
    assert events[-1].type == "response.incomplete" and events[-1].response.incomplete_details.reason == "max_output_tokens"


def test_an_engine_error_mid_stream_is_an_error_event_and_a_failed_response(client: Any, engine: ChatEngine) -> None:
    from harness.core.errors import EngineCrashError

    engine.error = EngineCrashError("the engine of model fake crashed: SIGSEGV (segmentation fault)")
    events = list(client.responses.create(model="fake", input="x", stream=True))
    error, failed = events[-2:]
    assert error.type == "error" and error.code == "engine_crashed" and "SIGSEGV" in error.message
    assert failed.type == "response.failed" and failed.response.status == "failed"
    assert "SIGSEGV" in failed.response.error.message
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == " Paris, and more."


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"input": "x", "temperature": 5}, "temperature"),
    ({"input": "x", "max_output_tokens": 256}, "max_output_tokens"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": 3}}}}, "text.format"),
    ({"input": "x", "tools": [{**WEATHER, "parameters": {"type": "nope"}}]}, "tools[0].parameters"),
    ({"input": "x", "temprature": 0.1}, "temprature"),
    ({"input": []}, "input"),
    ({"input": "x", "background": True}, "background"),
])
def test_refusals_name_the_responses_field(http: TestClient, body: dict[str, Any], param: str) -> None:
    r = http.post("/v1/responses", json={"model": "fake", **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert "messages" not in err["message"] and "function." not in err["message"], err


def test_the_route_answers_the_openai_error_shape_for_a_wrong_model(client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="gpt-5", input="x")
    assert e.value.body["code"] == "model_not_found"
