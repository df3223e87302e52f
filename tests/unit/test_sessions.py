"""Sessions: a sequence's state saved and restored (harness.runtime.state's envelope, the llama.cpp
engine's save_state/restore_state and their files, harness serve's /sessions/{name}).

Runs on the fake binding core (tests/fakes/binding_core.py): its one sequence holds the last prompt's
tokens and a state's payload is those tokens; what is asserted is the envelope around it, what is
refused before the core sees it, and the server's names. The real engine's round trip (greedy tokens
after a restore) is engines/llamacpp/e2e/test_sessions.py.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from harness.core import errors
from harness.runtime import Runtime
from harness.runtime.state import FORMAT, MAGIC, StateIdentity, header, pack, unpack
from harness.serve.app import create_app
from harness.serve.server import load_models
from harness.serve.sessions import plain_name, session_name
from tests.unit.test_config_validate import tiny_gguf
from tests.unit.test_crash_reporting import fake_env  # noqa: F401 (fixture)
from tests.unit.test_runtime_config import models  # noqa: F401 (fixture)

IDENT = StateIdentity(engine="llamacpp", state_format="llama_state_seq", state_version=4, pin="2026.10.11549",
                      build=11549, model_sha256="ab" * 32, model_size=1234, model_desc="llama 135M Q4_1",
                      n_params=135, n_ctx=2048, cache_type="f16", flash_attn=-1)
TOKENS = [1, 5, 7, 300]
PAYLOAD = b"\x00kv cells\xff" * 10


def _doctored(data: bytes, **identity: Any) -> bytes:
    """``data`` with its header's identity fields changed (the payload and its sha256 kept)."""
    (n,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    head = json.loads(data[start:start + n])
    head["identity"].update(identity)
    body = json.dumps(head).encode()
    return MAGIC + struct.pack("<I", len(body)) + body + data[start + n:]


# ---------------------------------------------------------------- the envelope


def test_a_state_round_trips_in_its_envelope() -> None:
    data = pack(IDENT, TOKENS, PAYLOAD)
    assert data.startswith(MAGIC) and data.endswith(PAYLOAD)
    tokens, payload = unpack(data, IDENT, n_vocab=359)
    assert tokens == TOKENS and bytes(payload) == PAYLOAD
    assert header(IDENT, TOKENS, PAYLOAD) + PAYLOAD == data
    head = json.loads(data[len(MAGIC) + 4:-len(PAYLOAD)])
    assert head["format"] == FORMAT and head["identity"]["state_version"] == 4
    assert head["payload"]["size"] == len(PAYLOAD)


@pytest.mark.parametrize(("field", "value", "said"), [
    ("state_version", 5, "state format version: the state's is 5, this engine's is 4"),
    ("model_sha256", "cd" * 32, "model (sha256 of its file)"),
    ("pin", "2026.09.1", "engine pin: the state's is '2026.09.1'"),
    ("build", 11000, "engine build"),
    ("cache_type", "q8_0", "KV-cache type: the state's is 'q8_0', this engine's is 'f16'"),
    ("engine", "vllmcpp", "engine: the state's is 'vllmcpp'"),
    ("flash_attn", 1, "flash attention setting"),
])
def test_a_state_of_another_model_pin_or_format_is_refused(field: str, value: Any, said: str) -> None:
    data = _doctored(pack(IDENT, TOKENS, PAYLOAD), **{field: value})
    with pytest.raises(errors.SessionStateError, match="nothing loaded") as e:
        unpack(data, IDENT, n_vocab=359)
    assert said in str(e.value)
    assert isinstance(e.value, errors.InvalidRequestError)  # a request the engine refuses: HTTP 400


def test_another_context_size_is_carried_not_refused() -> None:
    tokens, _ = unpack(pack(IDENT, TOKENS, PAYLOAD), replace(IDENT, n_ctx=4096), n_vocab=359)
    assert tokens == TOKENS  # the engine says whether the tokens fit its context


def test_a_damaged_state_is_refused() -> None:
    data = pack(IDENT, TOKENS, PAYLOAD)
    cases = {
        b"NOTSTATE" + data[8:]: "not a harness session state",
        data[:-1]: "truncated or damaged",
        data[:-1] + b"?": "sha256 is not the header's",
        data[:12] + b"x" + data[13:]: "not JSON",
        MAGIC + struct.pack("<I", 1 << 30) + b"{}": "claims",
        b"": "not a harness session state",
    }
    for bad, said in cases.items():
        with pytest.raises(errors.SessionStateError, match=said):
            unpack(bad, IDENT, n_vocab=359)
    with pytest.raises(errors.SessionStateError, match=r"token ids in \[0, 300\)"):
        unpack(data, IDENT, n_vocab=300)  # a token the vocabulary does not have
    other = data.replace(b'"format":1', b'"format":9')
    with pytest.raises(errors.SessionStateError, match="envelope format 9"):
        unpack(other, IDENT, n_vocab=359)


# ---------------------------------------------------------------- the engine's API


def test_save_and_restore_through_the_engine(models: Path, tmp_path: Path) -> None:  # noqa: F811
    with Runtime.load(models / "SmolLM2-135M-Instruct.Q4_1.gguf", variant="steady") as eng:
        eng.complete("hello there", max_tokens=4)
        data = eng.save_state("hello")
        assert eng.model_sha256 in data[:2048].decode("latin-1")
        info = eng.restore_state(data)
        assert (info.n_tokens, info.loaded, info.n_bytes) == (len("hello there"), True, len(data))
        assert eng.core.restored[-1][0] == [ord(c) % 300 for c in "hello there"]

        path = tmp_path / "chat.state"
        saved = eng.save_state_file(path, [ord("h") % 300])
        assert saved.n_tokens == len("hello there") and saved.n_matched == 1 and saved.n_bytes == path.stat().st_size
        assert eng.restore_state_file(path).n_tokens == len("hello there")
        assert not list(tmp_path.glob(".chat.state.*")), "the temporary file was renamed over the state"

        link = tmp_path / "link.state"
        link.symlink_to(path)
        with pytest.raises(errors.SessionStateError, match="link"):
            eng.restore_state_file(link)

        # a doctored version field: refused before the core sees a byte of it
        n_loaded = len(eng.core.restored)
        with pytest.raises(errors.SessionStateError, match="state format version: the state's is 99"):
            eng.restore_state(_doctored(data, state_version=99))
        assert len(eng.core.restored) == n_loaded


def test_a_state_of_another_model_file_is_refused(models: Path) -> None:  # noqa: F811
    other = models / "other.gguf"
    tiny_gguf(other, arch="qwen2")
    with Runtime.load(models / "SmolLM2-135M-Instruct.Q4_1.gguf", variant="steady") as eng:
        eng.complete("hi", max_tokens=1)
        data = eng.save_state()
    with Runtime.load(other, variant="steady") as eng2:
        with pytest.raises(errors.SessionStateError, match=r"model \(sha256 of its file\)"):
            eng2.restore_state(data)
        assert eng2.core.restored == []


def test_the_state_records_the_compiled_state_version(models: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    with Runtime.load(models / "SmolLM2-135M-Instruct.Q4_1.gguf", variant="steady") as eng:
        eng.complete("hi", max_tokens=1)
        data = eng.save_state()
        monkeypatch.setattr(eng.module, "STATE_SEQ_VERSION", 5)  # a binding compiled against a pin whose format moved
        with pytest.raises(errors.SessionStateError, match="state format version: the state's is 4, this engine's is 5"):
            eng.restore_state(data)


# ---------------------------------------------------------------- harness serve


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "", "a..b", "x" * 129, "a b", "ä", "a\x00"])
def test_session_names_are_confined(name: str) -> None:
    assert not plain_name(name)
    with pytest.raises(Exception, match="not a plain name"):
        session_name(name)


