"""The random-weight HF Llama vllm.cpp and llama.cpp both run (engines/vllmcpp/plugin/random_hf.py), on a
small shape and a small GPT-2-style vocabulary written here (the real one is GPT-2's, in the
pinned llama.cpp's models/ggml-vocab-gpt-2.gguf)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.core.errors import ModelError
from harness_plugins.vllmcpp import random_hf
from harness_plugins.vllmcpp.bench import WORDS, model_facts, text_prompt

SMALL = random_hf.Shape(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=64)


def _vocab_gguf(path: Path, model: str = "gpt2") -> Path:
    import gguf

    b2u = _bytes_to_unicode()
    tokens = [*(b2u[b] for b in range(256)), "\u0120t", "he", "\u0120the", "<|endoftext|>"]
    types = [*([1] * (len(tokens) - 1)), 3]
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["\u0120 t", "h e", "\u0120t he"])
    w.add_eos_token_id(len(tokens) - 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def _bytes_to_unicode() -> dict[int, str]:
    bs = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


def _tensors(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out: dict[str, Any] = {"__metadata__": header.pop("__metadata__")}
    for name, t in header.items():
        lo, hi = t["data_offsets"]
        u16 = np.frombuffer(data[lo:hi], dtype="<u2").astype(np.uint32) << 16
        out[name] = (t["dtype"], u16.view(np.float32).reshape(t["shape"]), (lo, hi))
    return out


@pytest.fixture
def vocab(tmp_path: Path) -> Path:
    return _vocab_gguf(tmp_path / "vocab.gguf")


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path, vocab: Path) -> None:
    a = random_hf.write_random_hf_llama(tmp_path / "a", 0, vocab_path=vocab, shape=SMALL)
    b = random_hf.write_random_hf_llama(tmp_path / "b", 0, vocab_path=vocab, shape=SMALL)
    c = random_hf.write_random_hf_llama(tmp_path / "c", 1, vocab_path=vocab, shape=SMALL)
    assert sorted(p.name for p in a.iterdir()) == sorted(random_hf.FILES)
    for name in random_hf.FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()
    # a second write into the same place replaces it whole
    (a / "stale.bin").write_bytes(b"x")
    random_hf.write_random_hf_llama(a, 0, vocab_path=vocab, shape=SMALL)
    assert not (a / "stale.bin").exists()


def test_weights_are_bf16_in_the_hf_layout_with_the_drawn_scales(tmp_path: Path, vocab: Path) -> None:
    d = random_hf.write_random_hf_llama(tmp_path / "m", 0, vocab_path=vocab, shape=SMALL)
    t = _tensors(d / "model.safetensors")
    assert t.pop("__metadata__") == {"format": "pt"}
    n_vocab = 260
    want = random_hf.tensor_shapes(SMALL, n_vocab)
    assert list(t) == list(want) and "lm_head.weight" not in t, "tied: the output head is the embedding"
    ends = 0
    for name, (dtype, a, (lo, hi)) in t.items():
        assert dtype == "BF16" and a.shape == want[name] and lo == ends
        ends = hi
    assert t["model.layers.0.self_attn.k_proj.weight"][1].shape == (2 * 4, 16)
    assert np.all(t["model.norm.weight"][1] == 1.0)
    assert abs(float(t["model.embed_tokens.weight"][1].std()) - 1.0) < 0.05
    assert abs(float(t["model.layers.1.mlp.down_proj.weight"][1].std()) - 32 ** -0.5) < 0.03
    assert model_facts(str(d))["n_params"] == sum(int(np.prod(s)) for s in want.values())


def test_tokenizer_and_config_are_what_both_engines_read(tmp_path: Path, vocab: Path) -> None:
    d = random_hf.write_random_hf_llama(tmp_path / "m", 0, vocab_path=vocab, shape=SMALL)
    tok = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    # vllm.cpp reads a missing use_regex as false; GPT-2's pre-tokenizer needs it true
    assert tok["pre_tokenizer"] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                    "use_regex": True}
    assert tok["model"]["type"] == "BPE" and tok["model"]["byte_fallback"] is False
    assert tok["model"]["vocab"]["\u0120the"] == 258 and tok["model"]["merges"] == ["\u0120 t", "h e", "\u0120t he"]
    assert [(a["id"], a["content"], a["special"]) for a in tok["added_tokens"]] == [(259, "<|endoftext|>", True)]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["vocab_size"] == 260 and cfg["tie_word_embeddings"]
    assert cfg["head_dim"] == 4 and cfg["eos_token_id"] == 259 and cfg["torch_dtype"] == "bfloat16"
    tc = json.loads((d / "tokenizer_config.json").read_text())
    assert tc["add_bos_token"] is False and tc["tokenizer_class"] == "GPT2Tokenizer" and "{%" in tc["chat_template"]


def test_bf16_rounds_to_nearest_even() -> None:
    bits = [0x3F800000, 0x3F808000, 0x3F80C000, 0x3F818000, 0xBF7FFFFF]
    a = np.array(bits, dtype=np.uint32).view(np.float32)
    got = np.frombuffer(random_hf.to_bf16(a), dtype="<u2").tolist()
    assert got == [0x3F80, 0x3F80, 0x3F81, 0x3F82, 0xBF80]


def test_other_vocabularies_and_shapes_are_refused(tmp_path: Path, vocab: Path) -> None:
    spm = _vocab_gguf(tmp_path / "spm.gguf", model="llama")
    with pytest.raises(ModelError, match="holds a llama tokenizer"):
        random_hf.read_vocab(spm)
    with pytest.raises(ModelError, match="heads must divide"):
        random_hf.write_random_hf_llama(tmp_path / "x", 0, vocab_path=vocab,
                                        shape=random_hf.Shape(hidden_size=18, num_attention_heads=4))


def test_bench_prompts_are_one_word_per_token_and_repeatable() -> None:
    assert len(set(WORDS)) == len(WORDS) and all(w.startswith(" ") and w[1:].isalpha() for w in WORDS)
    p = text_prompt(100, salt=3)
    assert p == text_prompt(100, salt=3) != text_prompt(100, salt=4)
    assert len(p.split()) == 100
