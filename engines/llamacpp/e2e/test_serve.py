"""``harness serve`` answers the official ``openai`` client: chat, streams, tools, JSON schema,
the Responses API, embeddings, concurrency, disconnects, overload and bad requests.

Each server is a child process on 127.0.0.1 at a free port, stopped by the fixture's finalizer
whatever the test did; every wait is bounded.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import numpy as np
import pytest

openai = pytest.importorskip("openai")

from harness.qualify.specs import model_path, require_variant  # noqa: E402
from harness.runtime import parse_arguments  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"
ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 120.0

CHAT_CONFIG = """\
name: smol
backend: llamacpp
context_size: 2048
parameters:
  model: {model}
  temperature: 0
  max_tokens: 64
options:
  - n_parallel:{parallel}
  - threads:2
"""
EMBED_CONFIG = """\
name: minilm
backend: llamacpp
context_size: 512
embeddings: true
parameters:
  model: {model}
options:
  - n_parallel:4
  - threads:2
"""
GEO = [{"role": "system", "content": "You are a helpful geography assistant. Answer briefly."},
       {"role": "user", "content": "What is the capital of France?"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Get the local time in a timezone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    base: str
    proc: subprocess.Popen[bytes]
    log: Path
    clients: list[Any] = field(default_factory=list)

    @property
    def root(self) -> str:
        return self.base.removesuffix("/v1")

    def client(self, **kw: Any) -> Any:
        c = openai.OpenAI(base_url=self.base, api_key=kw.pop("api_key", "unused"), max_retries=0,
                          timeout=kw.pop("timeout", 120.0), **kw)
        self.clients.append(c)  # closed with the server: no socket outlives the test module
        return c

    def health(self) -> dict[str, Any]:
        return dict(httpx.get(self.root + "/health", timeout=10).json())


def _start(tmp: Path, variant: str, configs: list[Path], *extra: str) -> Iterator[Server]:
    port = _free_port()
    log = tmp / f"serve-{port}.log"
    argv = [sys.executable, "-m", "harness", "serve", *map(str, configs), "--host", "127.0.0.1", "--port", str(port),
            "--variant", variant, *extra]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    server = Server(base=f"http://127.0.0.1:{port}/v1", proc=proc, log=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"harness serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(server.root + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"harness serve did not answer /health within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield server
    finally:
        for c in server.clients:
            c.close()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _config(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def _models() -> tuple[Path, str, str]:
    """(models dir, chat model, embedding model): configs name models relative to their directory."""
    chat, embed = model_path("HARNESS_CHAT_MODEL").resolve(), model_path("HARNESS_EMBED_MODEL").resolve()
    root = Path(os.path.commonpath([chat, embed]))
    return root, chat.relative_to(root).as_posix(), embed.relative_to(root).as_posix()


@pytest.fixture(scope="module")
def server(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_variant(variant)
    tmp = tmp_path_factory.mktemp("serve")
    root, chat_model, embed_model = _models()
    chat = _config(tmp, "smol.yaml", CHAT_CONFIG.format(model=chat_model, parallel=4))
    embed = _config(tmp, "minilm.yaml", EMBED_CONFIG.format(model=embed_model))
    yield from _start(tmp, variant, [chat, embed], "--models-dir", str(root), "--max-queue", "16", "--api-key", "sekrit")


@pytest.fixture(scope="module")
def small(variant: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Two sequences and no queue: the third request at once is one too many."""
    require_variant(variant)
    tmp = tmp_path_factory.mktemp("serve-small")
    root, chat_model, _ = _models()
    chat = _config(tmp, "smol.yaml", CHAT_CONFIG.format(model=chat_model, parallel=2))
    yield from _start(tmp, variant, [chat], "--models-dir", str(root), "--max-queue", "0")


@pytest.fixture()
def client(server: Server) -> Any:
    return server.client(api_key="sekrit")


def test_models_lists_the_configs(client: Any) -> None:
    assert sorted(m.id for m in client.models.list()) == ["minilm", "smol"]


