"""Context shift settings of a model config: LocalAI's ``context_shift`` option (off, as LocalAI's
llama-cpp backend and llama.cpp default it) and the share erased, ``context_erase`` (0.5, llama.cpp's
n_discard and GPT4All's contextErase): what `config show` prints, what the validator says, and what
reaches the llama.cpp binding. The engine's behaviour is engines/llamacpp/e2e/test_context_shift.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core import errors
from harness.runtime import Runtime
from harness_plugins.llamacpp.engine import core_params
from tests.unit.test_config_effective import BASE, show
from tests.unit.test_config_validate import run
from tests.unit.test_runtime_config import models  # noqa: F401 - fixture


def val(text: str, key: str) -> tuple[object, str]:
    s = show(text).params[key]
    return s.value, s.source


def test_off_by_default_with_half_erased() -> None:
    assert val(BASE, "context_shift") == (False, "default")
    assert val(BASE, "context_erase") == (0.5, "default")


def test_options_and_engine_args_set_it() -> None:
    assert val(BASE + "options:\n  - context_shift:true\n", "context_shift") == (True, "options")
    assert val(BASE + "options:\n  - context_shift:on\n  - context_erase:0.25\n", "context_erase") == (0.25, "options")
    assert val(BASE + "options:\n  - context_shift:true\nengine_args:\n  context_shift: false\n",
               "context_shift") == (False, "engine_args")


def test_the_validator_knows_the_keys() -> None:
    # LocalAI's option of its llama-cpp backend, now a key this harness uses: nothing to say
    assert run(BASE + "options:\n  - context_shift:true\n  - context_erase:0.3\n") == []
    assert run(BASE + "options:\n  - context_shift:maybe\n") == [
        "m.yaml:6:5: warning: option context_shift expects true or false, found 'maybe'"]
    assert run(BASE + "options:\n  - context_erase:1\n") == [
        "m.yaml:6:5: warning: option context_erase must be < 1, found 1.0"]
    assert run(BASE + "options:\n  - context_erase:0\n") == [
        "m.yaml:6:5: warning: option context_erase must be > 0, found 0.0"]
    assert any("did you mean 'context_shift'" in d for d in run(BASE + "options:\n  - context_shfit:true\n"))


def test_core_params_translation() -> None:
    assert core_params({"context_shift": True, "context_erase": 0.25}) == {"context_shift": True, "context_erase": 0.25}
    assert core_params({"context_shift": "off"}) == {"context_shift": False}
    with pytest.raises(errors.InvalidRequestError, match=r"context_erase must be a number in \(0, 1\)"):
        core_params({"context_erase": 1.0})
    with pytest.raises(errors.InvalidRequestError, match="context_shift"):
        core_params({"context_shift": "sometimes"})


def test_engine_load_config_passes_the_settings(models: Path) -> None:  # noqa: F811
    cfg = models / "shift.yaml"
    cfg.write_text("name: shift\nparameters:\n  model: SmolLM2-135M-Instruct.Q4_1.gguf\n"
                   "options:\n  - context_shift:true\n  - context_erase:0.4\n")
    with Runtime.load(config=cfg, models_dir=models, variant="steady") as eng:
        assert (eng.core.params["context_shift"], eng.core.params["context_erase"]) == (True, 0.4)
        assert "context_shift" not in eng.not_applied
    off = models / "off.yaml"
    off.write_text("name: off\nparameters:\n  model: SmolLM2-135M-Instruct.Q4_1.gguf\n")
    with Runtime.load(config=off, models_dir=models, variant="steady") as eng:
        assert eng.core.params["context_shift"] is False  # the default reaches the engine as off


def test_serve_takes_a_max_tokens_past_the_context_when_it_shifts(models: Path, tmp_path: Path) -> None:  # noqa: F811
    from starlette.testclient import TestClient

    from harness.serve.app import create_app
    from harness.serve.server import load_models

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000}  # the fake: n_ctx 256
    for shift, status in ((False, 400), (True, 200)):
        cfg = tmp_path / f"m-{shift}.yaml"
        cfg.write_text("name: m\nbackend: llamacpp\nparameters:\n  model: SmolLM2-135M-Instruct.Q4_1.gguf\n"
                       f"options:\n  - context_shift:{str(shift).lower()}\n")
        served = load_models([cfg], models_dir=models, variant="steady", max_queue=1, isolate=False)
        try:
            assert served["m"].context_shift is shift
            with TestClient(create_app(served)) as c:
                r = c.post("/v1/chat/completions", json=body)
                assert r.status_code == status, r.text
        finally:
            for m in served.values():
                m.engine.engine.close()
