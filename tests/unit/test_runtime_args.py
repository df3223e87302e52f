from __future__ import annotations

import pytest

from harness.config.options import tristate
from harness.core.errors import InvalidRequestError
from harness.runtime.requests import response_schema as _response_schema
from harness.runtime.requests import tool_choice as _tool_choice
from harness.runtime.sampling import Sampling
from harness_plugins.llamacpp.engine import core_params


@pytest.mark.parametrize(("value", "want"), [(None, 0), (True, 1), (False, 2), (0, 0), (1, 1), (2, 2),
                                             ("auto", 0), ("on", 1), ("off", 2)])
def test_tri_state_keeps_explicit_false_apart_from_unset(value: object, want: int) -> None:
    # The runtime takes the config package's one tri-state definition.
    assert tristate(value) == want
    if value is not None:  # None: the argument is not given
        assert core_params({"prefix_caching": value}) == {"prefix_caching": want}
        assert core_params({"flash_attn": value}) == {"flash_attn": {0: -1, 1: 1, 2: 0}[want]}


def test_tri_state_refuses_other_values() -> None:
    with pytest.raises(ValueError, match="tri-state"):
        tristate("maybe")
    with pytest.raises(InvalidRequestError, match="enable_prefix_caching"):
        core_params({"enable_prefix_caching": "maybe"})


def test_engine_args_accept_config_spellings() -> None:
    p = core_params({"max_model_len": 4096, "n_parallel": 8, "cache_type_k": "q8_0",
                     "enable_prefix_caching": False, "threads": 2, "max_num_batched_tokens": 256})
    assert p == {"n_ctx": 4096, "max_num_seqs": 8, "kv_cache_type": "q8_0", "prefix_caching": 2,
                 "n_threads": 2, "n_batch": 256}
    # LocalAI's and the config package's own spellings (aliases), nothing written in the plugin.
    assert core_params({"context_size": 512, "parallel": 2, "gpu_layers": -1, "enable_radix_attention": True}) == {
        "n_ctx": 512, "max_num_seqs": 2, "n_gpu_layers": -1, "prefix_caching": 1}


def test_two_spellings_of_one_parameter_must_agree() -> None:
    assert core_params({"n_ctx": 512, "max_model_len": 512}) == {"n_ctx": 512}
    with pytest.raises(InvalidRequestError, match="n_ctx and max_model_len both set n_ctx"):
        core_params({"n_ctx": 512, "max_model_len": 1024})


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
