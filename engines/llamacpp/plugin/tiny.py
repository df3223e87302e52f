"""A tiny random-weight llama GGUF, byte-identical for a given seed.

It loads in llama.cpp and tokenizes any text (a GPT-2 byte-level BPE vocabulary:
256 byte tokens + merges learned from a fixed corpus), so tests that need *a*
model (loading, tokenizing, chat templating, stop strings, cancellation) run in
milliseconds without a download. Its output is noise by design.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, TokenType
from gguf.quants import quantize

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2

# The merges are learned from this text, so common English pieces become tokens.
_CORPUS = """\
The capital of France is Paris. The capital of Germany is Berlin. The capital of
Italy is Rome. The capital of Spain is Madrid. Paris is the largest city in France.
The quick brown fox jumps over the lazy dog. A cat is an animal; a car is a machine.
The kitten sat on the mat, and the cat sat with the kitten. Hello, world! Hello there.
You are a helpful assistant. The user asks a question and the assistant answers it.
What is the capital of France? The answer is Paris. What is two plus two? It is four.
Once upon a time there was a little model that could count: one, two, three, four,
five, six, seven, eight, nine, ten. The end of the story is the start of another one.
In the beginning there were tokens, and the tokens were merged into words, and the
words were joined into sentences, and the sentences into answers for the user.
"""

# GPT-2's pre-tokenizer, restricted to what the corpus holds (ASCII).
_WORD = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


@dataclass(frozen=True, kw_only=True)
class TinyConfig:
    """Hyper-parameters of the tiny llama; defaults are what the fixtures pin."""

    context_length: int = 512
    embedding_length: int = 64
    block_count: int = 2
    feed_forward_length: int = 128
    head_count: int = 4
    head_count_kv: int = 2
    rms_eps: float = 1e-5
    rope_freq_base: float = 10000.0
    n_merges: int = 100
    """Merges learned from the corpus (at most ~100: then no pair repeats): 359 tokens in all."""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what llama.cpp's BPE expects)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def train_bpe(text: str, n_merges: int) -> tuple[list[str], list[str]]:
    """Learn up to ``n_merges`` byte-level BPE merges; returns ``(new_tokens, merges)``.

    Ties are broken by the lexicographically smallest pair, so the result never
    depends on hash seeds or dict order.
    """
    enc = bytes_to_unicode()
    words: Counter[tuple[str, ...]] = Counter(
        tuple(enc[b] for b in w.encode("utf-8")) for w in _WORD.findall(text))
    known = set(enc.values())
    tokens: list[str] = []
    merges: list[str] = []
    while len(merges) < n_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for word, freq in words.items():
            for a, b in itertools.pairwise(word):
                pairs[(a, b)] += freq
        if not pairs:
            break
        best_count = max(pairs.values())
        if best_count < 2:
            break
        a, b = min(p for p, c in pairs.items() if c == best_count)
        merges.append(f"{a} {b}")
        if a + b not in known:
            known.add(a + b)
            tokens.append(a + b)
        merged: Counter[tuple[str, ...]] = Counter()
        for word, freq in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += freq
        words = merged
    return tokens, merges


@functools.cache
def vocabulary(n_merges: int) -> tuple[list[str], list[int], list[str]]:
    """``(tokens, token_types, merges)``: specials, the 256 byte tokens, then learned tokens."""
    enc = bytes_to_unicode()
    learned, merges = train_bpe(_CORPUS, n_merges)
    tokens = [*SPECIAL_TOKENS, *(enc[b] for b in range(256)), *learned]
    types = [int(TokenType.CONTROL)] * len(SPECIAL_TOKENS) + [int(TokenType.NORMAL)] * (len(tokens) - len(SPECIAL_TOKENS))
    return tokens, types, merges


def tensor_shapes(cfg: TinyConfig, n_vocab: int) -> dict[str, tuple[int, ...]]:
    """numpy shapes (row-major: GGUF ``ne`` reversed) of every tensor llama.cpp's llama arch loads."""
    d, ff = cfg.embedding_length, cfg.feed_forward_length
    head = d // cfg.head_count
    q, kv = head * cfg.head_count, head * cfg.head_count_kv
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (n_vocab, d)}
    for i in range(cfg.block_count):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (d,),
            f"blk.{i}.attn_q.weight": (q, d),
            f"blk.{i}.attn_k.weight": (kv, d),
            f"blk.{i}.attn_v.weight": (kv, d),
            f"blk.{i}.attn_output.weight": (d, q),
            f"blk.{i}.ffn_norm.weight": (d,),
            f"blk.{i}.ffn_gate.weight": (ff, d),
            f"blk.{i}.ffn_up.weight": (ff, d),
            f"blk.{i}.ffn_down.weight": (d, ff),
        }
    shapes |= {"output_norm.weight": (d,), "output.weight": (n_vocab, d)}
    return shapes


