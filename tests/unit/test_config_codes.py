"""Rule codes as ruff and yamllint have them: every finding of `harness validate` carries one, printed
in the text output; `# harness: ignore[CODE]` silences one on its line, `--ignore CODE` everywhere;
`--strict` fails on warnings, never on notes; `--explain` prints every rule's reference."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.cli
from harness.cli import main
from harness.config import refs
from harness.config.validate import Validator, suppressions

#: A config with a warning (LAI009, an unknown key) on line 5 and a note (HRN002) on line 6.
WARNED = "name: m\nbackend: vllm\nparameters:\n  model: m\nmaxtokens: 3{w}\ncontext_size: 0{n}\n"


@pytest.fixture(autouse=True)
def _wired(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.cli, "COMMAND_MODULES", ("harness.cli.config",))


def cli(*args: object) -> int:
    return main([str(a) for a in args])


def found(text: str, **kwargs: object) -> list[tuple[str, str, int]]:
    out = []
    for item in Validator(**kwargs).validate_text(text, "m.yaml"):  # type: ignore[arg-type]
        diags = getattr(item, "diagnostics", (item,))
        out += [(d.code, d.severity, d.line) for d in diags]
    return out


def test_text_output_shows_the_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(WARNED.format(w="", n=""))
    assert cli("validate", f) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"{f}:5:1: LAI009 warning: unknown key 'maxtokens': LocalAI ignores it" in out
    assert any(line.startswith(f"{f}:6:15: HRN002 note: context_size: must be >= 1") for line in out)
    assert all(line.split(": ")[1].split()[0] in refs.all_rules() for line in out)


def test_inline_comment_silences_its_code_on_its_line() -> None:
    assert ("LAI009", "warning", 5) in found(WARNED.format(w="", n=""))
    silenced = found(WARNED.format(w="  # harness: ignore[LAI009]", n=""))
    assert all(code != "LAI009" for code, _, _ in silenced)
    # another code on that line, or the code on another line, is not silenced
    assert ("LAI009", "warning", 5) in found(WARNED.format(w="  # harness: ignore[HRN002]", n=""))
    assert ("LAI009", "warning", 5) in found(WARNED.format(w="", n="  # harness: ignore[LAI009]"))
    both = found(WARNED.format(w="", n="  # harness: ignore[lai009, HRN002]"))
    assert ("HRN002", "note", 6) not in both and ("LAI009", "warning", 5) in both


def test_suppressions_parse_comma_separated_codes() -> None:
    assert suppressions("a: 1  # harness: ignore[LAI009,HRN002]\nb: 2\n") == {1: frozenset({"LAI009", "HRN002"})}
    assert suppressions(b"x: 1 # harness:ignore[ lai001 ]\n") == {1: frozenset({"LAI001"})}
    assert suppressions("x: 1  # noqa\n") == {}


def test_ignore_flag_silences_a_code_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert all(code != "LAI009" for code, _, _ in found(WARNED.format(w="", n=""), ignore=["lai009"]))
    f = tmp_path / "m.yaml"
    f.write_text(WARNED.format(w="", n=""))
    assert cli("validate", "--strict", f) == 3  # the warning fails --strict
    capsys.readouterr()
    assert cli("validate", "--strict", "--ignore", "LAI009,HRN001", f) == 0
    assert "LAI009" not in capsys.readouterr().out
    assert cli("validate", "--strict", "--ignore", "HRN001", "--ignore", "LAI009", f) == 0


def test_strict_fails_on_warnings_never_on_notes(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(WARNED.format(w="  # harness: ignore[LAI009]", n=""))  # the note is left
    assert cli("validate", f) == 0
    assert cli("validate", "--strict", f) == 0
    f.write_text(WARNED.format(w="", n=""))
    assert cli("validate", f) == 0
    assert cli("validate", "--strict", f) == 3


def test_explain_lists_every_rule_with_its_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("validate", "--explain") == 0
    listed = capsys.readouterr().out
    for code in refs.all_rules():
        assert f"{code} (" in listed
        assert (refs.reference(code) or "none (") in listed
    assert cli("validate", "--explain", "all") == 0
    assert capsys.readouterr().out == listed
    assert cli("validate", "--explain", "lai010") == 0
    one = capsys.readouterr().out
    assert one.startswith("LAI010 (warning): ") and "core/config/model_config_loader.go:" in one
    assert cli("validate", "--explain", "LAI999") == 2


def test_a_config_without_a_name_loads_under_the_empty_name() -> None:
    # LocalAI's Validate() asks no name of a config that is not an alias: a warning, not an error
    text = "backend: llama-cpp\nparameters:\n  model: m.gguf\n"
    assert [(c, s) for c, s, _ in found(text) if s != "note"] == [("LAI010", "warning")]
    # an alias without one, or one that names itself, is refused
    assert ("LAI011", "error", 1) in found("alias: qwen\n")
    assert [(c, s) for c, s, _ in found("name: q\nalias: q\n") if s != "note"] == [("LAI012", "error")]


def test_artifacts_give_the_model_file() -> None:
    text = ("name: m\nbackend: transformers\nartifacts:\n  - name: model\n    target: model\n"
            "    source: {type: huggingface, repo: o/r}\n")
    assert [f for f in found(text) if f[1] != "note"] == []
    assert ("LAI008", "error", 1) in found("name: m\nbackend: transformers\n")


def test_top_p_out_of_range_is_what_the_engine_clamps() -> None:
    # LocalAI passes top_p on; llama.cpp's server clamps it into 0..1 (a warning with its pinned line)
    text = "name: m\nbackend: llama-cpp\nparameters:\n  model: m.gguf\n  top_p: 80\n"
    assert [(c, s) for c, s, _ in found(text) if s != "note"] == [("LCP006", "warning")]
    assert refs.reference("LCP006").startswith("ggml-org/llama.cpp@0c1e570 tools/server/server-schema.cpp:")
    # no backend named: nothing LocalAI or an engine says about it
    assert [f for f in found(text.replace("backend: llama-cpp\n", "")) if f[1] != "note"] == []


@pytest.mark.parametrize(("text", "code"), [
    ("backend: cloud-proxy\ncompression: {enabled: true}\n", "LAI019"),
    ("backend: llama-cpp\nparameters: {model: m.gguf}\ncompression: {enabled: true, trigger_at_ratio: 1.5}\n",
     "LAI019"),
    ("backend: llama-cpp\nparameters: {model: m.gguf}\ncompression: {enabled: true, keep_tail_tokens: -1}\n",
     "LAI019"),
    ("backend: llama-cpp\nparameters: {model: m.gguf}\n"
     "compression: {enabled: true, on_post_compression_overflow: drop}\n", "LAI019"),
    ("backend: cloud-proxy\nproxy: {api_key_env: K, api_key_file: /k}\n", "LAI020"),
    ("backend: cloud-proxy\nproxy: {mode: passthru}\n", "LAI021"),
    ("backend: cloud-proxy\nproxy: {mode: translate}\n", "LAI022"),
    ("backend: llama-cpp\nparameters: {model: m.gguf}\nrouter: {score_normalization: avg}\n", "LAI023"),
    ("alias: q\nartifacts: [{name: model, target: model}]\n", "LAI024"),
])
def test_validate_refusals(text: str, code: str) -> None:
    # each a `return false, fmt.Errorf(...)` of LocalAI's ModelConfig.Validate()
    errors = [c for c, s, _ in found("name: m\n" + text) if s == "error"]
    assert errors == [code]
    assert refs.reference(code).startswith("mudler/LocalAI@82c191afadf5 core/config/model_config.go:")


def test_valid_compression_proxy_and_router_pass() -> None:
    ok = ("name: m\nbackend: cloud-proxy\nproxy: {mode: translate, provider: openai, api_key_env: K}\n"
          "compression: {enabled: true, trigger_at_ratio: 0.75, on_post_compression_overflow: drop_oldest_summary}\n"
          "router: {score_normalization: mean}\n")
    assert [f for f in found(ok) if f[1] == "error"] == []