def test_chat_answers_paris(client: Any) -> None:
    r = client.chat.completions.create(model="smol", messages=GEO, max_tokens=32)
    assert "Paris" in r.choices[0].message.content, r
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_equals_the_blocking_answer(client: Any) -> None:
    blocking = client.chat.completions.create(model="smol", messages=GEO, max_tokens=32)
    chunks = list(client.chat.completions.create(model="smol", messages=GEO, max_tokens=32, stream=True,
                                                  stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == blocking.choices[0].message.content
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 2, "streamed in pieces"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [blocking.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == blocking.usage.completion_tokens


def test_stream_without_include_usage_has_no_usage_chunk(client: Any) -> None:
    chunks = list(client.chat.completions.create(model="smol", messages=GEO, max_tokens=8, stream=True))
    assert all(c.usage is None for c in chunks) and all(c.choices for c in chunks)


def test_completions_stream_and_blocking(client: Any) -> None:
    r = client.completions.create(model="smol", prompt="The capital of France is", max_tokens=16)
    assert "Paris" in r.choices[0].text
    parts = list(client.completions.create(model="smol", prompt="The capital of France is", max_tokens=16,
                                           stream=True))
    assert "".join(p.choices[0].text for p in parts if p.choices) == r.choices[0].text


def test_the_engines_own_timings_come_with_the_answer(client: Any) -> None:
    """llama-server's ``timings`` (the engine's stamps): on a whole answer and on a stream's last event,
    counting the tokens the client got, so a client can tell delivery time from engine time."""
    r = client.completions.create(model="smol", prompt="Count: 1, 2, 3,", max_tokens=12,
                                  extra_body={"ignore_eos": True})
    t = r.model_extra["timings"]
    assert t["predicted_n"] == r.usage.completion_tokens == 12 and t["prompt_n"] == r.usage.prompt_tokens
    assert t["prompt_ms"] > 0 and t["predicted_ms"] > 0
    assert t["predicted_per_second"] == pytest.approx(1e3 * 12 / t["predicted_ms"])
    chunks = list(client.chat.completions.create(model="smol", messages=GEO, max_tokens=8, stream=True,
                                                 stream_options={"include_usage": True}))
    timed = [c for c in chunks if (c.model_extra or {}).get("timings")]
    assert len(timed) == 1 and timed[0].choices[0].finish_reason is not None
    assert timed[0].model_extra["timings"]["predicted_n"] == chunks[-1].usage.completion_tokens


def test_tool_call_not_streamed(client: Any) -> None:
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                                       tools=[WEATHER], tool_choice="required", max_tokens=64)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.id
    assert isinstance(call.function.arguments, str)
    assert "city" in json.loads(call.function.arguments)


def test_tool_call_streamed_as_deltas(client: Any) -> None:
    chunks = list(client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=64, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(deltas) > 2, "the arguments arrive in several fragments"
    assert deltas[0].id and deltas[0].function.name == "get_weather"
    assert all(d.index == 0 for d in deltas) and all(d.function.name is None for d in deltas[1:])
    args = "".join(d.function.arguments or "" for d in deltas)
    assert "city" in parse_arguments({"function": {"name": "get_weather", "arguments": args}})
    assert not any(c.choices[0].delta.content for c in chunks if c.choices), "no tool JSON leaks into content"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_json_schema_response(client: Any) -> None:
    schema = {"type": "object", "properties": {"country": {"type": "string"}, "capital": {"type": "string"}},
              "required": ["country", "capital"], "additionalProperties": False}
    r = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Give the capital of France as JSON."}], max_tokens=64,
        response_format={"type": "json_schema", "json_schema": {"name": "capital", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_embeddings_match_the_reference(client: Any) -> None:
    ref = json.loads(REFERENCE.read_text())
    r = client.embeddings.create(model="minilm", input=ref["sentences"])
    got = np.asarray([d.embedding for d in sorted(r.data, key=lambda d: d.index)], dtype=np.float32)
    want = np.asarray(ref["embeddings"], dtype=np.float32)
    assert got.shape == want.shape
    cos = (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert float(cos.min()) >= 0.99, cos
    assert r.usage.prompt_tokens > len(ref["sentences"])
    b64 = client.embeddings.create(model="minilm", input=ref["sentences"][0], encoding_format="base64")
    raw = np.frombuffer(base64.b64decode(b64.data[0].embedding), dtype="<f4")
    np.testing.assert_allclose(raw, got[0], atol=1e-5)


def test_embeddings_take_openais_dimensions(client: Any) -> None:
    sentences = json.loads(REFERENCE.read_text())["sentences"][:3]
    full = client.embeddings.create(model="minilm", input=sentences)
    cut = client.embeddings.create(model="minilm", input=sentences, dimensions=128)
    f = np.asarray([d.embedding for d in sorted(full.data, key=lambda d: d.index)], dtype=np.float32)
    c = np.asarray([d.embedding for d in sorted(cut.data, key=lambda d: d.index)], dtype=np.float32)
    assert c.shape == (3, 128)
    np.testing.assert_allclose(c, f[:, :128], atol=1e-5)  # MiniLM is not Matryoshka-trained: the prefix as is
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="minilm", input="cat", dimensions=385)
    assert isinstance(e.value.body, dict) and e.value.body.get("param") == "dimensions", e.value.body


def test_sixteen_concurrent_streams_all_finish(client: Any) -> None:
    results: dict[int, tuple[str, str | None]] = {}
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            text, finish = "", None
            for c in client.chat.completions.create(model="smol", max_tokens=24, stream=True,
                                                    messages=[{"role": "user", "content": f"Count from {i} to {i + 9}."}]):
                if c.choices:
                    text += c.choices[0].delta.content or ""
                    finish = c.choices[0].finish_reason or finish
            results[i] = (text, finish)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures
    assert sorted(results) == list(range(16))
    assert all(text and finish in ("stop", "length") for text, finish in results.values()), results


RESPONSES_WEATHER = {"type": "function", "name": "get_weather", "description": "Get the weather for a city",
                     "parameters": WEATHER["function"]["parameters"]}


def test_responses_answer_streamed_and_not(client: Any) -> None:
    r = client.responses.create(model="smol", input=GEO[1:], instructions=GEO[0]["content"], max_output_tokens=32)
    assert r.status in ("completed", "incomplete") and "Paris" in r.output_text, r
    assert r.usage.input_tokens > 10 and r.usage.output_tokens > 0
    events = list(client.responses.create(model="smol", input=GEO[1:], instructions=GEO[0]["content"],
                                          max_output_tokens=32, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == r.output_text and len(deltas) > 2, "streamed in pieces, the same greedy text"
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    assert events[-1].response.output_text == r.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_responses_tool_call_and_its_result(client: Any) -> None:
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    with client.responses.stream(model="smol", input=ask, tools=[RESPONSES_WEATHER], tool_choice="required",
                                 max_output_tokens=64) as s:
        events = list(s)
        final = s.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].call_id, final.output
    assert "city" in json.loads(calls[0].arguments)
    fragments = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(fragments) > 2, "the arguments arrive in several deltas"
    # the call's result goes back as input items; the model answers in text
    r = client.responses.create(model="smol", tools=[RESPONSES_WEATHER], tool_choice="none", max_output_tokens=48,
                                input=[*ask, calls[0].model_dump(exclude_none=True),
                                       {"type": "function_call_output", "call_id": calls[0].call_id,
                                        "output": "18 degrees and sunny"}])
    assert r.output and r.output[0].type == "message" and r.output_text.strip(), r.output


def test_api_key_is_required(server: Server) -> None:
    with pytest.raises(openai.AuthenticationError) as e:
        server.client(api_key="wrong").models.list()
    assert e.value.status_code == 401
    assert httpx.get(server.root + "/metrics", timeout=10).status_code == 401
    assert httpx.get(server.root + "/health", timeout=10).status_code == 200


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"model": "nope", "messages": GEO}, "model"),
    ({"model": "smol", "messages": []}, "messages"),
    ({"model": "smol", "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"model": "smol", "messages": GEO, "temperature": 5}, "temperature"),
    ({"model": "smol", "messages": GEO, "max_tokens": 0}, "max_tokens"),
    ({"model": "smol", "messages": GEO, "n": 3}, "n"),
    ({"model": "smol", "messages": GEO, "tool_choice": "required"}, "tool_choice"),
    ({"model": "smol", "messages": GEO, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 3}}}},
     "response_format"),
    ({"model": "smol", "messages": GEO, "extra_body": {"temprature": 0.1}}, "temprature"),
    ({"model": "minilm", "messages": GEO}, "model"),
])
def test_invalid_requests_name_the_field(client: Any, kwargs: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(**kwargs)
    assert e.value.status_code in (400, 404)
    err = e.value.body
    assert isinstance(err, dict) and err.get("param") == param, err
    assert err.get("message")


def test_prompt_longer_than_the_context(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smol", prompt="word " * 3000, max_tokens=4)
    assert e.value.code == "context_length_exceeded"


def test_metrics_count_requests_tokens_and_ttft(server: Server, client: Any) -> None:
    client.chat.completions.create(model="smol", messages=GEO, max_tokens=4)
    text = httpx.get(server.root + "/metrics", headers={"Authorization": "Bearer sekrit"}, timeout=10).text
    for name in ("harness_requests_total", "harness_prompt_tokens_total", "harness_completion_tokens_total",
                 "harness_time_to_first_token_seconds_count", "harness_queue_depth"):
        assert name in text, name
    line = next(ln for ln in text.splitlines() if ln.startswith('harness_completion_tokens_total{model="smol"}'))
    assert float(line.split()[-1]) > 0


def _long_stream(server: Server) -> Any:
    return server.client().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Tell a very long story."}], max_tokens=1500,
        stream=True, temperature=0.8, extra_body={"ignore_eos": True})


def _wait_for(cond: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout} s")
        time.sleep(0.1)


def test_overload_is_429_with_retry_after_and_disconnect_frees_the_slot(small: Server) -> None:
    a, b = _long_stream(small), _long_stream(small)
    try:
        next(iter(a))
        next(iter(b))
        with pytest.raises(openai.RateLimitError) as e:
            small.client().chat.completions.create(model="smol", messages=GEO, max_tokens=4)
        # no sequence free and --max-queue 0: refused, told when one is expected to have drained
        assert int(e.value.response.headers["retry-after"]) >= 1
        _wait_for(lambda: small.health()["models"]["smol"]["active"] == 2, "both streams did not get a sequence")
        a.close()  # the client goes away mid-stream: its sequence is cancelled, its place freed
        _wait_for(lambda: {k: v for k, v in small.health()["models"]["smol"].items() if k != "queue"}
                  == {"in_flight": 1, "capacity": 2, "active": 1, "pending": 0}, "the closed stream's slot was not freed")
        r = small.client().chat.completions.create(model="smol", messages=GEO, max_tokens=16)
        assert "Paris" in r.choices[0].message.content
    finally:
        a.close()
        b.close()
    _wait_for(lambda: small.health()["models"]["smol"]["in_flight"] == 0, "both streams were not released")


def test_non_streaming_client_that_leaves_is_cancelled(small: Server) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(small.base + "/chat/completions", timeout=httpx.Timeout(10, read=1.0),
                   json={"model": "smol", "messages": GEO, "max_tokens": 1500, "ignore_eos": True})
    _wait_for(lambda: small.health()["models"]["smol"]["in_flight"] == 0, "the abandoned request still runs",
              timeout=30)


def test_server_refuses_a_public_address_without_key(variant: str, tmp_path: Path) -> None:
    require_variant(variant)
    root, chat_model, _ = _models()
    chat = _config(tmp_path, "smol.yaml", CHAT_CONFIG.format(model=chat_model, parallel=1))
    r = subprocess.run([sys.executable, "-m", "harness", "serve", str(chat), "--models-dir", str(root), "--host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ, "HARNESS_API_KEY": ""})
    assert r.returncode == 2 and "reachable from other machines" in r.stdout + r.stderr, r.stdout + r.stderr
