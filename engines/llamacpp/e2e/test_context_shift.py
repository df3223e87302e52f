"""Chats longer than the context on SmolLM2-135M-Instruct (HARNESS_CHAT_MODEL), n_ctx 256: with
context_shift on, a chat that grows to three times the context completes turn after turn (the oldest
turns erased, the system prompt kept) and a generation runs on past the context; with it off, the
turn that no longer fits is refused with today's error and a generation stops at the context."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.core import errors
from harness.qualify.specs import model_path, require_variant
from harness.runtime import Runtime
from harness.runtime.state import header_of

N_CTX = 256
SYSTEM = {"role": "system", "content": "You are a terse assistant for a trivia game. Reply in one short sentence."}
GREEDY: dict[str, Any] = {"temperature": 0.0, "max_tokens": 24}


@pytest.fixture(scope="module")
def smol_path(variant: str) -> Path:
    require_variant(variant)
    return model_path("HARNESS_CHAT_MODEL")


@pytest.fixture(scope="module")
def shifting(variant: str, smol_path: Path) -> Iterator[Any]:
    with Runtime.load(smol_path, variant=variant, n_ctx=N_CTX, max_num_seqs=1, threads=2, context_shift=True) as eng:
        yield eng


@pytest.fixture(scope="module")
def fixed(variant: str, smol_path: Path) -> Iterator[Any]:
    with Runtime.load(smol_path, variant=variant, n_ctx=N_CTX, max_num_seqs=1, threads=2) as eng:
        yield eng


def _question(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"Trivia round {i + 1}: name a famous city in Europe and say which country "
                                       f"it is in, please, and keep it short this time (round {i + 1})."}


def _chat_tokens(eng: Any, msgs: list[dict[str, str]]) -> int:
    return len(eng.core.chat_tokens(json.dumps(msgs)))


def test_a_chat_three_times_the_context_completes(shifting: Any) -> None:
    assert shifting.info()["context_shift"] is True
    history: list[dict[str, str]] = [SYSTEM]
    system_tokens = shifting.core.chat_tokens(json.dumps([SYSTEM]))
    erased, turns = 0, 0
    while _chat_tokens(shifting, history) <= 3 * N_CTX:
        history.append(_question(turns))
        r = shifting.chat(history, sampling=GREEDY)
        assert r.finish_reason in ("stop", "length"), (turns, r)
        assert r.completion.n_prompt < N_CTX
        erased += r.completion.n_erased
        history.append({"role": "assistant", "content": r.content})
        turns += 1
        # the sequence the turn left starts with the system prompt, whatever was erased after it
        held = header_of(shifting.save_state())["tokens"]
        assert held[:len(system_tokens)] == system_tokens
    assert _chat_tokens(shifting, history) > 3 * N_CTX and turns >= 6
    assert erased > 2 * N_CTX, "the oldest turns went, more than twice the context of them"


def test_a_generation_runs_past_the_context(shifting: Any) -> None:
    c = shifting.complete("Count with me: one, two, three,", temperature=0.0, max_tokens=3 * N_CTX, ignore_eos=True)
    assert c.finish_reason == "length" and c.n_generated == 3 * N_CTX
    assert c.n_erased >= 2 * N_CTX // 2, "shifted at least twice, half of the context each time"


def test_a_prompt_longer_than_the_context_loses_its_oldest_tokens(shifting: Any) -> None:
    prompt = list(range(1000, 1000 + 2 * N_CTX))
    c = shifting.complete(prompt, temperature=0.0, max_tokens=4)
    assert c.n_prompt < N_CTX and c.n_erased == 2 * N_CTX - c.n_prompt and c.n_generated == 4


def test_off_the_chat_that_outgrows_the_context_is_refused(fixed: Any) -> None:
    assert fixed.info()["context_shift"] is False
    history: list[dict[str, str]] = [SYSTEM]
    with pytest.raises(errors.ContextOverflowError, match=f"does not fit the context of {N_CTX} tokens"):
        for i in range(3 * N_CTX):
            history.append(_question(i))
            r = fixed.chat(history, sampling=GREEDY)
            history.append({"role": "assistant", "content": r.content})
    assert N_CTX - 64 < _chat_tokens(fixed, history) < 2 * N_CTX


def test_off_a_generation_stops_at_the_context(fixed: Any) -> None:
    c = fixed.complete("Count with me: one, two, three,", temperature=0.0, max_tokens=3 * N_CTX, ignore_eos=True)
    assert c.finish_reason == "length" and c.n_erased == 0
    assert c.n_prompt + c.n_generated == N_CTX
