"""Every bad request is an InvalidRequestError naming the field, never another exception.

Runs against the fake binding core (tests/fakes/binding_core.py): validation happens
before anything reaches the C++ side, so no engine build is needed here; the e2e suite
runs the same properties on the real engine.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.core import errors
from harness.runtime import requests
from harness.runtime.sampling import Sampling

FAKE_CORE = Path(__file__).parents[1] / "fakes" / "binding_core.py"

# Per-module settings (no global profile): HYPOTHESIS_PROFILE=long runs 5000 examples each.
PROFILE = settings(max_examples=5000 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 150, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("bad, field", [
    ({"max_tokens": 2**40}, "max_tokens"),
    ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": math.nan}, "temperature"),
    ({"top_p": math.inf}, "top_p"),
    ({"top_k": True}, "top_k"),
    ({"seed": 2**80}, "seed"),
    ({"stop": ["x"] * 17}, "stop"),
    ({"stop": [3]}, "stop"),
    ({"ignore_eos": "yes"}, "ignore_eos"),
    ({"grammar": 12}, "grammar"),
])
def test_bad_sampling_is_typed(bad: dict[str, Any], field: str) -> None:
    with pytest.raises(errors.InvalidRequestError, match=field):
        Sampling.make(bad)


def test_max_tokens_none_means_until_the_context_is_full() -> None:
    assert Sampling.make(max_tokens=None).to_core()["max_tokens"] == 0
    assert Sampling.make(stop="END").stop == ("END",)


@pytest.mark.parametrize("fmt, field", [
    ({"type": "json_schema", "json_schema": "notadict"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "(unclosed"}}},
     "pattern"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}, "type"),
    ("json", "response_format"),
])
def test_bad_response_format(fmt: Any, field: str) -> None:
    with pytest.raises(errors.InvalidRequestError, match=field):
        requests.response_schema(fmt)


def test_good_response_formats() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"}}}
    assert requests.response_schema({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}) == schema
    assert requests.response_schema({"type": "json_object"}) == {"type": "object"}
    assert requests.response_schema(None) is None


def test_prompt_checks() -> None:
    with pytest.raises(errors.InvalidRequestError, match="not valid Unicode"):
        requests.prompt("caf\ud800e", 100)
    with pytest.raises(errors.InvalidRequestError, match=r"prompt\[1\] = 100"):
        requests.prompt([1, 100], 100)
    with pytest.raises(errors.InvalidRequestError, match=r"prompt\[0\] must be a token id"):
        requests.prompt([1.5], 100)
    with pytest.raises(errors.InvalidRequestError, match="no tokens"):
        requests.prompt([], 100)
    assert requests.prompt([0, 99], 100) == [0, 99]


def test_deep_json_is_refused_without_recursion_error() -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(errors.InvalidRequestError, match="nested deeper"):
        requests.messages([{"role": "user", "content": deep}])


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from harness.engine.descriptor import load_engine
    from harness.runtime import Runtime
    from harness_plugins.llamacpp.engine import _committed_fingerprint
    from harness_plugins.llamacpp.tiny import write_tiny_llama

    pkg = tmp_path / "bindings" / "harness_fake_steady"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(FAKE_CORE, pkg / "_core.py")
    (pkg / "identity.json").write_text(json.dumps({
        "engine": "llamacpp", "pin": load_engine("llamacpp").pin, "abi_fingerprint": _committed_fingerprint(),
        "platform": "cpu", "variant": "steady"}))
    monkeypatch.setenv("HARNESS_BINDING_PATH", str(tmp_path / "bindings"))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    with Runtime.load(model, variant="steady") as eng:
        yield eng


def test_fifo_model_is_refused(tmp_path: Path) -> None:
    from harness_plugins.llamacpp.models import resolve_model

    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(errors.ModelError, match="not a regular file"):
        resolve_model(fifo)


@pytest.mark.parametrize("args", [{"n_ctx": 1.5}, {"n_ctx": -1}, {"max_num_seqs": 0}, {"threads": "2"},
                                  {"n_ctx": 2**40}, {"stream_stall_timeout": 0}])
def test_bad_engine_args(args: dict[str, Any], tmp_path: Path) -> None:
    from harness.runtime import Runtime

    with pytest.raises(errors.InvalidRequestError):
        Runtime.load(tmp_path / "missing.gguf", **args)


_values = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.lists(st.one_of(st.integers(-5, 500), st.text(max_size=3)), max_size=4),
                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
_keys = st.sampled_from(["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "presence_penalty",
                         "frequency_penalty", "repetition_penalty", "ignore_eos", "stop", "grammar", "bogus"])


@PROFILE
@given(kwargs=st.dictionaries(_keys, _values, max_size=4),
       prompt=st.one_of(st.text(max_size=20), st.lists(st.integers(-5, 400), max_size=5), st.integers()))
def test_any_complete_call_is_a_result_or_a_typed_error(fake_engine: Any, kwargs: dict[str, Any], prompt: Any) -> None:
    with contextlib.suppress(errors.InvalidRequestError):
        fake_engine.complete(prompt, **kwargs)
    assert fake_engine.complete("still usable", max_tokens=2).text


@PROFILE
@given(fmt=st.one_of(st.none(), _values, st.fixed_dictionaries({"type": st.sampled_from(["json_schema", "json_object", "x"]),
                                                                "json_schema": _values})),
       choice=st.one_of(st.sampled_from(["auto", "none", "required"]), _values),
       messages=st.one_of(_values, st.lists(st.fixed_dictionaries({"role": st.text(max_size=4),
                                                                     "content": st.text(max_size=10)}), max_size=2)))
def test_any_chat_call_is_a_result_or_a_typed_error(fake_engine: Any, fmt: Any, choice: Any, messages: Any) -> None:
    with contextlib.suppress(errors.InvalidRequestError):
        fake_engine.chat(messages, tool_choice=choice, response_format=fmt)
