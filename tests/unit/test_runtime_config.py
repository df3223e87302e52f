"""``Runtime.load(config=...)``: a model config loads with the values ``harness config show`` prints.

Runs on the fake binding core (tests/fakes/binding_core.py), which records the parameters
and each request's sampling it receives: what is asserted is what reached the engine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import harness.cli
from harness.core import errors
from harness.runtime import Runtime
from tests.fakes import install_binding
from tests.unit.test_config_validate import tiny_gguf

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "models" / "smollm2-chat.yaml"
#: config parameter (as `config show` names it) -> the llama.cpp core parameter it feeds.
FED = {"n_ctx": "n_ctx", "threads": "n_threads", "threads_batch": "n_threads_batch", "n_batch": "n_batch",
       "n_ubatch": "n_ubatch", "n_parallel": "max_num_seqs", "cache_type_k": "kv_cache_type",
       "enable_prefix_caching": "prefix_caching"}


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A models dir holding the example config's model (a tiny GGUF), and the fake binding installed."""
    from harness.engine.descriptor import load_engine
    from harness_plugins.llamacpp.engine import _committed_fingerprint

    install_binding(tmp_path / "bindings", "steady", {
        "engine": "llamacpp", "pin": load_engine("llamacpp").pin, "abi_fingerprint": _committed_fingerprint(),
        "platform": "cpu"})
    monkeypatch.setenv("HARNESS_BINDING_PATH", str(tmp_path / "bindings"))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HARNESS_MODELS_DIR", raising=False)
    models = tmp_path / "models"
    tiny_gguf(models / "SmolLM2-135M-Instruct.Q4_1.gguf")
    return models


def shown(config: Path, models: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``harness config show --json``'s parameters: value by name."""
    capsys.readouterr()
    assert harness.cli.main(["config", "show", str(config), "--models-dir", str(models), "--json"]) == 0
    return {k: v["value"] for k, v in json.loads(capsys.readouterr().out)["params"].items()}


def test_the_engine_gets_what_config_show_prints(models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    show = shown(EXAMPLE, models, capsys)
    with Runtime.load(config=EXAMPLE, models_dir=models, variant="steady") as eng:
        got = eng.core.params
        assert eng.model_path == models / "SmolLM2-135M-Instruct.Q4_1.gguf"
        assert {param: got[core] for param, core in FED.items()} == {param: show[param] for param in FED}
        assert got["flash_attn"] == -1 and show["flash_attn"] == 0  # tri-state unset: llama.cpp's auto
        assert "n_gpu_layers" not in got and show["n_gpu_layers"] is None
        # The example's own values, so the comparison above is not vacuous.
        assert (got["n_ctx"], got["max_num_seqs"], got["n_batch"], got["prefix_caching"]) == (2048, 4, 512, 1)

        eng.complete("hi")
        sampling = eng.core.submitted[-1]["sampling"]
        assert sampling == {
            "temperature": show["sampling.temperature"], "top_p": show["sampling.top_p"],
            "top_k": show["sampling.top_k"], "min_p": show["sampling.min_p"],
            "max_tokens": show["sampling.max_tokens"], "seed": show["sampling.seed"],
            "repetition_penalty": show["sampling.repeat_penalty"],
            "penalty_last_n": show["sampling.repeat_last_n"],
            "presence_penalty": show["sampling.presence_penalty"],
            "frequency_penalty": show["sampling.frequency_penalty"],
            "ignore_eos": show["sampling.ignore_eos"], "stop": show["sampling.stop"]}
        assert (sampling["top_k"], sampling["seed"], sampling["stop"]) == (50, 42, ["<|im_end|>"])
        assert eng.not_applied == ("scheduling_policy", "template.use_tokenizer_template")


def test_request_values_go_over_the_config_defaults(models: Path) -> None:
    with Runtime.load(config=EXAMPLE, models_dir=models, variant="steady") as eng:
        eng.complete("hi", {"top_k": 3}, temperature=0.1)
        eng.chat([{"role": "user", "content": "hi"}], max_tokens=5)
        first, chat = (r["sampling"] for r in eng.core.submitted)
        assert (first["top_k"], first["temperature"], first["top_p"]) == (3, 0.1, 0.9)
        assert (chat["max_tokens"], chat["temperature"], chat["stop"]) == (5, 0.7, ["<|im_end|>"])


def test_engine_args_given_win_over_the_config(models: Path) -> None:
    with Runtime.load(config=EXAMPLE, models_dir=models, variant="steady", max_model_len=512,
                     prefix_caching=False) as eng:
        got = eng.core.params
        assert (got["n_ctx"], got["prefix_caching"], got["max_num_seqs"]) == (512, 2, 4)


def test_defaults_fill_what_the_config_leaves_unset(models: Path, tmp_path: Path) -> None:
    config = tmp_path / "bare.yaml"
    config.write_text("name: bare\nbackend: llama-cpp\nparameters:\n  model: SmolLM2-135M-Instruct.Q4_1.gguf\n"
                      "options:\n  - cache_type_k:q8_0\n  - max_num_batched_tokens:256\n")
    with Runtime.load(config, models_dir=models, variant="steady") as eng:  # a .yaml path is a config
        got = eng.core.params
        # n_ctx from the GGUF header; the batch and KV type the config sets win over the defaults.
        assert (got["n_ctx"], got["n_batch"], got["kv_cache_type"]) == (2048, 256, "q8_0")
        eng.complete("hi")
        sampling = eng.core.submitted[-1]["sampling"]
        assert (sampling["temperature"], sampling["max_tokens"], "seed" in sampling) == (0.9, 0, False)


def test_an_invalid_config_is_refused_with_its_diagnostics(models: Path, tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("name: bad\nbackend: llamacpp\nparameters:\n  model: weights.bin\n")
    with pytest.raises(errors.ConfigError,
                       match=r"bad.yaml:4:10: error: parameters.model 'weights.bin' not found in the models directory"):
        Runtime.load(config=config, models_dir=models, variant="steady")


def test_a_model_and_a_config_are_one_too_many(models: Path, tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "m.yaml")
    with pytest.raises(errors.UsageError, match="not both"):
        Runtime.load(models / "SmolLM2-135M-Instruct.Q4_1.gguf", config=tmp_path / "m.yaml")
