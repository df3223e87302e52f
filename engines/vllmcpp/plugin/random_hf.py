"""A random-weight Llama as a Hugging Face directory, the same bytes for the same seed: the model
vllm.cpp and llama.cpp both run (vllm.cpp loads the directory, llama.cpp its GGUF conversion by the
pinned llama.cpp's own ``convert_hf_to_gguf.py``).

Why this model and not a real checkpoint: vllm.cpp's GGUF loader takes the Qwen3.5 family only,
and no registry these machines reach carries a small safetensors checkpoint of a family both
engines load. Why GPT-2's tokenizer: it must be one that all three programs read the same way.
vllm.cpp's tokenizer takes a byte-level BPE whose pre-tokenizer is ``ByteLevel(use_regex)``
(GPT-2's; ``SplitPattern::kGpt2``), one GPT-4-style ``Split``, or ``Metaspace``; it refuses
SmolLM2's ``Digits`` stage. llama.cpp's converter names a byte-level BPE's pre-tokenizer by the
hash of its tokens for a fixed text, so the vocabulary must be one it knows (a home-made one is
refused); and a SentencePiece-style ``tokenizer.json`` is converted with every score -1000, which
llama.cpp merges left to right rather than by rank, so the two engines would cut prompts apart
differently. GPT-2's vocabulary (MIT, 50,257 tokens) is in the pinned llama.cpp source as
``models/ggml-vocab-gpt-2.gguf``; this writer rebuilds GPT-2's ``tokenizer.json`` from it (the
converter then recognises it as ``gpt-2``).

The weights: BF16 (what vllm.cpp's Llama loader reads), drawn by NumPy's PCG64 from the seed in a
fixed order; embeddings N(0, 1), tied to the output head, projections N(0, 1/fan_in), norms 1.
Tied embeddings over unit-RMS hidden states give logits of standard deviation sqrt(hidden): a
peaked next-token distribution, so a greedy token is rarely a near-tie and the two engines'
greedy tokens can be compared one for one.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import ModelError

#: The vocabulary file in the pinned llama.cpp source tree.
VOCAB_FILE = "models/ggml-vocab-gpt-2.gguf"
VOCAB_ENGINE = "llamacpp"
#: A chat template without special tokens (GPT-2 has none): role-prefixed lines.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")
_CONTROL = 3  # gguf TokenType.CONTROL


@dataclass(frozen=True, kw_only=True)
class Shape:
    """The hyper-parameters; the defaults are what the fixture pins (16.0 M parameters, 32 MB)."""

    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    """Byte-level token strings (GPT-2's ``vocab.json`` keys), by id."""
    merges: list[str]
    """``"left right"``, by rank."""
    control: list[int]
    eos: int


def read_vocab(path: Path) -> Vocab:
    """Tokens, merges and control tokens of a vocab-only GGUF (llama.cpp's ``models/ggml-vocab-*``)."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read the vocabulary {path}: {e}") from e

    def strings(key: str) -> list[str]:
        field = reader.get_field(key)
        if field is None:
            raise ModelError(f"{path} has no {key}: expected a byte-level BPE vocabulary (ggml-vocab-gpt-2.gguf)")
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    def scalar(key: str) -> int:
        field = reader.get_field(key)
        if field is None:
            raise ModelError(f"{path} has no {key}")
        return int(field.parts[field.data[0]][0])

    model = reader.get_field("tokenizer.ggml.model")
    kind = bytes(model.parts[model.data[0]]).decode() if model is not None else ""
    if kind != "gpt2":
        raise ModelError(f"{path} holds a {kind or 'no'} tokenizer; this writer rebuilds a byte-level BPE (gpt2) one")
    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    types = reader.get_field("tokenizer.ggml.token_type")
    control = [i for i, t in enumerate(int(types.parts[j][0]) for j in types.data) if t == _CONTROL] if types else []
    return Vocab(tokens=tokens, merges=merges, control=control, eos=scalar("tokenizer.ggml.eos_token_id"))


def tokenizer_json(vocab: Vocab) -> dict[str, Any]:
    """GPT-2's ``tokenizer.json`` (``use_regex`` spelt out: vllm.cpp reads a missing one as false,
    Hugging Face tokenizers as true)."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": vocab.tokens[i], "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True} for i in vocab.control],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {**byte_level, "add_prefix_space": True, "trim_offsets": False},
        "decoder": {**byte_level, "add_prefix_space": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(vocab.tokens)}, "merges": vocab.merges},
    }