def write_tiny_llama(path: Path, *, seed: int = 0, config: TinyConfig | None = None,
                     quant: str | None = None) -> Path:
    """Write the tiny llama GGUF to ``path`` (atomically); same seed, same bytes.

    ``quant`` (``"Q4_1"``, ``"Q4_0"``, ``"Q8_0"``) quantizes the attention and feed-forward
    matrices, so the engine runs its quantized matmul kernels (the CPU levels' SIMD and AMX
    paths) as SmolLM2's Q4_1 weights do; embeddings and norms stay F32.
    """
    cfg = config or TinyConfig()
    qtype = None
    if quant is not None:
        qtype = getattr(GGMLQuantizationType, quant, None)
        if qtype not in (GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0):
            msg = f"tiny model quant must be Q4_0, Q4_1 or Q8_0, got {quant!r}"
            raise ValueError(msg)
    check_config(cfg)
    tokens = vocabulary(cfg.n_merges)[0]
    rng = np.random.default_rng(seed)

    with atomic_path(path) as tmp:
        w = GGUFWriter(tmp, "llama")
        add_metadata(w, cfg, name=f"tiny-llama-s{seed}" + (f"-{quant}" if quant else ""),
                     file_type=int(getattr(LlamaFileType, f"MOSTLY_{quant}") if quant else LlamaFileType.ALL_F32))
        for name, shape in tensor_shapes(cfg, len(tokens)).items():
            if len(shape) == 1:  # norm weights: identity scale keeps activations sane
                data = np.ones(shape, dtype=np.float32)
            else:
                data = (rng.standard_normal(shape) * 0.02).astype(np.float32)
            if qtype is not None and name.startswith("blk.") and len(shape) == 2:
                w.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)
                continue
            w.add_tensor(name, data)

        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return path


def check_config(cfg: TinyConfig) -> None:
    if cfg.embedding_length % cfg.head_count or cfg.head_count % cfg.head_count_kv:
        msg = "embedding_length must divide by head_count, and head_count by head_count_kv"
        raise ValueError(msg)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; it replaces ``path`` when the block ends without error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".gguf", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        tmp.chmod(0o644)  # mkstemp makes it private
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def add_metadata(w: GGUFWriter, cfg: TinyConfig, *, name: str, file_type: int) -> None:
    """Hyper-parameters, the BPE tokenizer (specials, bytes, learned merges) and the ChatML template."""
    tokens, types, merges = vocabulary(cfg.n_merges)
    w.add_name(name)
    w.add_file_type(file_type)
    w.add_vocab_size(len(tokens))
    w.add_context_length(cfg.context_length)
    w.add_embedding_length(cfg.embedding_length)
    w.add_block_count(cfg.block_count)
    w.add_feed_forward_length(cfg.feed_forward_length)
    w.add_head_count(cfg.head_count)
    w.add_head_count_kv(cfg.head_count_kv)
    w.add_rope_dimension_count(cfg.embedding_length // cfg.head_count)
    w.add_rope_freq_base(cfg.rope_freq_base)
    w.add_layer_norm_rms_eps(cfg.rms_eps)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_pad_token_id(PAD_ID)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)
