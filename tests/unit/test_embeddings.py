"""Embeddings' ``dimensions`` and ``long_text_mode`` (harness.runtime.embeddings), on the fake binding core.

The fake (tests/fakes/binding_core.py) embeds as a mean-pooling model does: one token per character,
[CLS] and [SEP] added, a window of 256 tokens it refuses to go past. What is asserted is what the
runtime and the server make of its rows; the e2e specs assert the same on all-MiniLM-L6-v2.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from harness.core import errors
from harness.runtime import Runtime, embeddings
from tests.fakes import install_binding
from tests.unit.test_config_validate import tiny_gguf

#: the fake's window (n_ctx_train) and its special tokens: a text of 254 characters fits
WINDOW, SPECIAL, N_EMBD = 256, 2, 8
SPAN = WINDOW - SPECIAL
EMBED = """\
name: emb
backend: llamacpp
embeddings: true
parameters:
  model: m.gguf
options:
{options}
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from harness.engine.descriptor import load_engine
    from harness_plugins.llamacpp.engine import _committed_fingerprint

    install_binding(tmp_path / "bindings", "steady", {
        "engine": "llamacpp", "pin": load_engine("llamacpp").pin, "abi_fingerprint": _committed_fingerprint(),
        "platform": "cpu"})
    monkeypatch.setenv("HARNESS_BINDING_PATH", str(tmp_path / "bindings"))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HARNESS_MODELS_DIR", raising=False)
    tiny_gguf(tmp_path / "models" / "m.gguf")
    return tmp_path / "models"


@pytest.fixture
def eng(models: Path) -> Iterator[Any]:
    with Runtime.load(models / "m.gguf", variant="steady", embeddings=True) as e:
        yield e


