"""Malformed and abusive requests: each an OpenAI-shaped 4xx that names the problem, none a 500.

The app runs over the fake binding core (tests/fakes, a context of 256 tokens); the oversized
bodies are driven through the ASGI interface directly, so the test sees how much of a body the
app read before it answered.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from harness.serve import protocol
from harness.serve.app import create_app
from tests.unit.test_serve_app import USER, client, served  # noqa: F401 (fixtures)

CHAT = "/v1/chat/completions"
MB = 1 << 20


def _error(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    return dict(err)


def test_truncated_json_is_named(client: TestClient) -> None:  # noqa: F811
    body = json.dumps({"model": "chat", "messages": USER}).encode()
    for cut in (len(body) - 1, len(body) // 2, 1):
        err = _error(client.post(CHAT, content=body[:cut], headers={"content-type": "application/json"}), 400)
        assert err["code"] == "invalid_json" and "truncated JSON" in err["message"], err
    err = _error(client.post(CHAT, content=b'{"model": "chat",, }', headers={"content-type": "application/json"}),
                 400)
    assert "not JSON" in err["message"] and "char 17" in err["message"]
    assert "empty" in _error(client.post(CHAT, content=b"  ", headers={"content-type": "application/json"}),
                             400)["message"]


def test_wrong_content_type_is_415(client: TestClient) -> None:  # noqa: F811
    body = json.dumps({"model": "chat", "messages": USER})
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        err = _error(client.post(CHAT, content=body, headers={"content-type": ctype}), 415)
        assert err["code"] == "unsupported_media_type" and ctype.split(";")[0] in err["message"]
    err = _error(client.post(CHAT, content=body, headers={"content-type": "application/json; charset=latin-1"}), 415)
    assert "latin-1" in err["message"]
    for ok in ("application/json", "application/json; charset=UTF-8", "application/vnd.api+json"):
        assert client.post(CHAT, content=body, headers={"content-type": ok}).status_code == 200, ok


def test_invalid_utf8_is_named(client: TestClient) -> None:  # noqa: F811
    body = b'{"model": "chat", "messages": [{"role": "user", "content": "caf\xe9"}]}'
    err = _error(client.post(CHAT, content=body, headers={"content-type": "application/json"}), 400)
    assert err["code"] == "invalid_utf8" and "0xe9" in err["message"] and f"offset {body.index(0xE9)}" in err["message"]


@pytest.mark.parametrize("depth", [protocol.MAX_JSON_DEPTH + 1, 5000, 200_000])
def test_deep_nesting_is_refused(client: TestClient, depth: int) -> None:  # noqa: F811
    body = '{"model": "chat", "messages": ' + "[" * depth + "]" * depth + "}"
    err = _error(client.post(CHAT, content=body, headers={"content-type": "application/json"}), 400)
    assert err["code"] == "too_deep" and str(protocol.MAX_JSON_DEPTH) in err["message"]


def test_nesting_within_the_bound_is_read(client: TestClient) -> None:  # noqa: F811
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(20):  # 20 levels of object schema: 60 JSON levels with the body around it
        schema = {"type": "object", "properties": {"x": schema}}
    r = client.post(CHAT, json={"model": "chat", "messages": USER,
                                "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}})
    assert r.status_code != 400 or r.json()["error"]["code"] != "too_deep", r.text


def test_max_tokens_beyond_the_context(client: TestClient, served: dict[str, Any]) -> None:  # noqa: F811
    assert served["chat"].context == 256  # the fake core's n_ctx
    for path, body in ((CHAT, {"messages": USER}), ("/v1/completions", {"prompt": "x"})):
        for stream in (False, True):
            err = _error(client.post(path, json={"model": "chat", "max_tokens": 100_000, "stream": stream, **body}), 400)
            assert err["param"] == "max_tokens" and "256" in err["message"] and "at most 255" in err["message"]
        assert client.post(path, json={"model": "chat", "max_tokens": 255, **body}).status_code == 200
    err = _error(client.post(CHAT, json={"model": "chat", "messages": USER, "max_tokens": 10**12}), 400)
    assert err["param"] == "max_tokens"
    assert served["chat"].in_flight == 0


def test_unknown_and_missing_model(client: TestClient) -> None:  # noqa: F811
    err = client.post(CHAT, json={"model": "nope", "messages": USER}).json()["error"]
    assert err["code"] == "model_not_found" and "'nope'" in err["message"] and "chat" in err["message"]
    assert _error(client.post(CHAT, json={"messages": USER}), 400)["param"] == "model"


# ---------------------------------------------------------------- oversized bodies, through ASGI

def _post_asgi(app: Any, headers: list[tuple[bytes, bytes]], chunks: int, chunk_size: int = MB) -> tuple[int, dict[str, Any], int]:
    """POST a body of ``chunks`` chunks to ``app``; (status, JSON body, chunks the app asked for)."""
    asked = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if asked >= chunks:
            await asyncio.sleep(3600)  # nothing more: the app must not wait for it
        asked += 1
        return {"type": "http.request", "body": b"[" * chunk_size, "more_body": asked < chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": CHAT, "raw_path": CHAT.encode(), "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}

    async def run() -> None:
        await asyncio.wait_for(app(scope, receive, send), timeout=30)

    asyncio.run(run())
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(status), json.loads(body), asked


def test_100mb_body_refused_by_content_length_before_reading(served: dict[str, Any]) -> None:  # noqa: F811
    status, body, asked = _post_asgi(create_app(served), [(b"content-type", b"application/json"),
                                                          (b"content-length", str(100 * MB).encode())], chunks=100)
    assert status == 413 and body["error"]["code"] == "request_too_large"
    assert str(100 * MB) in body["error"]["message"]
    assert asked == 0


def test_100mb_chunked_body_refused_once_past_the_bound(served: dict[str, Any]) -> None:  # noqa: F811
    status, body, asked = _post_asgi(create_app(served), [(b"content-type", b"application/json")], chunks=100)
    assert status == 413 and body["error"]["code"] == "request_too_large"
    assert asked == protocol.MAX_BODY_BYTES // MB + 1  # stopped at the first chunk past the bound


def test_bad_content_length(served: dict[str, Any]) -> None:  # noqa: F811
    status, body, asked = _post_asgi(create_app(served), [(b"content-type", b"application/json"),
                                                          (b"content-length", b"-5")], chunks=1, chunk_size=2)
    assert status == 400 and "Content-Length" in body["error"]["message"] and asked == 0


def test_lone_surrogates_escaped_in_json_are_named(client: TestClient) -> None:  # noqa: F811
    for path, body, param in (
            (CHAT, b'{"model": "chat", "messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages"),
            ("/v1/completions", b'{"model": "chat", "prompt": "a\\ud800b"}', "prompt"),
            ("/v1/completions", b'{"model": "chat", "prompt": "x", "stop": ["\\udfff"]}', "stop")):
        err = _error(client.post(path, content=body, headers={"content-type": "application/json"}), 400)
        assert err["param"] == param and "Unicode" in err["message"], err
