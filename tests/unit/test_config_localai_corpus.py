"""LocalAI's own configs (tests/data/localai-corpus: YAML blocks of its docs and Go tests, each file
citing its source path and commit): no error LocalAI does not make, and the misses of #46 caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import refs
from harness.config.validate import Validator

CORPUS = Path(__file__).resolve().parents[1] / "data" / "localai-corpus"
#: file -> the errors and warnings expected, as (severity, code or message fragment); LocalAI's verdict.
EXPECTED: dict[str, list[tuple[str, str]]] = {
    "features_openai-realtime-L18.yaml": [],  # a realtime pipeline loads no model file
    "operations_cloud-proxy-L70.yaml": [],  # cloud-proxy forwards upstream
    "features_model-aliases-L20.yaml": [],  # an alias is a pure redirect
    "features_stores-L83.yaml": [],  # local-store keeps vectors
    "core_http_endpoints_localai_pii_test-L96.yaml": [],  # pattern detector: in-process, backend: pattern
    "features_text-generation-L543.yaml": [],  # cache_ram, devices, fit_params, ... grpc-server.cpp parses
    "features_audio-diarization-L115.yaml": [],  # FLAG_* known_usecases
    "core_http_endpoints_openai_list_capabilities_test-L84.yaml": [],  # FLAG_* known_usecases
    "advanced_model-configuration-L427.yaml": [],  # spec_type draft-mtp: LocalAI writes it itself
    "advanced_advanced-usage-L16.yaml": [],  # a .bin model: llama.cpp reads the content
    # top_k 0.9 loads as 0 (a warning); top_p 80 is outside this harness's schema (its own bound)
    "features_openai-functions-L82.yaml": [("error", "parameters.top_p: must be <= 1"), ("warning", "LAI007")],
}


def _found(path: Path) -> list[tuple[str, str, str]]:
    report = Validator().validate_paths([path])
    return [(d.severity, d.code, d.message) for d in report.diagnostics if d.severity != "note"]


def test_every_corpus_file_has_a_verdict_and_cites_its_source() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in CORPUS.glob("*.yaml"))
    for p in CORPUS.glob("*.yaml"):
        assert p.read_text().startswith("# source: mudler/LocalAI "), p.name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_verdicts(name: str) -> None:
    found = _found(CORPUS / name)
    assert len(found) == len(EXPECTED[name]), found
    for (severity, code, message), (want_severity, want) in zip(found, EXPECTED[name], strict=True):
        assert severity == want_severity and (code == want or want in message), (severity, code, message)


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


def test_every_rule_cites_a_line_of_the_pinned_localai() -> None:
    for code, rule in refs.RULES.items():
        ref = refs.reference(code)
        assert ref.startswith("mudler/LocalAI@82c191afadf5 "), (code, ref)
        assert refs.severity(code) == rule.severity
        assert ref in refs.explain(code)
