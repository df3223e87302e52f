"""Text specs on SmolLM2-135M-Instruct (HARNESS_CHAT_MODEL): completion, chat, streaming, sampling."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from harness.qualify.specs import model_path, require_variant
from harness.runtime import Runtime, parse_arguments

GREEDY: dict[str, Any] = {"temperature": 0.0, "max_tokens": 16}


@pytest.fixture(scope="session")
def smol(variant: str) -> Iterator[Runtime]:
    require_variant(variant)
    path = model_path("HARNESS_CHAT_MODEL")
    with Runtime.load(path, variant=variant, n_ctx=2048, max_num_seqs=8, threads=2) as eng:
        yield eng


def test_info_reports_variant_and_cpu_level(smol: Runtime, variant: str) -> None:
    info = smol.info()
    assert info["arch"] == "llama" and info["variant"] == variant
    assert info["n_ctx"] == 2048 and info["n_params"] > 100_000_000
    assert "CPU" in info["devices"]
    if variant == "cpu":
        assert info["cpu_variant"], "the run-time dispatched build names the libggml-cpu level it picked"


def test_completion_knows_paris(smol: Runtime) -> None:
    c = smol.complete("The capital of France is", GREEDY)
    assert "Paris" in c.text, c.text
    assert c.n_prompt > 0 and c.n_generated > 0


def test_chat_with_system_prompt_knows_paris(smol: Runtime) -> None:
    r = smol.chat([{"role": "system", "content": "You are a helpful geography assistant. Answer briefly."},
                   {"role": "user", "content": "What is the capital of France?"}], sampling={"temperature": 0, "max_tokens": 32})
    assert "Paris" in r.content, r.content
    assert r.message["role"] == "assistant"


def test_stream_equals_blocking(smol: Runtime) -> None:
    blocking = smol.complete("Once upon a time", temperature=0.0, max_tokens=40)
    s = smol.stream("Once upon a time", temperature=0.0, max_tokens=40)
    deltas = list(s)
    assert len(deltas) > 1
    assert "".join(deltas) == blocking.text
    assert s.result is not None and s.result.finish_reason == blocking.finish_reason


def test_stop_string_is_not_emitted(smol: Runtime) -> None:
    free = smol.complete("The capital of France is", GREEDY).text
    assert "Paris" in free
    c = smol.complete("The capital of France is", GREEDY, stop=["Paris"])
    assert c.finish_reason == "stop"
    assert "Paris" not in c.text and "Par" not in c.text[-3:]
    assert free.startswith(c.text)


def test_stop_string_spanning_tokens_never_leaks(smol: Runtime) -> None:
    free = smol.complete("The capital of France is", GREEDY).text
    i = free.index("Paris")
    stop = free[i - 1 : i + 3]  # e.g. " Par": crosses the token boundary before "Paris"
    deltas = list(smol.stream("The capital of France is", GREEDY, stop=[stop]))
    joined = "".join(deltas)
    assert stop not in joined
    assert joined == free[: free.index(stop)]


def test_max_tokens(smol: Runtime) -> None:
    c = smol.complete("List the numbers:", temperature=0.0, max_tokens=5, ignore_eos=True)
    assert c.n_generated == 5 and c.finish_reason == "length"


def test_greedy_with_ignore_eos_skips_the_end_token_as_the_sampler_does(smol: Runtime) -> None:
    """Greedy decoding takes the argmax directly (no sampler chain); with ignore_eos the argmax must skip
    end-of-generation tokens exactly as the sampler's -inf bias on them does. The prompt ends an
    answer, so the model's first choice after "Paris." is <|im_end|>: the skip is exercised."""
    prompt = ("<|im_start|>user\nWhat is the capital of France? One word.<|im_end|>\n<|im_start|>assistant\n")
    stopped = smol.complete(prompt, temperature=0.0, max_tokens=40)
    assert stopped.finish_reason == "stop" and stopped.n_generated < 40  # the model wants to end here
    direct = smol.complete(prompt, temperature=0.0, max_tokens=40, ignore_eos=True)
    # the same choice through the sampler chain: top_k 1 leaves only the argmax of the biased logits
    sampled = smol.complete(prompt, temperature=0.7, top_k=1, max_tokens=40, ignore_eos=True, seed=1)
    assert direct.n_generated == sampled.n_generated == 40
    assert direct.text == sampled.text
    assert direct.text.startswith(stopped.text)


