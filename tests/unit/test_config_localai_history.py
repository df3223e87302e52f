"""Configs written for older LocalAI releases: LocalAI's history of backend names (generated from its git
history into localai_index.yaml), errors that stay LocalAI's, and the shapes yaml.v3 refuses."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.config import refs
from harness.config.localai import resolve_backend, vocabulary
from harness.config.validate import Validated, Validator
from harness.core.errors import UsageError
from harness.engine.plugin import make_manager

ENGINES = frozenset({"llamacpp", "sdcpp"})
PM = make_manager(autoload=False)


def findings(text: str, *, localai: str | None = None) -> list[tuple[str, str, str]]:
    out = []
    for item in Validator(engines=ENGINES, pm=PM, localai=localai).validate_text(textwrap.dedent(text), "m.yaml"):
        for d in item.diagnostics if isinstance(item, Validated) else (item,):
            out.append((d.severity, d.code, d.message))
    return out


def codes(text: str, *, localai: str | None = None) -> list[tuple[str, str]]:
    return [(s, c) for s, c, _ in findings(text, localai=localai) if c not in ("HRN009", "HRN003")]


# -- the generated history -------------------------------------------------------------------


def test_the_history_is_generated_from_the_pinned_commits_past() -> None:
    h = vocabulary().history
    assert len(h.releases) > 100 and "v2.0.0" in h.releases and "v4.9.0" in h.releases
    assert all(len(c) == 40 for c in h.releases.values())
    # names LocalAI dropped, each with the commit that dropped it
    for name in ("gpt4all-j", "bert-embeddings", "rwkv", "exllama2", "llama-stable", "tinydream", "starcoder"):
        span = h.removal(name)
        assert span is not None and len(span.commit) == 40 and span.subject, name
    # renamed: the old name is an alias LocalAI still maps
    for alias, target in (("llama", "llama-cpp"), ("stablediffusion", "stablediffusion-ggml"),
                          ("sentencetransformers", "transformers")):
        assert vocabulary().backends[alias].alias_of == target
        assert h.aliases[alias][-1].target == target and h.aliases[alias][-1].until is None
    assert h.was_backend("stablediffusion") is not None and h.was_backend("embedded-store") is None


def test_no_backend_name_is_hand_listed() -> None:
    """localai.yaml annotates names the generated index has; every alias and option is generated."""
    from importlib import resources

    import yaml

    raw = yaml.safe_load(resources.files("harness.config").joinpath("localai.yaml").read_text())
    index = yaml.safe_load(resources.files("harness.config").joinpath("localai_index.yaml").read_text())
    assert "source" not in raw and "guess_usecases" not in raw and "gallery_metadata" not in raw
    for name, spec in raw["backends"].items():
        assert name in index["backends"], name
        assert not {"alias_of", "options"} & set(spec), name


# -- a removed backend is LocalAI's error; a legacy alias a note ------------------------------------


def test_a_removed_backend_is_an_error_citing_the_commit() -> None:
    [(severity, _, message)] = [f for f in findings("""\
        name: gpt
        backend: gpt4all-j
        parameters: {model: ggml-gpt4all-j.bin}
        """) if f[1] == "LAI025"]
    assert severity == "error"
    assert "8814b31805b8 ('chore: drop gpt4all.cpp (#3106)'; last in v2.19.4)" in message
    assert "fails to load the config" in message
    assert refs.reference("LAI025").endswith("core/gallery/backends.go:227")


def test_a_removed_backend_says_what_replaced_it() -> None:
    [message] = [m for _, c, m in findings("name: s\nbackend: llama-stable\nparameters: {model: m.bin}\n")
                 if c == "LAI025"]
    assert "the same commit added llama-ggml" in message


def test_a_legacy_alias_is_a_note_naming_the_current_name() -> None:
    out = findings("name: l\nbackend: llama\nparameters: {model: m.gguf}\n")
    assert [(s, c) for s, c, _ in out] == [("note", "LAI026")]
    assert "maps to 'llama-cpp': write backend: llama-cpp" in out[0][2]
    [(_, _, typed)] = [f for f in findings("name: e\nbackend: sentencetransformers\nembeddings: true\n"
                                            "parameters: {model: all-MiniLM-L6-v2}\n") if f[1] == "LAI026"]
    assert "write backend: transformers and type: SentenceTransformer" in typed


def test_an_old_asset_directory_for_a_repointed_name_warns() -> None:
    # the NCNN stablediffusion backend took a directory of assets; the name now loads stablediffusion-ggml
    out = codes("name: sd\nbackend: stablediffusion\nparameters: {model: stablediffusion_assets}\n")
    assert ("warning", "LAI027") in out and ("note", "LAI026") in out
    assert ("warning", "LAI027") not in codes("name: sd\nbackend: stablediffusion\nparameters: {model: sd.gguf}\n")


# -- errors stay LocalAI's --------------------------------------------------------------------


def test_no_harness_rule_is_an_error_on_a_config_localai_loads() -> None:
    for code, rule in refs.RULES.items():
        if code.startswith("HRN") and code != "HRN016":  # HRN016: a file that cannot be read at all
            assert refs.severity(code) != "error", code
        if rule.refused_here:
            assert refs.severity(code) == "warning", code


def test_an_empty_draft_model_is_localai_default() -> None:
    assert codes("name: d\nbackend: llama-cpp\ndraft_model: ''\nparameters: {model: m.gguf}\n") == []


def test_download_files_as_urls_is_the_type_error_localai_makes() -> None:
    text = """\
        name: d
        backend: llama-cpp
        parameters: {model: m.gguf}
        download_files:
          - https://example.com/m.gguf
        """
    [(severity, _, message)] = [f for f in findings(text) if f[1] == "LAI013"]
    assert severity == "error" and "download_files[0]: expected a mapping" in message
    fixed = text.replace("- https://example.com/m.gguf", "- {filename: m.gguf, uri: https://example.com/m.gguf}")
    assert [c for _, c in codes(fixed)] == []


# -- another LocalAI release ------------------------------------------------------------------


def test_an_older_release_gets_its_own_verdicts() -> None:
    h = vocabulary().history
    assert h.release("v2.0.0") == "v2.0.0" and h.release("2.0.0") == "v2.0.0"
    assert h.release(h.releases["v2.0.0"][:10]) == "v2.0.0" and h.release("v9.9.9") is None
    config = "name: g\nbackend: gpt4all-j\nparameters: {model: ggml-gpt4all-j.bin}\n"
    assert ("error", "LAI025") in codes(config)
    assert codes(config, localai="v2.0.0") == []  # LocalAI v2.0.0 had gpt4all-j
    # a name that came later is not that release's
    verdict = resolve_backend("kokoro", ENGINES, release="v2.0.0")
    assert verdict.kind == "unknown" and "added in" in verdict.message
    # removed before the release: an error for it too
    assert resolve_backend("redpajama", ENGINES, release="v2.0.0").kind == "removed"


def test_validate_localai_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import harness.cli

    f = tmp_path / "g.yaml"
    f.write_text("name: g\nbackend: gpt4all-j\nparameters: {model: ggml-gpt4all-j.bin}\n")
    assert harness.cli.main(["validate", str(f)]) == 3
    assert "LAI025 error" in capsys.readouterr().out
    assert harness.cli.main(["validate", "--localai", "v2.0.0", str(f)]) == 0
    assert "as LocalAI v2.0.0" in " ".join(capsys.readouterr().err.split())
    assert harness.cli.main(["validate", "--localai", "v0.0.1", str(f)]) == UsageError.exit_code
    assert "not a LocalAI release the generated history covers" in " ".join(capsys.readouterr().err.split())
