from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

from harness_plugins.llamacpp.tiny import (
    BOS_ID,
    CHATML_TEMPLATE,
    EOS_ID,
    SPECIAL_TOKENS,
    TinyConfig,
    bytes_to_unicode,
    tensor_shapes,
    vocabulary,
    write_tiny_llama,
)


def _field(reader: GGUFReader, key: str) -> object:
    field = reader.get_field(key)
    assert field is not None, f"{key} missing"
    return field.contents()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf", seed=0)


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path, tiny: Path) -> None:
    again = write_tiny_llama(tmp_path / "again.gguf", seed=0)
    other = write_tiny_llama(tmp_path / "other.gguf", seed=1)
    digest = hashlib.sha256(tiny.read_bytes()).hexdigest()
    assert hashlib.sha256(again.read_bytes()).hexdigest() == digest
    assert other.read_bytes() != tiny.read_bytes()
    assert other.stat().st_size == tiny.stat().st_size, "the seed changes weights, not the layout"
    assert not list(tmp_path.glob(".*")), "no temporary file is left behind"


def test_metadata_reads_back(tiny: Path) -> None:
    r = GGUFReader(tiny)
    cfg = TinyConfig()
    assert _field(r, "general.architecture") == "llama"
    assert _field(r, "llama.context_length") == cfg.context_length
    assert _field(r, "llama.embedding_length") == cfg.embedding_length
    assert _field(r, "llama.block_count") == cfg.block_count
    assert _field(r, "llama.feed_forward_length") == cfg.feed_forward_length
    assert _field(r, "llama.attention.head_count") == cfg.head_count
    assert _field(r, "llama.attention.head_count_kv") == cfg.head_count_kv
    assert _field(r, "llama.rope.dimension_count") == cfg.embedding_length // cfg.head_count
    assert _field(r, "tokenizer.ggml.model") == "gpt2"
    assert _field(r, "tokenizer.ggml.pre") == "default"
    assert _field(r, "tokenizer.chat_template") == CHATML_TEMPLATE
    assert _field(r, "tokenizer.ggml.bos_token_id") == BOS_ID
    assert _field(r, "tokenizer.ggml.eos_token_id") == EOS_ID
    merges = _field(r, "tokenizer.ggml.merges")
    assert isinstance(merges, list) and len(merges) >= 1
    tokens = _field(r, "tokenizer.ggml.tokens")
    assert isinstance(tokens, list) and 256 < len(tokens) < 1000
    assert _field(r, "llama.vocab_size") == len(tokens)
    types = _field(r, "tokenizer.ggml.token_type")
    assert isinstance(types, list)
    for i, tok in enumerate(SPECIAL_TOKENS):
        assert tokens[i] == tok and types[i] == 3, "<|im_start|>/<|im_end|> are control tokens"
    merges_field = r.get_field("tokenizer.ggml.merges")
    assert merges_field is not None
    assert merges_field.types == [GGUFValueType.ARRAY, GGUFValueType.STRING], "llama.cpp requires a string array"


def test_tensors_have_llama_cpp_shapes(tiny: Path) -> None:
    r = GGUFReader(tiny)
    n_vocab = len(vocabulary(TinyConfig().n_merges)[0])
    expected = tensor_shapes(TinyConfig(), n_vocab)
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(expected)
    for name, shape in expected.items():
        t = got[name]
        # GGUF stores ggml's ne (fastest dimension first): the numpy shape reversed.
        assert tuple(int(x) for x in t.shape) == tuple(reversed(shape)), name
        assert t.tensor_type == 0, f"{name} is F32"
    assert got["blk.0.attn_k.weight"].shape.tolist() == [64, 32], "GQA: 2 kv heads of 16"
    assert np.all(got["output_norm.weight"].data == 1.0)


def test_vocabulary_covers_every_byte_and_merges_are_consistent() -> None:
    tokens, types, merges = vocabulary(TinyConfig().n_merges)
    assert len(tokens) == len(set(tokens)) == len(types)
    vocab = set(tokens)
    assert set(bytes_to_unicode().values()) <= vocab, "every byte has a token: any text tokenizes"
    assert merges
    for m in merges:
        a, b = m.split(" ")
        assert a in vocab and b in vocab and a + b in vocab, m
    assert vocabulary(TinyConfig().n_merges) == (tokens, types, merges)


def test_bad_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="head_count"):
        write_tiny_llama(tmp_path / "x.gguf", config=TinyConfig(head_count=3))