def _unit(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


# ---------------------------------------------------------------- dimensions

def test_dimensions_of_a_model_not_matryoshka_trained_are_the_full_vectors_prefix(eng: Any) -> None:
    full = eng.embed(["a cat", "a dog"])
    cut = eng.embed(["a cat", "a dog"], dimensions=3)
    assert cut.shape == (2, 3) and cut.dtype == np.float32
    np.testing.assert_allclose(cut, full[:, :3], atol=1e-6)
    assert (np.linalg.norm(cut, axis=1) < 1 - 1e-3).all()  # not rescaled: the prefix holds part of the norm
    np.testing.assert_allclose(eng.embed(["a cat"], dimensions=N_EMBD), full[:1], atol=1e-6)


def test_dimensions_of_a_matryoshka_model_are_renormalized(models: Path) -> None:
    with Runtime.load(models / "m.gguf", variant="steady", embeddings=True, matryoshka=True) as eng:
        full = eng.embed(["a cat", "a dog"])
        cut = eng.embed(["a cat", "a dog"], dimensions=3)
        raw = eng.embed(["a cat", "a dog"], normalize=False, dimensions=3)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(cut, _unit(full[:, :3]), atol=1e-6)
    assert abs(float(np.linalg.norm(raw[0])) - 1.0) > 1e-3  # normalize=False: the raw prefix


@pytest.mark.parametrize("bad", [0, -1, N_EMBD + 1, True, 2.5, "3"])
def test_dimensions_outside_the_models_are_refused(eng: Any, bad: Any) -> None:
    with pytest.raises(errors.InvalidRequestError, match="dimensions"):
        eng.embed(["a cat"], dimensions=bad)


# ---------------------------------------------------------------- long texts

def test_a_text_within_the_window_is_embedded_as_it_is_in_either_mode(eng: Any) -> None:
    text = "x" * SPAN
    one = eng.embed([text])
    np.testing.assert_array_equal(eng.embed([text], long_text_mode="truncate"), one)
    np.testing.assert_array_equal(eng.embed([text], long_text_mode="mean"), one)


def test_truncate_embeds_the_first_window(eng: Any) -> None:
    text = "abcdefghij" * 60  # 600 tokens
    np.testing.assert_allclose(eng.embed([text], long_text_mode="truncate"), eng.embed([text[:SPAN]]), atol=1e-6)


@pytest.mark.parametrize("normalize", [True, False])
def test_mean_is_the_token_weighted_mean_of_the_chunks(eng: Any, normalize: bool) -> None:
    text = "".join(chr(97 + i % 26) for i in range(600))
    chunks = [text[:SPAN], text[SPAN:2 * SPAN], text[2 * SPAN:]]
    rows = eng.embed(chunks, normalize=normalize)
    weights = np.array([len(c) for c in chunks], dtype=np.float64)[:, None]
    want = (weights * rows).sum(axis=0) / weights.sum()
    got = eng.embed([text], normalize=normalize)[0]  # mean is the default (GPT4All's)
    np.testing.assert_allclose(got, _unit(want) if normalize else want, atol=1e-6)
    # the short tail weighs its 92 tokens, not a third
    unweighted = rows.mean(axis=0)
    assert not np.allclose(got, _unit(unweighted) if normalize else unweighted, atol=1e-4)


def test_mean_with_dimensions_pools_each_chunks_prefix(models: Path) -> None:
    text = "".join(chr(97 + i % 26) for i in range(400))
    with Runtime.load(models / "m.gguf", variant="steady", embeddings=True, matryoshka=True) as eng:
        chunks = [text[:SPAN], text[SPAN:]]
        rows = eng.embed(chunks, dimensions=4)  # each chunk's own 4-dimensional embedding
        w = np.array([SPAN, len(text) - SPAN], dtype=np.float64)[:, None]
        np.testing.assert_allclose(eng.embed([text], dimensions=4)[0], _unit((w * rows).sum(axis=0)), atol=1e-6)


def test_mean_refuses_more_than_8192_tokens_truncate_takes_them(eng: Any) -> None:
    text = "y" * (embeddings.MEAN_MAX_TOKENS + 1)
    with pytest.raises(errors.ContextOverflowError, match=r"texts\[1\] is 8193 tokens.*8192"):
        eng.embed(["ok", text])
    assert eng.embed([text], long_text_mode="truncate").shape == (1, N_EMBD)
    assert eng.embed(["y" * embeddings.MEAN_MAX_TOKENS]).shape == (1, N_EMBD)


def test_a_bad_long_text_mode_is_refused(eng: Any) -> None:
    with pytest.raises(errors.InvalidRequestError, match="long_text_mode must be mean or truncate"):
        eng.embed(["a"], long_text_mode="average")


def test_a_piece_that_does_not_round_trip_is_shortened_to_fit() -> None:
    """A detokenizer that writes more than it read (an unknown token as "[UNK]") cannot push a chunk past the window."""
    def tokenize(text: str, special: bool) -> list[int]:
        return [ord(c) for c in text]

    def detokenize(ids: Any) -> str:
        return "".join("[U]" if i == ord("?") else chr(i) for i in ids)

    ch = embeddings.split("?" * 30 + "abc" * 20, index=0, mode="mean", window=12, n_special=2,
                          tokenize=tokenize, detokenize=detokenize)
    assert all(len(t) <= 10 for t in ch.texts) and ch.tokens == [len(t) for t in ch.texts]
    assert "".join(ch.texts) == "[U]" * 30 + "abc" * 20


# ---------------------------------------------------------------- model config

def test_the_config_sets_the_long_text_mode_and_a_request_goes_over_it(models: Path) -> None:
    cfg = models.parent / "emb.yaml"
    cfg.write_text(EMBED.format(options="  - long_text_mode:truncate\n  - matryoshka:true"))
    text = "abcdefghij" * 60
    with Runtime.load(config=cfg, models_dir=models, variant="steady") as eng:
        assert (eng.long_text_mode, eng.matryoshka) == ("truncate", True)
        assert "long_text_mode" not in eng.core.params and "long_text_mode" not in eng.not_applied
        np.testing.assert_allclose(eng.embed([text]), eng.embed([text[:SPAN]]), atol=1e-6)
        assert not np.allclose(eng.embed([text], long_text_mode="mean"), eng.embed([text[:SPAN]]), atol=1e-4)
    with Runtime.load(config=cfg, models_dir=models, variant="steady", long_text_mode="mean") as eng:
        assert eng.long_text_mode == "mean"


def test_the_validator_knows_the_keys(models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import harness.cli

    good, bad = models.parent / "good.yaml", models.parent / "bad.yaml"
    good.write_text(EMBED.format(options="  - long_text_mode:truncate\n  - matryoshka:true"))
    bad.write_text(EMBED.format(options="  - long_text_mode:average"))
    capsys.readouterr()
    assert harness.cli.main(["validate", str(good), "--models-dir", str(models)]) == 0
    assert capsys.readouterr().out == ""
    harness.cli.main(["validate", str(bad), "--models-dir", str(models)])
    assert "option long_text_mode must be one of mean, truncate, found 'average'" in capsys.readouterr().out


def test_a_bad_engine_argument_is_refused(models: Path) -> None:
    with pytest.raises(errors.InvalidRequestError, match="long_text_mode"):
        Runtime.load(models / "m.gguf", variant="steady", embeddings=True, long_text_mode="chunks")
    with pytest.raises(errors.InvalidRequestError, match="matryoshka"):
        Runtime.load(models / "m.gguf", variant="steady", embeddings=True, matryoshka="yes")


# ---------------------------------------------------------------- /v1/embeddings

@pytest.fixture
def client(models: Path) -> Iterator[TestClient]:
    from harness.serve.app import create_app
    from harness.serve.server import load_models

    cfg = models.parent / "emb.yaml"
    cfg.write_text(EMBED.format(options="  - threads:1"))
    served = load_models([cfg], models_dir=models, variant=None, max_queue=1, isolate=False)
    try:
        with TestClient(create_app(served)) as c:
            yield c
    finally:
        for m in served.values():
            m.engine.engine.close()


def _vectors(r: Any) -> np.ndarray[Any, Any]:
    assert r.status_code == 200, r.text
    return np.asarray([d["embedding"] for d in r.json()["data"]], dtype=np.float32)


def test_the_server_takes_dimensions_and_long_text_mode(client: TestClient) -> None:
    text = "abcdefghij" * 60
    full = _vectors(client.post("/v1/embeddings", json={"model": "emb", "input": ["a cat", text]}))
    cut = _vectors(client.post("/v1/embeddings", json={"model": "emb", "input": ["a cat", text], "dimensions": 5}))
    assert full.shape == (2, N_EMBD) and cut.shape == (2, 5)
    np.testing.assert_allclose(cut, full[:, :5], atol=1e-6)
    head = _vectors(client.post("/v1/embeddings", json={"model": "emb", "input": text[:SPAN]}))
    trunc = _vectors(client.post("/v1/embeddings", json={"model": "emb", "input": text, "long_text_mode": "truncate"}))
    np.testing.assert_allclose(trunc, head, atol=1e-6)
    assert not np.allclose(full[1], head[0], atol=1e-4)  # the config's default: mean


@pytest.mark.parametrize(("extra", "param", "code"), [
    ({"dimensions": N_EMBD + 1}, "dimensions", None),
    ({"dimensions": 0}, "dimensions", None),
    ({"long_text_mode": "chunks"}, "long_text_mode", None),
    ({"input": ["ok", "z" * 9000]}, "input[1]", "context_length_exceeded"),
])
def test_the_server_refuses_what_the_model_cannot_give(client: TestClient, extra: dict[str, Any], param: str,
                                                       code: str | None) -> None:
    r = client.post("/v1/embeddings", json={"model": "emb", "input": "a cat", **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["param"], err["code"], err["type"]) == (param, code, "invalid_request_error"), err
