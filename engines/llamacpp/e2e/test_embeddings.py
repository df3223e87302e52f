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
