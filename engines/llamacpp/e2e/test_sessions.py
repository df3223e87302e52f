"""Sessions on SmolLM2-135M-Instruct (HARNESS_CHAT_MODEL), through the runtime and harness serve's
/sessions: a chat's state saved, the chat switched away from (its sequence overwritten, or the engine
closed), restored, and continued with the greedy tokens of a chat that never left; states of another
model or a doctored format refused, nothing loaded.

The time to the first token after a restore against a prefill of the same chat is a benchmark, not a
spec: scripts/bench_session_restore.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.core import errors
from harness.qualify.specs import model_path, require_variant
from harness.runtime import Runtime
from harness.runtime.state import MAGIC, header_of

GREEDY: dict[str, Any] = {"temperature": 0.0, "max_tokens": 24}
#: the engine as these specs load it: one sequence, so switching chats overwrites it
LOAD: dict[str, Any] = {"n_ctx": 2048, "max_num_seqs": 1, "threads": 2}

_FACTS = [
    "The Loire is the longest river in France and flows into the Atlantic Ocean near Saint-Nazaire.",
    "Mont Blanc, on the border with Italy, is the highest mountain of the Alps.",
    "Lyon sits where the Rhone and the Saone meet and is known for its cooking.",
    "Bordeaux is famous for its wine and its eighteenth-century stone quays.",
    "The Camargue is a delta of marshes, white horses and pink flamingos.",
    "Strasbourg is home to the European Parliament and a Gothic cathedral.",
]


def long_chat(turns: int = 7) -> list[dict[str, str]]:
    """A geography chat of about 800 tokens: a system prompt and turns written out (no generation)."""
    msgs = [{"role": "system", "content": "You are a patient geography tutor. Answer in one or two sentences."}]
    for i in range(turns):
        fact = _FACTS[i % len(_FACTS)]
        msgs.append({"role": "user", "content": f"Tell me something about France, part {i + 1}. {fact} Is that so?"})
        msgs.append({"role": "assistant", "content": f"Yes. {fact} It is one of the things people remember about "
                                                     f"French geography, lesson {i + 1}."})
    msgs.append({"role": "user", "content": "What is the capital of France?"})
    return msgs


@pytest.fixture(scope="module")
def smol_path(variant: str) -> Path:
    require_variant(variant)
    return model_path("HARNESS_CHAT_MODEL")


@pytest.fixture(scope="module")
def smol(variant: str, smol_path: Path) -> Iterator[Any]:
    with Runtime.load(smol_path, variant=variant, **LOAD) as eng:
        yield eng


@pytest.fixture(scope="module")
def chat_turn(smol: Any) -> dict[str, Any]:
    """One turn of the long chat, its state saved right after, and the next turn as a chat that never
    left answers it (the sequence still cached)."""
    first = long_chat()
    r1 = smol.chat(first, sampling=GREEDY)
    history = [*first, {"role": "assistant", "content": r1.content}]
    state = smol.save_state(history)
    follow = [*history, {"role": "user", "content": "And which river flows through it?"}]
    stayed = smol.chat(follow, sampling=GREEDY)
    return {"history": history, "state": state, "follow": follow, "stayed": stayed, "r1": r1}


def test_the_state_holds_the_chat_and_names_its_model(smol: Any, chat_turn: dict[str, Any]) -> None:
    state = chat_turn["state"]
    assert state.startswith(MAGIC)
    head = header_of(state)
    ident, tokens = head["identity"], head["tokens"]
    assert ident["state_version"] == smol.module.STATE_SEQ_VERSION and ident["pin"] == smol.module.PIN
    assert ident["model_sha256"] == smol.model_sha256 and ident["n_ctx"] == 2048 and ident["cache_type"] == "f16"
    r1 = chat_turn["r1"].completion
    prompt = smol.core.chat_tokens(json.dumps(chat_turn["history"][:-1]))  # without the generation prompt
    assert tokens[:len(prompt)] == prompt
    # the prompt and every generated token but the last sampled one (never decoded)
    assert len(tokens) == r1.n_prompt + r1.n_generated - 1 > 600
    assert chat_turn["stayed"].completion.n_cached > 600, "the chat that never left reused its sequence"


def test_a_restored_chat_continues_as_one_that_never_left(smol: Any, chat_turn: dict[str, Any]) -> None:
    # switch chats: another conversation takes the engine's one sequence
    smol.chat([{"role": "user", "content": "Write a haiku about the sea."}], sampling=GREEDY)
    info = smol.restore_state(chat_turn["state"])
    assert info.loaded and info.n_tokens == len(header_of(chat_turn["state"])["tokens"])
    back = smol.chat(chat_turn["follow"], sampling=GREEDY)
    stayed = chat_turn["stayed"]
    assert back.completion.text == stayed.completion.text
    assert back.completion.n_generated == stayed.completion.n_generated
    assert back.completion.n_cached == stayed.completion.n_cached, "the restore reused what never leaving reused"


def test_a_state_file_restores_into_another_engine(variant: str, smol_path: Path, smol: Any,
                                                    chat_turn: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "chat.state"
    path.write_bytes(chat_turn["state"])
    with Runtime.load(smol_path, variant=variant, **LOAD) as fresh:
        cold = fresh.chat(chat_turn["follow"], sampling=GREEDY)  # a prefill of the whole chat
        assert cold.completion.n_cached == 0
        fresh.chat([{"role": "user", "content": "Name a colour."}], sampling=GREEDY)
        info = fresh.restore_state_file(path)
        assert info.loaded and info.n_bytes == path.stat().st_size
        back = fresh.chat(chat_turn["follow"], sampling=GREEDY)
    assert back.completion.text == chat_turn["stayed"].completion.text
    assert back.completion.n_cached == chat_turn["stayed"].completion.n_cached


def test_a_doctored_version_field_is_refused(smol: Any, chat_turn: dict[str, Any]) -> None:
    state = chat_turn["state"]
    n = int.from_bytes(state[8:12], "little")
    head = json.loads(state[12:12 + n])
    head["identity"]["state_version"] += 1
    body = json.dumps(head).encode()
    doctored = MAGIC + len(body).to_bytes(4, "little") + body + state[12 + n:]
    before = smol.stats()["kv_used"]
    with pytest.raises(errors.SessionStateError, match="state format version"):
        smol.restore_state(doctored)
    assert smol.stats()["kv_used"] == before, "nothing of it was loaded"


def test_a_state_of_another_model_is_refused(variant: str, chat_turn: dict[str, Any]) -> None:
    tiny = model_path("HARNESS_TINY_MODEL")
    with Runtime.load(tiny, variant=variant, n_ctx=2048, max_num_seqs=1, threads=2) as other:
        with pytest.raises(errors.SessionStateError, match=r"model \(sha256 of its file\)"):
            other.restore_state(chat_turn["state"])
        assert other.stats()["kv_used"] == 0


def test_save_needs_a_finished_conversation(variant: str, smol_path: Path) -> None:
    with Runtime.load(smol_path, variant=variant, **LOAD) as fresh, \
            pytest.raises(errors.InvalidRequestError, match="no idle sequence holds a conversation"):
        fresh.save_state()


def test_serve_saves_and_restores_a_chat(variant: str, smol_path: Path, chat_turn: dict[str, Any],
                                         tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from harness.serve.app import create_app
    from harness.serve.server import load_models

    config = tmp_path / "smol.yaml"
    config.write_text(f"name: smol\nbackend: llamacpp\ncontext_size: 2048\nthreads: 2\nparameters:\n"
                      f"  model: {smol_path.name}\noptions:\n  - n_parallel:1\n")
    served = load_models([config], models_dir=smol_path.parent, variant=variant, max_queue=1, isolate=False,
                         sessions_dir=tmp_path / "sessions")
    ask = {"model": "smol", "temperature": 0, "max_tokens": 24}
    try:
        with TestClient(create_app(served)) as c:
            first = c.post("/v1/chat/completions", json={**ask, "messages": chat_turn["history"][:-1]}).json()
            history = [*chat_turn["history"][:-1], first["choices"][0]["message"]]
            follow = [*history, chat_turn["follow"][-1]]
            saved = c.post("/sessions/geo?action=save", json={"model": "smol", "messages": history})
            assert saved.status_code == 200, saved.text
            stayed = c.post("/v1/chat/completions", json={**ask, "messages": follow}).json()
            c.post("/v1/chat/completions", json={**ask, "messages": [{"role": "user", "content": "Hi!"}]})
            restored = c.post("/sessions/geo?action=restore", json={"model": "smol"})
            assert restored.status_code == 200 and restored.json()["n_restored"] == saved.json()["n_saved"]
            back = c.post("/v1/chat/completions", json={**ask, "messages": follow}).json()
    finally:
        for m in served.values():
            m.engine.engine.close()
    assert back["choices"][0]["message"] == stayed["choices"][0]["message"]
    cached = back["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == stayed["usage"]["prompt_tokens_details"]["cached_tokens"] > 600
