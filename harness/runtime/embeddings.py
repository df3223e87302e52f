"""Embeddings beyond one pass of the model: OpenAI's ``dimensions`` and GPT4All's long-text modes.

An engine embeds a text that fits its window in one pass; what sits on top of that pass is the
same for every engine and lives here:

- ``long_text_mode`` (seed 003, GPT4All's ``llmodel_embed``): a text longer than the window is cut
  at the window (``truncate``) or split into window-sized chunks whose embeddings are averaged
  (``mean``, the default, as GPT4All's). The average is weighted by each chunk's tokens, so the short
  tail of a long text counts for what it holds, not as much as a full window; with ``normalize``
  each chunk's embedding is normalized before the average and the average after it, as GPT4All
  does. As GPT4All, ``mean`` refuses a text of more than :data:`MEAN_MAX_TOKENS` tokens. The chunks
  do not overlap (GPT4All's Atlas mode overlaps them by 8 tokens), so their weights sum to the text's.
- ``dimensions`` (OpenAI's embeddings parameter, GPT4All's ``dimensionality``): the first
  ``dimensions`` components. A Matryoshka-trained model (``matryoshka: true`` in its config; nomic-embed-text-v1.5,
  OpenAI's text-embedding-3) is trained for each prefix to be an embedding of its own: the prefix of
  every chunk is renormalized (with ``normalize``), as sentence-transformers' ``truncate_dim`` and
  OpenAI do. Any other model (all-MiniLM-L6-v2) was not: its prefix is returned as it is in the full
  vector, neither rescaled nor presented as a unit embedding the model never made, so
  ``embed(t, dimensions=d) == embed(t)[:, :d]`` and the norm says how much of the vector the prefix
  kept. GPT4All refuses ``dimensionality`` for such a model; OpenAI's API truncates, and so do we.

numpy is imported by the functions that use it: the config package imports this module for
:data:`LongTextMode`, and ``harness validate`` stays free of numpy.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from harness.core.errors import ContextOverflowError, InvalidRequestError

if TYPE_CHECKING:
    import numpy as np

LongTextMode = Literal["mean", "truncate"]
#: The long-text modes, the default first (GPT4All's Embed4All default).
LONG_TEXT_MODES: tuple[str, ...] = typing.get_args(LongTextMode)
#: The most tokens a text may have in ``mean`` mode (GPT4All's ``atlasMaxLength``, past which its mean
#: mode refuses a text; OpenAI's input limit).
MEAN_MAX_TOKENS = 8192


def long_text_mode(value: Any, field: str = "long_text_mode") -> str:
    """A long-text mode, checked."""
    if value not in LONG_TEXT_MODES:
        msg = f"{field} must be {' or '.join(LONG_TEXT_MODES)}, got {value!r:.40}"
        raise InvalidRequestError(msg)
    return str(value)


def dimensions(value: Any, n_embd: int) -> int:
    """The number of components asked for (``None``: all ``n_embd``), checked against the model's."""
    if value is None:
        return n_embd
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"dimensions must be an integer, got {value!r:.40}"
        raise InvalidRequestError(msg)
    if not 1 <= value <= n_embd:
        msg = f"dimensions {value} is outside 1..{n_embd}: this model's embeddings have {n_embd} dimensions"
        raise InvalidRequestError(msg)
    return value


def _prefixes(rows: np.ndarray[Any, Any], *, normalize: bool, dims: int, matryoshka: bool) -> np.ndarray[Any, Any]:
    """Each row as the model's embedding: a Matryoshka model's at ``dims``, another's in full; normalized or raw."""
    import numpy as np

    v = np.asarray(rows, dtype=np.float64)
    if matryoshka:
        v = v[:, :dims]
    if normalize:
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    return v


@dataclass(frozen=True)
class Chunks:
    """What one text becomes: the texts the engine embeds (one pass each) and each one's weight."""

    texts: list[str]
    tokens: list[int]
    """per chunk, the tokens of the text it holds (the engine's special tokens not counted)"""


