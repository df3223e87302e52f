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


def test_bandwidth_shape_is_a_0_5_to_1b_q4_0_llama() -> None:
    """The bandwidth-bound model's shape, from its tensor list (writing it takes seconds and 0.4 GB)."""
    from harness_plugins.llamacpp.random_llama import BANDWIDTH, Q4_0_BLOCK, QK4_0

    shapes = tensor_shapes(BANDWIDTH, len(vocabulary(BANDWIDTH.n_merges)[0]))
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    q4 = [s for n, s in shapes.items() if n.startswith("blk.") and len(s) == 2]
    weight_bytes = sum(int(np.prod(s)) // QK4_0 * Q4_0_BLOCK for s in q4)
    assert 0.5e9 <= n_params <= 1e9
    assert 0.3e9 <= weight_bytes <= 0.6e9
    # the matrices a decode streams are nearly all of it: the decode is bound by reading them
    assert sum(int(np.prod(s)) for s in q4) / n_params > 0.98
    assert BANDWIDTH.context_length >= 4 * (512 + 128) + 64, "qualify's bench context fits"


def test_random_llama_is_deterministic_q4_0_with_sane_weights(tmp_path: Path) -> None:
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from harness_plugins.llamacpp.random_llama import write_random_llama

    small = TinyConfig(embedding_length=128, feed_forward_length=256, block_count=2, head_count=4, head_count_kv=2)
    a = write_random_llama(tmp_path / "a.gguf", seed=0, config=small)
    b = write_random_llama(tmp_path / "b.gguf", seed=0, config=small)
    c = write_random_llama(tmp_path / "c.gguf", seed=1, config=small)
    assert a.read_bytes() == b.read_bytes() and a.read_bytes() != c.read_bytes()
    assert a.stat().st_size == c.stat().st_size
    reader = GGUFReader(a)
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.embedding_length") == 128
    assert str(_field(reader, "general.name")).endswith("-Q4_0-s0")
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.ffn_up.weight"] == GGMLQuantizationType.Q4_0
    assert types["token_embd.weight"] == GGMLQuantizationType.F32
    assert set(types) == set(tensor_shapes(small, len(vocabulary(small.n_merges)[0])))
    up = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    w = dequantize(up.data, up.tensor_type)
    assert w.shape == (256, 128)
    assert abs(float(w.mean())) < 0.002 and 0.018 < float(w.std()) < 0.022
    with pytest.raises(ValueError, match="divisible by 32"):
        write_random_llama(tmp_path / "x.gguf", config=TinyConfig(embedding_length=48, head_count=4))
