"""The committed model-config schema is the generated one, and it documents every field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from harness.config import model, schema


def test_committed_schema_is_generated() -> None:
    assert schema.committed() == schema.generate(), "run nox -s generate_schema"


def test_committed_schema_is_valid_draft_2020_12() -> None:
    committed = schema.committed()
    assert committed["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(committed)


@pytest.mark.parametrize(
    "cls", [model.ModelConfig, model.Parameters, model.Template, model.EngineOptions, model.VideoOptions]
)
def test_every_field_has_a_doc_string(cls: type) -> None:
    docs = schema.field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not missing


def test_schema_types_required_and_descriptions() -> None:
    s = schema.generate()
    assert s["required"] == ["name", "parameters"]
    assert s["additionalProperties"] is False
    params = s["$defs"]["Parameters"]
    assert params["required"] == ["model"]
    assert params["properties"]["top_p"] == {
        "type": ["number", "null"],
        "description": "Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p.",
        "minimum": 0,
        "maximum": 1,
    }
    assert s["properties"]["known_usecases"]["items"] == {"type": "string"}
    assert s["properties"]["parameters"] == {
        "$ref": "#/$defs/Parameters", "description": "The model file and default sampling settings."
    }
    ea = s["properties"]["engine_args"]["properties"]
    assert ea["scheduling_policy"]["enum"] == ["fcfs", "priority", "lpm"]
    assert ea["speculative_config"]["type"] == ["object", "string", "null"]
    assert ea["max_num_seqs"]["description"] == "Alias of n_parallel."
    assert "block_size:32" in s["properties"]["options"]["items"]["examples"]


def test_main_check_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    assert schema.main(["--check", "--output", str(out)]) == 1
    assert "run nox -s generate_schema" in capsys.readouterr().out
    assert schema.main(["--output", str(out)]) == 0
    assert json.loads(out.read_text()) == schema.generate()
    assert schema.main(["--check", "--output", str(out)]) == 0
    assert schema.main(["--output", str(out)]) == 0
    assert "unchanged" in capsys.readouterr().out
