"""Abandoned streams free their slot; every request is a result or a typed error (real engine)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.core import errors
from harness.qualify.specs import model_path, require_variant
from harness.runtime import Runtime


@pytest.fixture(scope="module")
def one_slot(variant: str) -> Iterator[Runtime]:
    """SmolLM2 with a single slot: a request that keeps running blocks the next one."""
    require_variant(variant)
    with Runtime.load(model_path("HARNESS_MODEL"), variant=variant, n_ctx=1024, max_num_seqs=1, threads=2,
                     stream_stall_timeout=1.0) as eng:
        yield eng


def _next_request_start(eng: Runtime) -> None:
    c = eng.complete("The capital of France is", temperature=0.0, max_tokens=1)
    assert c.n_generated == 1


def test_breaking_out_frees_the_slot(one_slot: Runtime) -> None:
    s = one_slot.stream("Once upon a time", temperature=0.0, max_tokens=500, ignore_eos=True)
    for n, _ in enumerate(s):
        if n == 2:
            break
    # `s` is still referenced: only the loop's end tells the engine nobody reads on.
    _next_request_start(one_slot)  # one slot: it runs only once the abandoned request is gone
    list(s)  # drains what is left: the request ended as cancelled, long before its 500 tokens
    assert s.result is not None and s.result.finish_reason == "cancelled"
    assert s.result.n_generated < 100, s.result.n_generated


def test_unread_stream_is_cancelled_after_the_stall_timeout(one_slot: Runtime) -> None:
    # Long enough that even a fast host is still generating when the 1 s stall timeout fires;
    # the outcome, not a wall-clock bound, is what is checked (timings are noisy on shared hosts).
    s = one_slot.stream("Once upon a time", temperature=0.0, max_tokens=1000, ignore_eos=True)
    it = iter(s)
    next(it)  # the consumer reads once, then walks away holding the iterator
    _next_request_start(one_slot)  # one slot: it runs only once the watchdog has cancelled the stream
    assert s.stalled
    list(it)  # what was produced before the cancel, then the end
    assert s.result is not None and s.result.finish_reason == "cancelled"
    assert s.result.n_generated < 1000, s.result.n_generated


@pytest.fixture(scope="module")
def tiny(variant: str) -> Iterator[Runtime]:
    require_variant(variant)
    with Runtime.load(model_path("HARNESS_TINY_MODEL"), variant=variant, n_ctx=256, max_num_seqs=1, threads=2) as eng:
        yield eng


_values = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=6),
                    st.lists(st.one_of(st.integers(-3, 400), st.text(max_size=3)), max_size=3))
_keys = st.sampled_from(["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "presence_penalty",
                         "repetition_penalty", "ignore_eos", "stop", "grammar"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kwargs=st.dictionaries(_keys, _values, max_size=3),
       prompt=st.one_of(st.text(max_size=12), st.lists(st.integers(-3, 400), max_size=4)))
def test_any_request_is_a_result_or_a_typed_error(tiny: Runtime, kwargs: dict[str, Any], prompt: Any) -> None:
    kwargs.setdefault("max_tokens", 4)
    if kwargs["max_tokens"] is None:
        kwargs["max_tokens"] = 4  # "until the context is full" is valid, only slow
    with contextlib.suppress(errors.EngineError):  # InvalidRequestError, ContextOverflowError, ...
        tiny.complete(prompt, **kwargs)
    assert tiny.complete("hello", temperature=0.0, max_tokens=2).n_generated >= 1


def test_regex_pattern_is_checked_before_the_engine(tiny: Runtime, tmp_path: Path) -> None:
    fmt = {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "(unclosed"}}}
    with pytest.raises(errors.InvalidRequestError, match="pattern"):
        tiny.chat([{"role": "user", "content": "hi"}], response_format=fmt, max_tokens=4)
