"""The HTTP app over the fake binding core (tests/fakes): routes, SSE framing, admission, auth, metrics.

The fake core generates " Paris, and more." as three deltas and reports fixed timings
(4 prompt tokens, 4 generated); what is asserted is what the app makes of them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from harness.serve.app import create_app
from harness.serve.server import load_models
from tests.fakes import install_binding
from tests.unit.test_config_validate import tiny_gguf

CHAT = """\
name: chat
backend: llamacpp
parameters:
  model: m.gguf
  temperature: 0.3
"""
USER = [{"role": "user", "content": "capital of France?"}]
#: what the fake core generates (tests/fakes/binding_core.py DELTAS; that module runs only as a binding's _core)
DELTAS = (" Paris", ", and", " more.")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    from harness.engine.descriptor import load_engine
    from harness_plugins.llamacpp.engine import _committed_fingerprint

    install_binding(tmp_path / "bindings", "steady", {
        "engine": "llamacpp", "pin": load_engine("llamacpp").pin, "abi_fingerprint": _committed_fingerprint(),
        "platform": "cpu"})
    monkeypatch.setenv("HARNESS_BINDING_PATH", str(tmp_path / "bindings"))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    tiny_gguf(tmp_path / "models" / "m.gguf")
    (tmp_path / "chat.yaml").write_text(CHAT)
    models = load_models([tmp_path / "chat.yaml"], models_dir=tmp_path / "models", variant=None, max_queue=1,
                         isolate=False)
    yield models
    for m in models.values():
        m.engine.engine.close()


@pytest.fixture
def client(served: dict[str, Any]) -> Iterator[TestClient]:
    with TestClient(create_app(served)) as c:
        yield c


def _events(body: str) -> list[Any]:
    frames = [f for f in body.split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames), frames
    return [f.removeprefix("data: ") if f == "data: [DONE]" else json.loads(f.removeprefix("data: ")) for f in frames]


def test_models_and_capacity(client: TestClient, served: dict[str, Any]) -> None:
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["chat"]
    assert served["chat"].capacity == 1 + 1  # the fake runs one sequence; --max-queue 1
    health = client.get("/health").json()["models"]["chat"]
    queue = health.pop("queue")
    assert health == {"in_flight": 0, "capacity": 2, "active": 0, "pending": 0}
    # the queue is reported with it (tests/unit/test_serve_queue.py has it under load)
    assert queue["waiting"] == 0 and queue["max_requests"] == 1 and queue["expected_wait_s"] == 0.0


def test_chat_answer_with_usage(client: TestClient, served: dict[str, Any]) -> None:
    r = client.post("/v1/chat/completions", json={"model": "chat", "messages": USER, "max_tokens": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "".join(DELTAS)}
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] == 4 and body["usage"]["total_tokens"] == 8
    # the config's temperature is the default; the request's max_tokens goes over it
    sent = served["chat"].engine.engine.core.submitted[-1]["sampling"]
    assert sent["temperature"] == pytest.approx(0.3) and sent["max_tokens"] == 4


def test_chat_stream_framing_and_usage_chunk(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={"model": "chat", "messages": USER, "stream": True,
                                                  "stream_options": {"include_usage": True}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    ev = _events(r.text)
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]]
    # the fake core has every delta ready at once: they may come coalesced, never reordered or lost
    assert "".join(content) == "".join(DELTAS)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    assert len({c["id"] for c in chunks}) == 1


def test_completion_stream_without_usage(client: TestClient) -> None:
    ev = _events(client.post("/v1/completions", json={"model": "chat", "prompt": "x", "stream": True}).text)
    assert ev[-1] == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in ev[:-1]) == "".join(DELTAS)
    assert all("usage" not in c for c in ev[:-1])


def test_embeddings_are_refused_on_a_chat_model(client: TestClient) -> None:
    r = client.post("/v1/embeddings", json={"model": "chat", "input": "x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"


def test_unknown_model_is_404_naming_the_served_ones(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={"model": "gpt-4", "messages": USER})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["param"] == "model" and err["code"] == "model_not_found" and "chat" in err["message"]


def test_a_body_that_is_not_json(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]


def test_unknown_route_and_method(client: TestClient) -> None:
    assert client.get("/v1/nothing").json()["error"]["code"] == "not_found"
    assert client.get("/v1/chat/completions").status_code == 405


def test_full_model_answers_429_with_retry_after(client: TestClient, served: dict[str, Any]) -> None:
    held = [served["chat"].admit() for _ in range(served["chat"].capacity)]
    r = client.post("/v1/chat/completions", json={"model": "chat", "messages": USER})
    # Retry-After is no longer a fixed "1": it comes from the drain rate; none is measured yet here
    # (nothing has completed), so one to two seconds at random (tests/unit/test_serve_queue.py)
    assert r.status_code == 429 and r.headers["retry-after"] in ("1", "2")
    assert 1000 <= int(r.headers["retry-after-ms"]) <= 2000
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    for place in held:
        place.release()
        place.release()  # a second release changes nothing
    assert served["chat"].in_flight == 0
    assert client.post("/v1/chat/completions", json={"model": "chat", "messages": USER}).status_code == 200


def test_every_request_gives_its_place_back(client: TestClient, served: dict[str, Any]) -> None:
    for stream in (False, True):
        client.post("/v1/chat/completions", json={"model": "chat", "messages": USER, "stream": stream})
        client.post("/v1/completions", json={"model": "chat", "prompt": "x", "stream": stream})
    client.post("/v1/chat/completions", json={"model": "chat", "messages": USER, "temperature": 9})
    assert served["chat"].in_flight == 0
    # refused by the engine when submitted (the fake's vocabulary has 359 tokens), streaming or not
    for stream in (False, True):
        r = client.post("/v1/completions", json={"model": "chat", "prompt": [5, 1000], "stream": stream})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt[1]", r.text
        assert served["chat"].in_flight == 0


def test_api_key(served: dict[str, Any]) -> None:
    with TestClient(create_app(served, api_key="k")) as c:
        assert c.get("/v1/models").status_code == 401
        assert c.get("/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.get("/v1/models", headers={"Authorization": "Bearer k"}).status_code == 200
        assert c.get("/metrics").status_code == 401
        assert c.get("/health").status_code == 200


def test_metrics(client: TestClient) -> None:
    client.post("/v1/chat/completions", json={"model": "chat", "messages": USER})
    client.post("/v1/chat/completions", json={"model": "chat", "messages": USER, "n": 2})
    text = client.get("/metrics").text
    assert 'harness_requests_total{endpoint="chat",model="chat",status="200"} 1.0' in text
    assert 'harness_requests_total{endpoint="chat",model="chat",status="400"} 1.0' in text
    assert 'harness_completion_tokens_total{model="chat"} 4.0' in text
    assert 'harness_time_to_first_token_seconds_count{model="chat"} 1.0' in text
    assert 'harness_queue_depth{model="chat"} 0.0' in text
    assert 'harness_capacity_requests{model="chat"} 2.0' in text


def test_async_engine_streams_and_completes(served: dict[str, Any]) -> None:
    eng = served["chat"].engine

    async def run() -> tuple[Any, list[Any], Any]:
        c = await eng.complete("x", max_tokens=4)
        s = await eng.chat_stream(USER)
        deltas = [d async for d in s]
        return c, deltas, s

    c, deltas, s = asyncio.run(run())
    assert c.text == "".join(DELTAS) and c.usage.total_tokens == 8
    assert [d.content for d in deltas] == list(DELTAS)
    assert s.stream.message == {"role": "assistant", "content": "".join(DELTAS)}