def test_plain_session_names_pass() -> None:
    for name in ("chat-1", "Chat_2.v1", "x" * 128, "0"):
        assert session_name(name) == name


@pytest.fixture
def served(tmp_path: Path, models: Path) -> Iterator[dict[str, Any]]:  # noqa: F811
    (tmp_path / "chat.yaml").write_text("name: chat\nbackend: llamacpp\nparameters:\n  model: "
                                        "SmolLM2-135M-Instruct.Q4_1.gguf\n")
    served = load_models([tmp_path / "chat.yaml"], models_dir=models, variant="steady", max_queue=1, isolate=False,
                         sessions_dir=tmp_path / "sessions")
    yield served
    for m in served.values():
        m.engine.engine.close()


def test_serve_saves_restores_and_erases_a_session(served: dict[str, Any], tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "capital of France?"}]
    with TestClient(create_app(served)) as c:
        assert c.post("/v1/chat/completions", json={"model": "chat", "messages": messages}).status_code == 200
        r = c.post("/sessions/fr?action=save", json={"model": "chat", "messages": messages})
        assert r.status_code == 200, r.text
        saved = r.json()
        assert saved["n_saved"] > 0 and saved["filename"] == "fr.state" and "save_ms" in saved["timings"]
        path = tmp_path / "sessions" / "chat" / "fr.state"
        assert path.is_file() and path.stat().st_size == saved["n_written"]

        r = c.post("/sessions/fr?action=restore", json={"model": "chat"})
        assert r.status_code == 200, r.text
        assert r.json()["n_restored"] == saved["n_saved"] and r.json()["loaded"] is True

        # a state doctored on disk is refused by the engine: 400, nothing loaded
        path.write_bytes(_doctored(path.read_bytes(), state_version=99))
        r = c.post("/sessions/fr?action=restore", json={"model": "chat"})
        assert r.status_code == 400 and "state format version" in r.json()["error"]["message"]

        assert c.post("/sessions/fr?action=erase", json={"model": "chat"}).json()["erased"] is True
        assert not path.exists()
        r = c.post("/sessions/fr?action=restore", json={"model": "chat"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"


def test_serve_refuses_bad_names_actions_and_models(served: dict[str, Any], tmp_path: Path) -> None:
    with TestClient(create_app(served)) as c:
        for name in (".x", "a..b", "%2e%2e", "x%00y", "-x"):
            r = c.post(f"/sessions/{name}?action=save", json={"model": "chat"})
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_session_name", (name, r.text)
        for name in ("..", "../x", "a/b", "a%2Fb", "%2e%2e%2fx"):  # a path the URL normalizes or splits: no route
            assert c.post(f"/sessions/{name}?action=save", json={"model": "chat"}).status_code == 404
        assert c.post("/sessions/x?action=load", json={"model": "chat"}).status_code == 400
        assert c.post("/sessions/x?action=save", json={"model": "nope"}).status_code == 404
        assert c.post("/sessions/x?action=save", json={}).status_code == 400
        # a link where a state would be is not followed
        d = tmp_path / "sessions" / "chat"
        d.mkdir(parents=True, exist_ok=True)
        (tmp_path / "secret").write_text("x")
        (d / "evil.state").symlink_to(tmp_path / "secret")
        assert c.post("/sessions/evil?action=restore", json={"model": "chat"}).status_code == 404
        assert c.post("/sessions/evil?action=erase", json={"model": "chat"}).status_code == 404
        assert (tmp_path / "secret").read_text() == "x"
    assert not list((tmp_path / "sessions").glob("*/..*"))


def test_sessions_are_off_without_a_directory(served: dict[str, Any]) -> None:
    served["chat"].sessions = None
    with TestClient(create_app(served)) as c:
        r = c.post("/sessions/x?action=save", json={"model": "chat"})
        assert r.status_code == 501 and "--sessions-dir" in r.json()["error"]["message"]


def test_the_sessions_dir_defaults_to_the_models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.cli.serve import sessions_dir

    monkeypatch.delenv("HARNESS_MODELS_DIR", raising=False)
    assert sessions_dir(None, None) is None
    assert sessions_dir(None, tmp_path) == tmp_path / "sessions"
    assert sessions_dir(tmp_path / "s", tmp_path) == tmp_path / "s"
    monkeypatch.setenv("HARNESS_MODELS_DIR", str(tmp_path / "m"))
    assert sessions_dir(None, None) == tmp_path / "m" / "sessions"


def test_a_worker_saves_and_restores_files(fake_env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    from harness.serve.remote import WorkerRuntime

    model = Path(fake_env["FAKE_MODEL"])
    config = tmp_path / "tiny.yaml"
    config.write_text(f"name: tiny\nbackend: llamacpp\nparameters:\n  model: {model.name}\n")
    rt = WorkerRuntime.start(config, name="tiny", models_dir=model.parent, variant="steady", max_queue=2, timeout=60)
    path = tmp_path / "s.state"

    async def run() -> tuple[Any, Any]:
        await rt.attach()
        await rt.complete("abc", max_tokens=2)
        saved = await rt.save_state_file(str(path))
        restored = await rt.restore_state_file(str(path))
        await rt.aclose()
        return saved, restored

    try:
        saved, restored = asyncio.run(run())
    finally:
        rt.close()
    assert saved.n_tokens == 3 and restored.n_tokens == 3 and path.stat().st_size == saved.n_bytes
