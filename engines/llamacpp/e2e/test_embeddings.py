"""Embeddings on all-MiniLM-L6-v2: the converted GGUF against a sentence-transformers reference."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.qualify.specs import model_path, require_variant
from harness.runtime import Runtime

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


@pytest.fixture(scope="session")
def minilm(variant: str) -> Iterator[Runtime]:
    require_variant(variant)
    with Runtime.load(model_path("HARNESS_EMBED_MODEL"), variant=variant, embeddings=True, threads=2) as eng:
        yield eng


def test_matches_sentence_transformers_reference(minilm: Runtime) -> None:
    ref = json.loads(REFERENCE.read_text())
    got = minilm.embed(ref["sentences"])
    want = np.asarray(ref["embeddings"], dtype=np.float32)
    assert got.shape == want.shape == (len(ref["sentences"]), 384)
    cos = (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    for sentence, c in zip(ref["sentences"], cos, strict=True):
        assert c >= 0.99, f"{sentence!r}: cosine {c:.4f} < 0.99"


def test_kitten_is_closer_to_cat_than_car(minilm: Runtime) -> None:
    cat, kitten, car = minilm.embed(["cat", "kitten", "car"])
    assert float(kitten @ cat) > float(kitten @ car)


def test_normalized_by_default(minilm: Runtime) -> None:
    v = minilm.embed(["hello world"])[0]
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-3
    raw = minilm.embed(["hello world"], normalize=False)[0]
    assert abs(float(np.linalg.norm(raw)) - 1.0) > 1e-3


def test_info_says_embedding_model(minilm: Runtime) -> None:
    info = minilm.info()
    assert info["arch"] == "bert" and info["embedding_only"]


def test_generation_is_refused_on_an_embedding_model(minilm: Runtime) -> None:
    from harness.core.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="embedding model"):
        minilm.complete("hello")


def test_safetensors_dir_loads_through_the_converter(variant: str) -> None:
    require_variant(variant)
    directory = model_path("HARNESS_EMBED_DIR")
    with Runtime.load(directory, variant=variant, embeddings=True, threads=2) as eng:
        assert eng.model_path.suffix == ".gguf" and eng.model_path != directory
        v = eng.embed(["cat"])
    assert v.shape == (1, 384)


# ---------------------------------------------------------------- dimensions and long texts
# MiniLM's window: n_ctx_train 512 tokens, [CLS] and [SEP] included, so 510 of text.
SPAN = 510
#: one-token words (BERT's uncased vocabulary), two topics so the chunks' embeddings differ
HOUSE = ["the", "cat", "sat", "on", "a", "mat", "in", "the", "house", "and", "the", "dog", "ran", "to", "the", "red", "door"]
SPACE = ["stars", "planets", "moon", "sun", "orbit", "light", "space", "rocket", "earth", "mars"]


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def test_truncate_within_the_window_matches_the_reference(minilm: Runtime) -> None:
    ref = json.loads(REFERENCE.read_text())
    want = np.asarray(ref["embeddings"], dtype=np.float32)
    for mode in ("truncate", "mean"):
        cos = _cos(minilm.embed(ref["sentences"], long_text_mode=mode), want)
        assert float(cos.min()) >= 0.99, (mode, cos)


def test_dimensions_128_is_the_prefix_of_the_full_vector(minilm: Runtime) -> None:
    ref = json.loads(REFERENCE.read_text())
    full = minilm.embed(ref["sentences"])
    cut = minilm.embed(ref["sentences"], dimensions=128)
    assert cut.shape == (len(ref["sentences"]), 128)
    # MiniLM is not Matryoshka-trained: the prefix as it is in the full vector, not renormalized
    np.testing.assert_allclose(cut, full[:, :128], atol=1e-5)
    assert float(np.linalg.norm(cut, axis=1).max()) < 0.99


def test_dimensions_of_a_matryoshka_config_are_renormalized(variant: str) -> None:
    require_variant(variant)
    with Runtime.load(model_path("HARNESS_EMBED_MODEL"), variant=variant, embeddings=True, threads=2,
                      matryoshka=True) as eng:
        full = eng.embed(["cat", "a kitten plays with yarn"])
        cut = eng.embed(["cat", "a kitten plays with yarn"], dimensions=128)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(cut, _unit(full[:, :128]), atol=1e-5)


@pytest.mark.parametrize("dims", [385, 0])
def test_dimensions_beyond_the_models_are_refused(minilm: Runtime, dims: int) -> None:
    from harness.core.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match=r"dimensions .* 384"):
        minilm.embed(["cat"], dimensions=dims)


def _long_text(minilm: Runtime) -> tuple[str, list[str]]:
    """A text of 600 one-token words, and its two chunks: 510 words about a house, 90 about space."""
    head = [HOUSE[i % len(HOUSE)] for i in range(SPAN)]
    tail = [SPACE[i % len(SPACE)] for i in range(600 - SPAN)]
    text = " ".join(head + tail)
    assert len(minilm.tokenize(text, add_special=False)) == 600
    return text, [" ".join(head), " ".join(tail)]


def test_mean_is_the_token_weighted_mean_of_the_chunks(minilm: Runtime) -> None:
    text, chunks = _long_text(minilm)
    rows = minilm.embed(chunks)
    got = minilm.embed([text])[0]  # mean: the default
    want = _unit(SPAN * rows[0] + (600 - SPAN) * rows[1])
    assert float(_cos(got, want)) > 0.9999
    np.testing.assert_allclose(got, want, atol=1e-4)
    # weighted by tokens: closer to the 510-token house chunk than an even mean would be
    assert float(_cos(got, rows[0])) > float(_cos(_unit(rows.mean(axis=0)), rows[0])) + 0.01
    raw_rows = minilm.embed(chunks, normalize=False)
    raw = minilm.embed([text], normalize=False)[0]
    np.testing.assert_allclose(raw, (SPAN * raw_rows[0] + (600 - SPAN) * raw_rows[1]) / 600, atol=1e-4)


def test_truncate_embeds_the_first_window(minilm: Runtime) -> None:
    text, chunks = _long_text(minilm)
    got = minilm.embed([text], long_text_mode="truncate")[0]
    assert float(_cos(got, minilm.embed([chunks[0]])[0])) > 0.9999


def test_mean_refuses_more_than_8192_tokens(minilm: Runtime) -> None:
    from harness.core.errors import ContextOverflowError

    text = " ".join(["cat"] * 8193)
    with pytest.raises(ContextOverflowError, match="8193 tokens, more than the 8192"):
        minilm.embed([text])
    assert minilm.embed([text], long_text_mode="truncate").shape == (1, 384)