def config_json(shape: Shape, vocab: Vocab) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": shape.hidden_size, "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers, "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads, "head_dim": shape.head_dim,
        "vocab_size": len(vocab.tokens), "max_position_embeddings": shape.max_position_embeddings,
        "rms_norm_eps": shape.rms_norm_eps, "rope_theta": shape.rope_theta, "rope_scaling": None,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "bos_token_id": vocab.eos, "eos_token_id": vocab.eos,
        "initializer_range": 0.02, "use_cache": True,
    }


def tokenizer_config_json(vocab: Vocab, shape: Shape) -> dict[str, Any]:
    eos = vocab.tokens[vocab.eos]
    # no BOS anywhere: neither engine prepends one, so both see the same prompt tokens
    return {"tokenizer_class": "GPT2Tokenizer", "add_bos_token": False, "add_eos_token": False,
            "bos_token": eos, "eos_token": eos, "unk_token": eos, "model_max_length": shape.max_position_embeddings,
            "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}


def tensor_shapes(shape: Shape, n_vocab: int) -> dict[str, tuple[int, ...]]:
    """Name -> shape in the order the weights are drawn (lm_head is tied: not stored)."""
    h, i, hd = shape.hidden_size, shape.intermediate_size, shape.head_dim
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (n_vocab, h)}
    for n in range(shape.num_hidden_layers):
        p = f"model.layers.{n}."
        out |= {p + "input_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (shape.num_attention_heads * hd, h),
                p + "self_attn.k_proj.weight": (shape.num_key_value_heads * hd, h),
                p + "self_attn.v_proj.weight": (shape.num_key_value_heads * hd, h),
                p + "self_attn.o_proj.weight": (h, shape.num_attention_heads * hd),
                p + "post_attention_layernorm.weight": (h,),
                p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
                p + "mlp.down_proj.weight": (h, i)}
    out["model.norm.weight"] = (h,)
    return out


def to_bf16(a: np.ndarray[Any, np.dtype[np.float32]]) -> bytes:
    """float32 -> bfloat16 bytes, rounded to nearest even (finite values only)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_safetensors(path: Path, tensors: Mapping[str, tuple[tuple[int, ...], bytes]]) -> None:
    """The safetensors layout: an 8-byte little-endian header length, the JSON header (padded with
    spaces to 8 bytes), the tensors' bytes back to back."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dims, data) in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(dims), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, data in tensors.values():
            f.write(data)


def write_random_hf_llama(dest: Path, seed: int = 0, *, vocab_path: Path, shape: Shape | None = None) -> Path:
    """Write the directory ``dest`` (replaced if it exists) and return it."""
    shape = shape or Shape()
    vocab = read_vocab(vocab_path)
    if shape.hidden_size % shape.num_attention_heads or shape.num_attention_heads % shape.num_key_value_heads:
        raise ModelError(f"shape {shape}: heads must divide hidden_size and kv heads must divide heads")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    tensors: dict[str, tuple[tuple[int, ...], bytes]] = {}
    for name, dims in tensor_shapes(shape, len(vocab.tokens)).items():
        if len(dims) == 1:
            a = np.ones(dims, dtype=np.float32)
        else:
            std = 1.0 if name == "model.embed_tokens.weight" else dims[1] ** -0.5
            a = rng.standard_normal(dims, dtype=np.float32) * np.float32(std)
        tensors[name] = (dims, to_bf16(a))
    write_safetensors(dest / "model.safetensors", tensors)
    for fname, data in (("config.json", config_json(shape, vocab)), ("tokenizer.json", tokenizer_json(vocab)),
                        ("tokenizer_config.json", tokenizer_config_json(vocab, shape))):
        (dest / fname).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return dest


def vocab_path() -> Path:
    """The vocabulary in the pinned llama.cpp's patched source tree (fetched when not cached)."""
    from harness.build.pipeline import patched_tree

    path = patched_tree(VOCAB_ENGINE).path / VOCAB_FILE
    if not path.is_file():
        raise ModelError(f"the pinned {VOCAB_ENGINE} source has no {VOCAB_FILE}; the writer takes GPT-2's "
                         "vocabulary from it")
    return path


def write(dest: Path, seed: int) -> Path:
    """The fixture's writer (``RandomModel.write``)."""
    return write_random_hf_llama(dest, seed, vocab_path=vocab_path())

