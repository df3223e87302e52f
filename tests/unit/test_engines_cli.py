from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.errors import ConfigError, UnknownNameError
from harness.engine.descriptor import load_engine, parse_engine


def test_llamacpp_descriptor_is_valid() -> None:
    e = load_engine("llamacpp")
    assert e.source.kind == "pypi-sdist" and len(e.source.sha256) == 64
    assert e.cmake["base"]["LLAMA_BUILD_NUMBER"] == str(e.upstream["build"])
    assert e.cmake["base"]["LLAMA_USE_PREBUILT_UI"] == "OFF"


def test_unknown_engine_did_you_mean() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'llamacpp'"):
        load_engine("llamacp")


def test_bad_descriptor_lists_schema_errors(tmp_path: Path) -> None:
    d = tmp_path / "toy"
    d.mkdir()
    (d / "engine.yaml").write_text("name: toy\nsource: {kind: pypi-sdist, package: x}\n")
    with pytest.raises(ConfigError) as e:
        parse_engine(d / "engine.yaml")
    assert "'version' is a required property" in str(e.value)
    assert "'upstream' is a required property" in str(e.value)


def test_cli_host_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["host", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cores"] >= 1 and data["os"] and data["microarch"]


def test_cli_matrix_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["cpu"]["buildable"]
    assert not rows["metal"]["buildable"] or rows["metal"]["os"] == ["darwin"]


def test_cli_unknown_engine_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fetch", "llamacp"]) == 2
    assert "did you mean 'llamacpp'" in capsys.readouterr().err


def test_cli_plugins_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert names[0] == "source-pypi-sdist"
