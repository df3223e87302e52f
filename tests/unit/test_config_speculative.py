"""Speculative decoding settings of a model config: what `config show` prints (with sources),
located errors for bad values, and what reaches the llama.cpp binding's Runtime.load."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.localai import anchor
from harness.core import errors
from harness.runtime import Runtime
from harness_plugins.llamacpp.engine import core_params
from tests.unit.test_config_effective import BASE, show
from tests.unit.test_config_validate import run
from tests.unit.test_runtime_config import models  # noqa: F401 - fixture


def val(text: str, key: str, models_dir: Path | None = None) -> tuple[object, str]:
    s = show(text, models_dir).params[key]
    return s.value, s.source


def test_defaults_speculate_not() -> None:
    assert val(BASE, "spec_type") == (None, "default")
    assert val(BASE, "spec_n_max") == (None, "default")
    assert val(BASE, "spec_ngram_size_n") == (3, "default")
    assert val(BASE, "spec_min_acceptance") == (0.1, "default")


def test_draft_model_and_n_draft_feed_the_settings(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "d.gguf").write_bytes(b"")
    text = BASE + "draft_model: d.gguf\nn_draft: 6\n"
    assert val(text, "draft_model", tmp_path) == (str(tmp_path / "d.gguf"), "draft_model")
    assert val(text, "spec_type", tmp_path) == ("draft-simple", "default (draft_model is set)")
    assert val(text, "spec_n_max", tmp_path) == (6, "n_draft")
    # options win over the config's own keys, engine_args over options; LocalAI's spellings are aliases
    text += "options:\n  - draft_max:4\n  - spec_type:ngram-simple\n  - ngram_size_n:2\nengine_args:\n  spec_n_max: 5\n"
    assert val(text, "spec_n_max", tmp_path) == (5, "engine_args")
    assert val(text, "spec_type", tmp_path) == ("ngram-simple", "options")
    assert val(text, "spec_ngram_size_n", tmp_path) == (2, "options")


def test_bad_values_are_located() -> None:
    # a kind this engine does not run is LocalAI's to pass through (not a refusal): a located note
    assert run(BASE + "options:\n  - spec_type:ngram\n") == [
        "m.yaml:6:5: note: option spec_type 'ngram': LocalAI passes it through to the backend's engine "
        f"({anchor('spec_type_passthrough')}); this harness's engine runs none, ngram-simple, draft-simple",
        "m.yaml:6:5: note: LocalAI keys this harness does not use: options spec_type"]
    assert run(BASE + "options:\n  - spec_n_max:65\n") == ["m.yaml:6:5: warning: option spec_n_max must be <= 64, found 65"]
    assert run(BASE + "engine_args:\n  spec_min_acceptance: 1.5\n") == [
        "m.yaml:6:24: warning: engine_args.spec_min_acceptance: must be <= 1, found 1.5"]
    # n_draft is LocalAI's key, passed on: this harness's bound is a note
    assert run(BASE + "n_draft: 100\n") == ["m.yaml:5:10: note: n_draft: must be <= 64, found 100 (this harness's bound: "
                                               "LocalAI passes the value on)"]
    assert run(BASE + "options:\n  - spec_type:draft-simple\n") == [
        "m.yaml:6:5: warning: spec_type draft-simple needs a draft model: set draft_model (or spec_type "
        "ngram-simple to draft from the sequence itself)"]


def test_core_params_translation(tmp_path: Path) -> None:
    draft = tmp_path / "d.gguf"
    from tests.unit.test_config_validate import tiny_gguf

    tiny_gguf(draft)
    assert core_params({"spec_type": "ngram-simple", "spec_n_max": 4, "spec_ngram_size_n": 2,
                        "spec_min_acceptance": 0.25}) == {
        "spec_type": "ngram-simple", "n_draft": 4, "ngram_n": 2, "spec_min_acceptance": 0.25}
    assert core_params({"draft_model": str(draft)}) == {"draft_model": str(draft), "spec_type": "draft-simple"}
    assert core_params({"n_draft": 3, "ngram_n": 5}) == {"n_draft": 3, "ngram_n": 5}
    with pytest.raises(errors.InvalidRequestError, match="spec_type must be one of none, ngram-simple, draft-simple"):
        core_params({"spec_type": "ngram"})
    with pytest.raises(errors.InvalidRequestError, match=r"n_draft must be an integer in \[1, 64\]"):
        core_params({"n_draft": 0})
    with pytest.raises(errors.InvalidRequestError, match=r"spec_min_acceptance must be a number in \[0, 1\]"):
        core_params({"spec_min_acceptance": 2})
    with pytest.raises(errors.InvalidRequestError, match="draft-simple needs draft_model"):
        core_params({"spec_type": "draft-simple"})
    with pytest.raises(errors.ModelError, match=r"draft model \(draft_model\): model not found"):
        core_params({"draft_model": str(tmp_path / "missing.gguf")})


def test_engine_load_config_passes_the_settings(models: Path) -> None:  # noqa: F811
    cfg = models / "spec.yaml"
    (models / "draft.gguf").write_bytes((models / "SmolLM2-135M-Instruct.Q4_1.gguf").read_bytes())
    cfg.write_text("name: spec\nparameters:\n  model: SmolLM2-135M-Instruct.Q4_1.gguf\ndraft_model: draft.gguf\n"
                   "n_draft: 5\noptions:\n  - spec_min_acceptance:0.2\n")
    with Runtime.load(config=cfg, models_dir=models, variant="steady") as eng:
        got = eng.core.params
        assert (got["spec_type"], got["draft_model"], got["n_draft"], got["ngram_n"], got["spec_min_acceptance"]) == (
            "draft-simple", str(models / "draft.gguf"), 5, 3, 0.2)
        assert "draft_model" not in eng.not_applied
