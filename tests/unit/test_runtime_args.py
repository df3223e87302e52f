from __future__ import annotations

import pytest

from harness.errors import InvalidRequestError
from harness.runtime.requests import response_schema as _response_schema
from harness.runtime.requests import tool_choice as _tool_choice
from harness.runtime.sampling import Sampling
from harness_plugins.llamacpp.engine import core_params, tri_state


@pytest.mark.parametrize(("value", "want"), [(None, 0), (True, 1), (False, 2), (0, 0), (1, 1), (2, 2)])
def test_tri_state_keeps_explicit_false_apart_from_unset(value: object, want: int) -> None:
    assert tri_state(value) == want


def test_tri_state_refuses_other_values() -> None:
    with pytest.raises(InvalidRequestError):
        tri_state("maybe")


def test_engine_args_accept_config_spellings() -> None:
    p = core_params({"max_model_len": 4096, "n_parallel": 8, "kv_cache_dtype": "q8_0",
                     "enable_prefix_caching": False, "threads": 2, "max_num_batched_tokens": 256})
    assert p == {"n_ctx": 4096, "max_num_seqs": 8, "kv_cache_type": "q8_0", "prefix_caching": 2,
                 "n_threads": 2, "n_batch": 256}


def test_unknown_engine_arg_did_you_mean() -> None:
    with pytest.raises(InvalidRequestError, match="did you mean 'max_num_seqs'"):
        core_params({"max_num_seq": 2})


def test_sampling_defaults_follow_llama_cpp() -> None:
    s = Sampling()
    assert (s.temperature, s.top_p, s.top_k, s.min_p) == (0.8, 0.95, 40, 0.05)
    assert "seed" not in s.to_core()


@pytest.mark.parametrize("bad", [{"temperature": -0.1}, {"top_p": 1.5}, {"top_k": -1}, {"min_p": -0.1},
                                 {"max_tokens": -5}, {"repetition_penalty": 0}, {"presence_penalty": 3},
                                 {"seed": -1}, {"stop": [""]}])
def test_invalid_sampling_values(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidRequestError):
        Sampling.make(bad)


def test_sampling_merge_and_unknown_key() -> None:
    s = Sampling.make({"temperature": 0.1}, max_tokens=3, stop=["x"])
    assert (s.temperature, s.max_tokens, s.stop) == (0.1, 3, ("x",))
    with pytest.raises(InvalidRequestError, match="did you mean 'top_k'"):
        Sampling.make(topk=3)


def test_tool_choice_forms() -> None:
    assert _tool_choice("required") == "required"
    assert _tool_choice({"type": "function", "function": {"name": "f"}}) == "f"
    with pytest.raises(InvalidRequestError):
        _tool_choice("sometimes")


def test_response_format_forms() -> None:
    schema = {"type": "object"}
    assert _response_schema({"type": "json_schema", "json_schema": {"schema": schema}}) == schema
    assert _response_schema({"type": "json_object"}) == {"type": "object"}
    assert _response_schema(None) is None