def split(text: str, *, index: int, mode: str, window: int, n_special: int,
          tokenize: Callable[[str, bool], Sequence[int]], detokenize: Callable[[Sequence[int]], str]) -> Chunks:
    """The chunks of one text for a model whose window is ``window`` tokens, special tokens included.

    A text that fits is embedded as it is. A longer one is cut into pieces of ``window - n_special``
    tokens, each turned back into text by ``detokenize`` for the engine to embed; a piece whose text
    tokenizes longer than it was (a detokenizer that does not round-trip) is shortened until it fits.

    :param tokenize: ``(text, add_special) -> token ids``, as the engine tokenizes what it embeds.
    :param n_special: the special tokens the engine adds to every text it embeds (BERT's [CLS] and [SEP]: 2).
    """
    ids = list(tokenize(text, False))
    if len(ids) + n_special <= window:
        return Chunks([text], [len(ids)])
    if mode == "mean" and len(ids) > MEAN_MAX_TOKENS:
        msg = (f"texts[{index}] is {len(ids)} tokens, more than the {MEAN_MAX_TOKENS} long_text_mode mean takes: "
               "split it, or embed its first window with long_text_mode truncate")
        raise ContextOverflowError(msg)
    span = window - n_special
    if span < 1:
        msg = f"the model's window of {window} tokens leaves no room for text after its {n_special} special tokens"
        raise ContextOverflowError(msg)
    texts: list[str] = []
    tokens: list[int] = []
    start = 0
    while start < len(ids):
        end = min(start + span, len(ids))
        while True:
            piece = detokenize(ids[start:end])
            n = len(tokenize(piece, False))
            if n <= span or end - start <= 1:
                break
            end = start + max(1, min(end - start - 1, (end - start) * span // n))
        if n:  # a piece that detokenizes to nothing (control tokens only) holds no text to embed
            texts.append(piece)
            tokens.append(n)
        if mode == "truncate":
            break
        start = end
    if not texts:
        msg = f"texts[{index}] has no text to embed"
        raise InvalidRequestError(msg)
    return Chunks(texts, tokens)


def pool(rows: np.ndarray[Any, Any], tokens: Sequence[int], *, normalize: bool, dims: int,
         matryoshka: bool) -> np.ndarray[Any, np.dtype[np.float32]]:
    """One text's embedding from its chunks' raw (not normalized) embeddings, ``chunks x n_embd``.

    :param tokens: each chunk's weight (its text tokens).
    :param dims: the components to return (:func:`dimensions`).
    :param matryoshka: whether each prefix is an embedding of its own (see the module's doc).
    """
    import numpy as np

    v = _prefixes(rows, normalize=normalize, dims=dims, matryoshka=matryoshka)
    w = np.asarray(tokens, dtype=np.float64)
    # a chunk of no text tokens (an empty text) still counts: the engine embedded its special tokens
    w = np.maximum(w, 1.0)
    out = (w[:, None] * v).sum(axis=0) / w.sum()
    if normalize:
        out = out / max(float(np.linalg.norm(out)), 1e-12)
    return np.asarray(out[:dims], dtype=np.float32)


def combine(rows: np.ndarray[Any, Any], chunks: Sequence[Chunks], *, normalize: bool, dims: int,
            matryoshka: bool) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Each text's embedding (``texts x dims``) from the raw embeddings of all their chunks, in order."""
    import numpy as np

    if chunks and all(len(ch.texts) == 1 for ch in chunks):  # every text in one pass: all at once
        return np.asarray(_prefixes(rows, normalize=normalize, dims=dims, matryoshka=matryoshka)[:, :dims],
                          dtype=np.float32)
    out = np.empty((len(chunks), dims), dtype=np.float32)
    at = 0
    for i, ch in enumerate(chunks):
        out[i] = pool(rows[at:at + len(ch.texts)], ch.tokens, normalize=normalize, dims=dims, matryoshka=matryoshka)
        at += len(ch.texts)
    return out
