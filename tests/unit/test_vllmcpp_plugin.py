"""The vllm.cpp engine plugin without a built binding: registration, ``backend: vllm-cpp`` configs
selecting it, its option names reaching its load parameters, the model rule, the sampling
mapping and the ABI handshake's refusal (a module double that reports another ABI version)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.config.model import model_config
from harness.config.select import select_engine
from harness.core.errors import BindingError, InvalidRequestError, ModelError
from harness.core.types import HostInfo
from harness.engine import registry
from harness.runtime.sampling import Sampling
from harness_plugins.vllmcpp import match
from harness_plugins.vllmcpp.engine import core_params, handshake, resolve_model, sampling_core

HOST = HostInfo(os="linux", arch="x86_64", cpu_model="test", microarch="x86_64_v3", simd=("avx2",),
                cores=8, memory_bytes=16 << 30)


def _hf_dir(root: Path, arch: str = "LlamaForCausalLM") -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": "llama",
                                                  "max_position_embeddings": 256}))
    (root / "model.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}")
    return root


def test_the_engine_is_registered_and_serves_localai_vllm_cpp() -> None:
    impl = registry.get("vllmcpp")
    assert impl.localai_backends == ("vllm-cpp",) and impl.serves == ("text",) and not impl.default
    assert impl.load is not None and impl.match is not None and impl.config_check is not None


def test_a_vllm_cpp_config_selects_this_engine(tmp_path: Path) -> None:
    _hf_dir(tmp_path / "tiny")
    sel = select_engine(model_config({"name": "m", "backend": "vllm-cpp", "parameters": {"model": "tiny"}}),
                        HOST, models_dir=tmp_path)
    assert sel.chosen is not None and sel.chosen.engine == "vllmcpp", sel
    # without the backend line, the default text engine is asked first, as before
    plain = select_engine(model_config({"name": "m", "parameters": {"model": "tiny"}}), HOST, models_dir=tmp_path)
    assert plain.chosen is not None and plain.chosen.engine != "vllmcpp"


def test_match_says_why_a_model_is_not_vllm_cpps() -> None:
    assert match({"format": "safetensors", "architecture": "llama", "architectures": ["LlamaForCausalLM"]}, HOST).ok
    gguf = match({"format": "ggufv2", "architecture": "llama"}, HOST)
    assert not gguf.ok and "qwen35" in gguf.reason and "llama" in gguf.reason
    assert match({"format": "ggufv2", "architecture": "qwen35"}, HOST).ok
    bert = match({"format": "safetensors", "architecture": "bert", "architectures": ["BertModel"]}, HOST)
    assert not bert.ok and "BertModel" in bert.reason
    assert "pytorch" in match({"format": "pytorch"}, HOST).reason
    assert "gptq" in match({"format": "gptq"}, HOST).reason


def test_validate_refuses_a_model_that_is_neither_gguf_nor_a_config_dir(tmp_path: Path) -> None:
    from harness.config.validate import Validator

    (tmp_path / "weights.bin").write_bytes(b"\0")
    (tmp_path / "empty").mkdir()
    _hf_dir(tmp_path / "ok")
    for model, ok in (("weights.bin", False), ("empty", False), ("ok", True)):
        [item] = Validator(models_dir=tmp_path).validate_text(
            f"name: m\nbackend: vllm-cpp\nparameters: {{model: {model}}}\n", "m.yaml")
        errors = [d for d in getattr(item, "diagnostics", (item,)) if d.severity == "error"]
        assert (not errors) == ok, (model, [str(d) for d in errors])


def test_vllm_cpps_option_names_reach_its_load_parameters() -> None:
    got = core_params({"max_num_seqs": 4, "max_model_len": 512, "block_size": 16, "num_blocks": 64,
                       "tool_call_parser": "hermes", "reasoning_parser": "none", "threads": 2})
    assert got == {"max_num_seqs": 4, "max_model_len": 512, "block_size": 16, "num_blocks": 64,
                   "tool_parser": "hermes", "reasoning_parser": "none", "threads": 2}
    assert core_params({"context_size": 1024, "n_parallel": 2}) == {"max_model_len": 1024, "max_num_seqs": 2}
    with pytest.raises(InvalidRequestError, match="block_size"):
        core_params({"blok_size": 16})
    with pytest.raises(InvalidRequestError, match=r"\[0, 2147483647\]"):
        core_params({"num_blocks": -1})
    with pytest.raises(InvalidRequestError, match="both set max_model_len"):
        core_params({"context_size": 1024, "max_model_len": 512})


def test_sampling_maps_onto_the_c_abi_fields() -> None:
    s = Sampling(temperature=0, max_tokens=8, seed=3, stop=("\n",), top_k=0, grammar='root ::= "a"')
    assert sampling_core(s) == {"temperature": 0, "top_p": 0.95, "top_k": 0, "min_p": 0.05, "max_tokens": 8,
                                "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
                                "ignore_eos": False, "stop": ["\n"], "seed": 3, "grammar": 'root ::= "a"'}
    with pytest.raises(InvalidRequestError, match="repeat_last_n"):
        sampling_core(Sampling(repeat_last_n=64))


def test_the_model_rule(tmp_path: Path) -> None:
    ok = _hf_dir(tmp_path / "hf")
    assert resolve_model(ok) == ok
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert resolve_model(tmp_path / "m.gguf") == tmp_path / "m.gguf"
    (tmp_path / "bare").mkdir()
    for bad, why in ((tmp_path / "bare", "without config.json"), (tmp_path / "none", "does not exist")):
        with pytest.raises(ModelError, match=why):
            resolve_model(bad)


def test_a_binding_compiled_for_another_abi_version_is_refused_naming_both() -> None:
    module = SimpleNamespace(COMPILED_ABI_VERSION=5, library_abi_version=lambda: 6, ABI_FINGERPRINT="x", PIN="p")
    with pytest.raises(BindingError) as e:
        handshake(module)
    assert "VLLM_ABI_VERSION 5" in str(e.value) and "vllm_abi_version() 6" in str(e.value)
    handshake(SimpleNamespace(COMPILED_ABI_VERSION=5, library_abi_version=lambda: 5))


def test_a_commit_pin_makes_a_valid_wheel_version() -> None:
    from packaging.version import Version

    from harness.binding.wheel import wheel_version

    assert wheel_version("0.3.36") == "0.3.36"
    assert wheel_version("d85906ae5896") == "0+d85906ae5896"  # the vllm.cpp pin: a commit, not PEP 440
    assert Version(wheel_version("d85906ae5896")).local == "d85906ae5896"
