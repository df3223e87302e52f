"""Effective engine parameters: every precedence rule and default, with provenance."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from harness.config.effective import Effective, effective
from harness.config.model import option_specs
from harness.config.options import convert, tristate
from harness.config.validate import Validated, Validator

ENGINES = {"llamacpp", "sdcpp"}
BASE = "name: m\nbackend: llamacpp\nparameters:\n  model: m.gguf\n"


def tiny_gguf(path: Path, *, context_length: int = 2048) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(context_length)
    w.add_basename("SmolLM2")
    w.add_size_label("135M")
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def show(text: str, models_dir: Path | None = None, cpus: int = 16, **kw: Any) -> Effective:
    [item] = Validator(engines=ENGINES, models_dir=models_dir).validate_text(textwrap.dedent(text), "m.yaml")
    assert isinstance(item, Validated) and item.ok, item
    return effective(item.document.data, item.options, models_dir=models_dir, cpus=cpus, **kw)


def val(e: Effective, key: str) -> tuple[Any, str]:
    s = e.params[key]
    return s.value, s.source


def test_sequence_length_precedence() -> None:
    assert val(show(BASE), "n_ctx") == (0, "default")
    assert val(show(BASE + "context_size: 1024\n"), "n_ctx") == (1024, "context_size")
    text = BASE + "context_size: 1024\noptions: [max_model_len:2048]\n"
    assert val(show(text), "n_ctx") == (2048, "options")
    text += "engine_args: {max_model_len: 4096}\n"
    assert val(show(text), "n_ctx") == (4096, "engine_args")


def test_n_ctx_from_gguf_header(tmp_path: Path) -> None:
    tiny_gguf(tmp_path / "m.gguf", context_length=8192)
    assert val(show(BASE, tmp_path), "n_ctx") == (8192, "model header")
    assert val(show(BASE + "context_size: 512\n", tmp_path), "n_ctx") == (512, "context_size")


def test_n_ctx_unreadable_header_notes(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"not a gguf")
    e = show(BASE, tmp_path)
    assert val(e, "n_ctx") == (0, "default")
    assert e.notes and "no context length readable" in e.notes[0]


def test_n_parallel_default_and_alias() -> None:
    assert val(show(BASE, cpus=4), "n_parallel") == (4, "default")
    assert val(show(BASE, cpus=64), "n_parallel") == (8, "default")
    assert val(show(BASE + "options: [max_num_seqs:16]\n"), "n_parallel") == (16, "options")


def test_threads() -> None:
    e = show(BASE, cpus=6)
    assert val(e, "threads") == (6, "default") and val(e, "threads_batch") == (6, "default")
    e = show(BASE + "threads: 3\n")
    assert val(e, "threads") == (3, "threads") and val(e, "threads_batch") == (3, "threads")
    e = show(BASE + "threads: 3\noptions: [threads_batch:5]\n")
    assert val(e, "threads_batch") == (5, "options")


def test_engine_args_win_over_options() -> None:
    e = show(BASE + "options: [block_size:16, num_blocks:100]\nengine_args: {block_size: 64}\n")
    assert val(e, "block_size") == (64, "engine_args")
    assert val(e, "num_blocks") == (100, "options")
    assert val(e, "max_num_batched_tokens") == (0, "default")


def test_tristate_booleans() -> None:
    assert [tristate(None), tristate(True), tristate(False)] == [0, 1, 2]
    e = show(BASE + "options: [enable_prefix_caching:false, enable_radix_attention:true]\n")
    assert val(e, "enable_prefix_caching") == (1, "options")  # alias, later wins
    e = show(BASE + "options: [enable_prefix_caching:false]\n")
    assert val(e, "enable_prefix_caching") == (2, "options")  # explicit false is never "default"
    assert val(e, "enable_jump_forward") == (0, "default")
    e = show(BASE + "options: [enable_prefix_caching:false]\nengine_args: {enable_prefix_caching: null}\n")
    assert val(e, "enable_prefix_caching") == (0, "default")


def test_tristate_convert_keeps_false_apart_from_unset() -> None:
    spec = option_specs()["enable_prefix_caching"]
    assert convert("x", spec, "false") == (False, None)
    assert convert("x", spec, "") == (None, None)
    assert convert("x", spec, False) == (False, None)


def test_json_option_value_preserved() -> None:
    e = show(BASE + "options:\n  - 'speculative_config:{\"method\":\"mtp\",\"num_speculative_tokens\":2}'\n")
    assert val(e, "speculative_config") == ({"method": "mtp", "num_speculative_tokens": 2}, "options")
    e = show(BASE + "engine_args:\n  speculative_config: {method: ngram}\n")
    assert val(e, "speculative_config") == ({"method": "ngram"}, "engine_args")


def test_sampling_provenance() -> None:
    text = BASE + "  temperature: 0.2\n  stop: [END]\noptions: [sampling.top_k:7]\n"
    e = show(text + "engine_args: {sampling: {min_p: 0.1}}\n")
    assert val(e, "sampling.temperature") == (0.2, "parameters")
    assert val(e, "sampling.top_k") == (7, "options")
    assert val(e, "sampling.min_p") == (0.1, "engine_args")
    assert val(e, "sampling.top_p") == (0.95, "default (LocalAI default)")
    assert val(e, "sampling.stop") == (["END"], "parameters")


def test_unknown_keys_listed_as_ignored() -> None:
    [item] = Validator(engines=ENGINES).validate_text(BASE + "options: [foo:1]\n", "m.yaml")
    assert isinstance(item, Validated)
    e = effective(item.document.data, item.options, cpus=1)
    assert e.to_json()["ignored"] == {"foo": {"value": "1", "source": "options (ignored: unknown key)"}}


def test_paths_resolve_against_models_dir(tmp_path: Path) -> None:
    tiny_gguf(tmp_path / "m.gguf")
    (tmp_path / "p.gguf").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    e = show(BASE + "mmproj: p.gguf\ndraft_model: hub/d\n", tmp_path)
    assert val(e, "model") == (str(tmp_path / "m.gguf"), "parameters")
    assert val(e, "mmproj") == (str(tmp_path / "p.gguf"), "mmproj")
    assert val(e, "draft_model") == (str(tmp_path / "d"), "draft_model")
    assert val(show(BASE + "draft_model: hub/d\n"), "draft_model") == ("hub/d", "draft_model")


def test_video_defaults() -> None:
    text = BASE + textwrap.dedent("""\
        options:
          - video_encoder:h3/enc.gguf
          - video_tokenizer:h3/tok.json
          - video_vae:h3/vae.safetensors
          - audio_vae:h3/a/audio.safetensors
          - video_num_frames:141
        """)
    e = show(text)
    assert val(e, "video_vae_config") == ("h3/config.json", "default (beside video_vae)")
    assert val(e, "audio_vae_config") == ("h3/a/config.json", "default (beside audio_vae)")
    assert val(e, "video_partition") == ("fl2va", "default (assumed)")
    assert val(e, "video_width") == (1344, "default (minimax-h3)")
    assert val(e, "video_family") == ("minimax-h3", "default (minimax-h3)")
    assert val(e, "video_num_frames") == (141, "options")
    assert val(e, "video_dequant_bf16") == (0, "default")
    assert "video_width" not in show(BASE).params


def test_video_defaults_follow_the_engines_family() -> None:
    """stable-diffusion.cpp renders Wan: its defaults, and no VAE config beside the weights."""
    text = BASE.replace("llamacpp", "sdcpp") + "options: [video_vae:wan/vae.gguf]\n"
    [item] = Validator(engines=ENGINES).validate_text(text, "m.yaml")
    assert isinstance(item, Validated)
    e = effective(item.document.data, item.options, cpus=4, engine="sdcpp")
    assert val(e, "video_family") == ("wan", "default (wan)")
    assert (val(e, "video_width"), val(e, "video_height")) == ((832, "default (wan)"), (480, "default (wan)"))
    assert val(e, "video_num_frames") == (81, "default (wan)")
    assert val(e, "video_vae_config") == (None, "default")


@pytest.mark.parametrize("cpus", [1, 8, 9])
def test_to_json_round_trip(cpus: int) -> None:
    data = show(BASE, cpus=cpus).to_json()
    assert data["name"] == "m" and data["backend"] == "llamacpp"
    assert data["params"]["n_parallel"] == {"value": min(8, cpus), "source": "default"}