def test_seed_reproducibility(smol: Runtime) -> None:
    a = smol.complete("Write a word:", temperature=1.0, seed=1234, max_tokens=20)
    b = smol.complete("Write a word:", temperature=1.0, seed=1234, max_tokens=20)
    assert a.text == b.text


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Get the local time in a timezone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}}


def test_tool_call_required(smol: Runtime) -> None:
    r = smol.chat([{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER],
                  tool_choice="required", sampling={"temperature": 0, "max_tokens": 64})
    calls = r.tool_calls
    assert calls, r.message
    assert calls[0]["function"]["name"] == "get_weather"
    assert isinstance(calls[0]["function"]["arguments"], str), "OpenAI's form: the JSON string"
    assert "city" in parse_arguments(calls[0])
    assert r.finish_reason == "tool_calls" and r.usage.completion_tokens == r.completion.n_generated


def test_tool_call_streams_as_deltas(smol: Runtime) -> None:
    s = smol.chat_stream([{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER],
                         tool_choice="required", sampling={"temperature": 0, "max_tokens": 64})
    deltas = list(s)
    calls = [c for d in deltas for c in d.tool_calls]
    assert not any(d.content for d in deltas), "the call's JSON does not leak into content"
    assert calls[0]["id"] and calls[0]["function"]["name"] == "get_weather"
    assert len(calls) > 2 and all("name" not in c["function"] for c in calls[1:])
    streamed = "".join(c["function"].get("arguments", "") for c in calls)
    assert s.message is not None and streamed == s.message["tool_calls"][0]["function"]["arguments"]
    assert s.finish_reason == "tool_calls"


def test_tool_call_named(smol: Runtime) -> None:
    r = smol.chat([{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER, TIME],
                  tool_choice={"type": "function", "function": {"name": "get_time"}},
                  sampling={"temperature": 0, "max_tokens": 64})
    assert [c["function"]["name"] for c in r.tool_calls] == ["get_time"], r.message


def test_json_schema_response(smol: Runtime) -> None:
    schema = {"type": "object", "properties": {"country": {"type": "string"}, "capital": {"type": "string"}},
              "required": ["country", "capital"], "additionalProperties": False}
    r = smol.chat([{"role": "user", "content": "Give the capital of France as JSON."}],
                  response_format={"type": "json_schema", "json_schema": {"schema": schema}},
                  sampling={"temperature": 0, "max_tokens": 64})
    data = json.loads(r.content)
    jsonschema.validate(data, schema)


def test_chat_stream_is_the_parsed_message(smol: Runtime) -> None:
    s = smol.chat_stream([{"role": "system", "content": "You are a helpful geography assistant. Answer briefly."},
                          {"role": "user", "content": "What is the capital of France?"}],
                         sampling={"temperature": 0, "max_tokens": 32})
    text = "".join(d.content for d in s)
    assert s.message is not None and "Paris" in s.message["content"] and text == s.message["content"]
    assert s.finish_reason in ("stop", "length")


def test_eight_concurrent_streams_finish(smol: Runtime) -> None:
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = "".join(smol.stream(f"Count from {i}:", temperature=0.0, max_tokens=24))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert sorted(results) == list(range(8)) and all(results.values())
    assert _settles(smol), smol.stats()


def _settles(eng: Runtime, seconds: float = 5.0) -> bool:
    """The decode loop frees slots asynchronously: wait briefly for it."""
    for _ in range(int(seconds / 0.01)):
        if eng.stats()["active"] == 0:
            return True
        threading.Event().wait(0.01)
    return False


def test_cancel_mid_stream_frees_the_slot(smol: Runtime) -> None:
    s = smol.stream("Tell me a long story about a dragon.", temperature=0.0, max_tokens=500, ignore_eos=True)
    got = [next(s), next(s)]
    s.close()
    assert all(isinstance(g, str) for g in got)
    assert _settles(smol), smol.stats()
    assert "Paris" in smol.complete("The capital of France is", GREEDY).text


def test_breaking_out_of_a_for_loop_cancels(smol: Runtime) -> None:
    before = smol.stats()["completed"]
    for i, _ in enumerate(smol.stream("Tell me a long story.", temperature=0.0, max_tokens=500, ignore_eos=True)):
        if i == 2:
            break
    assert _settles(smol), smol.stats()
    assert smol.stats()["completed"] > before


def test_prefix_cache_reuses_the_prompt(smol: Runtime) -> None:
    prompt = "The following is a long shared system prompt. " * 8 + "Question: what is 2+2?"
    smol.complete(prompt, temperature=0.0, max_tokens=4)
    again = smol.complete(prompt, temperature=0.0, max_tokens=4)
    assert again.n_cached > 0
