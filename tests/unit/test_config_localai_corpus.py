"""LocalAI's own configs (tests/data/localai-corpus: every model-config YAML block of its docs/content
and of its Go tests, each file citing its source line and commit), checked against the verdicts of
verdicts.yaml: no error LocalAI does not make, every refusal it makes found, each finding with its rule's
reference; and the misses of #46 caught."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.config import refs
from harness.config.validate import Validator

CORPUS = Path(__file__).resolve().parents[1] / "data" / "localai-corpus"
#: file -> the errors and warnings LocalAI's behaviour gives it: [{severity, code, reference, why?}]
VERDICTS: dict[str, list[dict[str, str]]] = yaml.safe_load((CORPUS / "verdicts.yaml").read_text())
SOURCE = re.compile(r"^# source: mudler/LocalAI [0-9a-f]{40} [\w./-]+:\d+\n")
VALIDATOR = Validator()


def _found(path: Path) -> list[dict[str, str]]:
    report = VALIDATOR.validate_paths([path])
    return [{"severity": d.severity, "code": d.code, "reference": refs.reference(d.code)}
            for d in report.diagnostics if d.severity != "note"]


def test_every_corpus_file_has_a_verdict_and_cites_its_source() -> None:
    files = sorted(p.name for p in CORPUS.glob("*.yaml") if p.name != "verdicts.yaml")
    assert len(files) >= 200
    assert sorted(VERDICTS) == files
    for name in files:
        assert SOURCE.match((CORPUS / name).read_text()), name


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_corpus_verdicts(name: str) -> None:
    want = [{k: v for k, v in item.items() if k != "why"} for item in VERDICTS[name] or ()]
    assert _found(CORPUS / name) == want


def test_every_error_of_the_corpus_is_a_refusal_with_its_line() -> None:
    for name, items in VERDICTS.items():
        for item in items or ():
            assert item["reference"], (name, item)
            if item["severity"] == "error":
                assert item.get("why"), (name, item)


def run(text: str, models_dir: Path | None = None) -> list[tuple[str, str]]:
    out = []
    for item in Validator(models_dir=models_dir).validate_text(text, "m.yaml"):
        diags = getattr(item, "diagnostics", (item,))
        out += [(d.severity, d.code) for d in diags if d.severity != "note"]
    return out


def test_alias_that_sets_a_model_is_refused() -> None:
    assert run("name: gpt-4\nalias: qwen\n") == []
    assert run("name: gpt-4\nalias: qwen\nparameters: {model: q.gguf}\n") == [("error", "LAI001")]


def test_invalid_mcp_stdio_is_refused() -> None:
    base = "name: m\nbackend: llama-cpp\nparameters: {model: m.gguf}\nmcp:\n  stdio: |\n"
    assert run(base + '    {"mcpServers": {"x": {"command": "docker"}}}\n') == []
    assert run(base + '    {"mcpServers": {"x": {"command": "docker"}\n') == [("error", "LAI004")]
    assert run(base + '    {"mcpServers": ["docker"]}\n') == [("error", "LAI004")]


def test_unknown_usecase_is_dropped() -> None:
    base = "name: m\nbackend: llama-cpp\nparameters: {model: m.gguf}\nknown_usecases: "
    assert run(base + "[FLAG_CHAT, Chat, tts]\n") == []
    assert run(base + "[chatt]\n") == [("warning", "LAI005")]


def test_missing_template_file_renders_the_name(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"")
    text = "name: m\nbackend: vllm\nparameters: {model: m.gguf}\ntemplate: {chat: chatml}\n"
    assert run(text, tmp_path) == [("warning", "LAI006")]
    (tmp_path / "chatml.tmpl").write_text("{{.Input}}")
    assert run(text, tmp_path) == []
    assert run(text.replace("chatml", "'{{.Input}}'"), tmp_path) == []  # inline template text


def test_top_k_minus_one_and_fractions() -> None:
    base = "name: m\nbackend: vllm-omni\nparameters: {model: m, top_k: "
    assert run(base + "-1}\n") == []
    assert run(base + "0.9}\n") == [("warning", "LAI007")]


def test_every_rule_cites_its_reference() -> None:
    rules = refs.all_rules()
    assert {"LCP002", "VLC001", "SDC001"} <= set(rules)  # the engines' own rules are listed too
    for code, rule in rules.items():
        ref = refs.reference(code)
        if code.startswith("LAI"):  # LocalAI's: a line of the pinned LocalAI, from the generated index
            assert re.fullmatch(r"mudler/LocalAI@82c191afadf5 [\w./-]+:\d+", ref), (code, ref)
        assert refs.severity(code) == (rule.severity if ref else "note"), code
        assert (ref or "none") in refs.explain(code)
    # an error or a warning always has a reference; a rule without one is a note
    assert all(refs.reference(c) for c in rules if refs.severity(c) != "note")
