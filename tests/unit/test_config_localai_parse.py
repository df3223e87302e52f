"""Issue 29: LocalAI configs read as LocalAI reads them (yaml.v3), gallery bodies recognised per
config, LocalAI's backend index as data, its use-case guess, and three severities.

yaml.v3's rules are from its scanner (the escape switch of yaml_parser_scan_flow_scalar takes
``\\'``) and its decoder ("mapping key already defined"); LocalAI's from core/config/model_config.go
at 8f5f7d6ca9f8523bc524bd6501993fcb7a69a601 (Validate, GuessUsecases, SetDefaults).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.config.effective import effective
from harness.config.loader import load_text
from harness.config.localai import vocabulary
from harness.config.validate import Validated, Validator
from harness.core.types import HostInfo
from tests.unit.test_config_localai import CORPUS, ENGINES, PM, ROOT, cli, run, wired  # noqa: F401 (wired: a fixture)


def items(text: str, *, template: bool | None = None) -> list[Any]:
    return Validator(engines=ENGINES, pm=PM, template=template).validate_text(textwrap.dedent(text), "m.yaml")


# -- parsing as yaml.v3 -------------------------------------------------------------------


def test_yaml_v3_single_quote_escape_in_double_quotes() -> None:
    # A stop word written with yaml.v3's \' escape: PyYAML refused the whole file.
    docs, problems = load_text('name: m\nparameters: {model: m.gguf}\nstopwords: ["it\\\'s", "<|im_end|>"]\n', "m.yaml")
    assert problems == [] and docs[0].data["stopwords"] == ["it's", "<|im_end|>"]


def test_unknown_escape_is_still_refused_where_yaml_v3_refuses() -> None:
    _, problems = load_text('name: "a\\qb"\n', "m.yaml")
    assert [p.severity for p in problems] == ["error"] and "escape" in problems[0].message


def test_duplicate_key_names_both_lines() -> None:
    out = run("name: m\nparameters:\n  model: a.gguf\n  model: b.gguf\n")
    assert out == ["m.yaml:4:3: error: duplicate key 'model' on lines 3 and 4: LocalAI's YAML parser (yaml.v3) "
                   "refuses a mapping that gives a key twice"]


def test_yaml_1_1_words_stay_strings_but_fill_bool_fields() -> None:
    # yaml.v3: `yes`/`on` are strings, except decoded into a typed bool (f16, mmap).
    [item] = items("name: yes\nf16: on\nmmap: no\nparameters: {model: m.gguf}\n")
    assert isinstance(item, Validated) and item.diagnostics == ()
    assert item.config is not None and (item.config.name, item.config.f16, item.config.mmap) == ("yes", True, False)


def test_merge_keys_as_yaml_v3() -> None:
    [item] = items("base: &b {context_size: 2048, f16: true}\n"[:0] + "- &b {name: a, context_size: 2048, "
                   "parameters: {model: a.gguf}}\n- {<<: *b, name: b}\n")[:1]
    assert isinstance(item, Validated) and item.config is not None and item.config.context_size == 2048
    second = items("- &b {name: a, context_size: 2048, parameters: {model: a.gguf}}\n- {<<: *b, name: b}\n")[1]
    assert second.config.name == "b" and second.config.context_size == 2048


def test_every_diagnostic_keeps_line_and_column() -> None:
    out = run("name: m\nparameters:\n  model: m.gguf\n  context_size: 4096\n")
    assert out == ["m.yaml:4:3: warning: 'context_size' under parameters: is silently ignored by LocalAI there; "
                   "it belongs at the top level"]


YAML_SHAPES = [
    "name: m\nf16: yes\nthreads: 0o17\nseed: 1_000\ntop_p: .5\nx: ~\ny: 2001-12-14\nz: !!str 12\n",
    "- &a {name: a, parameters: {model: a.gguf}}\n- {<<: *a, name: b}\n",
    "a: |\n  line\n  two\nb: >-\n  folded\n  text\nc: 'it''s'\nd: \"tab\\tx\"\n",
    "---\nname: one\n---\nname: two\n...\n",
    "k: [1, 2.5, -.inf, .nan, true, null, \"q\"]\n",
]


@pytest.mark.parametrize("source", [*sorted(CORPUS.glob("*.yaml")), *range(len(YAML_SHAPES))],
                         ids=lambda s: s.name if isinstance(s, Path) else f"shape{s}")
def test_libyaml_and_ruamel_compose_the_same(source: Path | int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path (libyaml's composer) builds what ruamel's composer builds: values and marks."""
    from harness.config import loader

    text = source.read_text() if isinstance(source, Path) else YAML_SHAPES[source]
    assert loader._compose_libyaml(text) is not None  # the fast path is taken
    fast, fast_problems = loader.load_text(text, "m.yaml")
    monkeypatch.setattr(loader, "_compose_libyaml", lambda _text: None)
    slow, slow_problems = loader.load_text(text, "m.yaml")
    assert fast_problems == slow_problems
    assert [(d.data, d.values, d.keys) for d in fast] == [(d.data, d.values, d.keys) for d in slow]


def test_fast_did_you_mean_answers_as_difflib_does() -> None:
    from harness.config import validate
    from harness.core.errors import did_you_mean

    keys = tuple(validate._validator().schema["properties"])
    words = [k[:i] + k[i + 1:] for k in keys for i in range(0, len(k), 3)]  # a letter dropped
    words += [k[:i] + k[i + 1] + k[i] + k[i + 2:] for k in keys for i in range(0, len(k) - 1, 4)]  # swapped
    words += ["x", "", "zzzzzzzz", "contex_size", "knwon_usecases", "licence", "usecases", "cutwords"]
    for word in words:
        assert validate._did_you_mean(word, keys) == did_you_mean(word, keys), word


def test_what_libyaml_refuses_is_read_by_ruamel() -> None:
    from harness.config import loader

    text = 'name: m\nstopwords: ["it\\\'s"]\n'  # yaml.v3's \' escape: libyaml refuses it
    assert loader._compose_libyaml(text) is None
    docs, problems = loader.load_text(text, "m.yaml")
    assert problems == [] and docs[0].data["stopwords"] == ["it's"]
    assert loader._compose_libyaml("%YAML 1.1\n---\nf16: yes\n") is None  # ruamel switches rules by version


# -- gallery bodies -------------------------------------------------------------------------


BODY = (CORPUS / "gallery-chatml.yaml").read_text().split("config_file: |\n", 1)[1]
FULL = "name: m\nbackend: llama-cpp\nparameters:\n  model: m.gguf\n"


def test_bodies_and_full_configs_in_one_run(tmp_path: Path) -> None:
    (tmp_path / "body.yaml").write_text(textwrap.dedent(BODY))
    (tmp_path / "full.yaml").write_text(FULL)
    (tmp_path / "broken.yaml").write_text("name: m2\nbackend: llama-cpp\n")  # named: a full config
    report = Validator(engines=ENGINES, pm=PM).validate_paths([tmp_path])
    text = [str(d) for d in report.diagnostics]
    assert [t for t in text if "gallery body: checked" in t] == [
        f"{tmp_path / 'body.yaml'}:1:1: note: gallery body: checked as a template (name and parameters.model "
        "come from its gallery entry)"]
    errors = [t for t in text if ": error: " in t]
    assert errors and all(t.startswith(f"{tmp_path / 'broken.yaml'}:") for t in errors)
    assert f"{tmp_path / 'broken.yaml'}:1:1: error: the config is missing the required key 'parameters' " \
           "(parameters.model names the model file; a gallery body gets it from its gallery entry): the backend " \
           "is handed no model and fails at load" in errors


def test_template_flags_force_it() -> None:
    assert [o for o in run(FULL, template=True) if ": error: " in o] == []
    assert any("gallery body" in o for o in run(FULL, template=True))
    found = [o for o in run(textwrap.dedent(BODY), template=False) if ": note: " not in o]
    # no name: LocalAI loads it under the empty name (a warning); no model: the backend fails at load
    assert [e.split(": ", 2)[1:] for e in found] == [
        ["warning", "the config is missing the required key 'name'; LocalAI loads it under the empty name, "
                    "where no request can name it and the next nameless config replaces it"],
        ["error", "the config is missing the required key 'parameters' (parameters.model names the model file; "
                  "a gallery body gets it from its gallery entry): the backend is handed no model and fails at "
                  "load"]]


@pytest.mark.usefixtures("wired")
def test_config_show_and_select_take_the_flags(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "body.yaml"
    f.write_text(textwrap.dedent(BODY))
    assert cli("config", "show", "--json", f) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["diagnostics"][0]["severity"] == "note"
    assert cli("config", "show", "--no-template", "--json", f) == 3
    capsys.readouterr()
    assert cli("select", "--template", "--json", f) in (0, 1)
    assert not [d for d in json.loads(capsys.readouterr().out)["diagnostics"] if d["severity"] == "error"]
    assert cli("select", "--no-template", "--json", f) == 3


# -- LocalAI's backend index ------------------------------------------------------------------


INDEX_COMMIT = "82c191afadf5f005281e798ccfa0ffd0d5805030"


def test_backend_index_is_pinned_data() -> None:
    v = vocabulary()
    assert v.index_source["repository"] == "mudler/LocalAI" and v.index_source["commit"] == INDEX_COMMIT
    # The names: all in LocalAI's backend/index.yaml at that commit, all tagged text-to-speech.
    for name in ("kokoros", "pocket-tts", "supertonic", "fish-speech", "qwen-tts", "voxcpm", "outetts", "kokoro"):
        entry = v.backend(name)
        assert entry is not None and entry.usecases == ("tts",), name
    # Metas defined after the variants (trl, speaker-recognition sit at the end of the file) count too.
    for name, cases in (("trl", ()), ("speaker-recognition", ("speaker_recognition",)),
                        ("llama-cpp", ("chat", "completion", "tts"))):
        entry = v.backend(name)
        assert entry is not None and entry.usecases == cases, name
    # A per-hardware variant is not a backend name of its own.
    assert v.backend("cuda12-fish-speech") is None and v.backend("kokoros-development") is None


@pytest.mark.parametrize("name", ["pocket-tts", "qwen-tts", "voxcpm", "outetts", "kokoros", "supertonic",
                                  "fish-speech"])
def test_index_backends_are_notes_not_errors(name: str) -> None:
    out = run(f"name: m\nbackend: {name}\nparameters: {{model: m.bin}}\n")
    assert out == [f"m.yaml:2:10: note: backend {name!r} is a LocalAI backend this harness does not build "
                   "(only LocalAI's shared rules are checked)"]


def test_unknown_backend_warns_and_a_refused_name_is_an_error() -> None:
    [warn] = run("name: m\nbackend: kokoro-rs\nparameters: {model: m.bin}\n")
    assert warn.startswith("m.yaml:2:10: warning: backend 'kokoro-rs' is neither an engine here nor in LocalAI "
                           f"{INDEX_COMMIT[:12]}'s backend names (did you mean 'kokoros'?)")
    [err] = run("name: m\nbackend: my/backend\nparameters: {model: m.bin}\n")
    assert err.startswith("m.yaml:2:10: error: backend 'my/backend': LocalAI refuses a backend name with "
                          "characters other than letters")


# -- a model path only where the backend loads one ------------------------------------------


def test_model_optional_backends_are_data_with_their_source() -> None:
    v = vocabulary()
    for name in ("pocket-tts", "kitten-tts", "kokoro", "chatterbox", "outetts"):
        entry = v.backend(name)
        # a line of the one pinned commit (an anchor of the generated index) and what it shows
        assert entry is not None and entry.model_optional.startswith(
            f"mudler/LocalAI@{INDEX_COMMIT[:12]} backend/python/{name}/backend.py:"), name
    for name in ("piper", "neutts", "llama-cpp", "whisper", "silero-vad"):
        entry = v.backend(name)
        assert entry is not None and entry.model_optional == "", name


def test_a_tts_config_whose_backend_loads_no_model_needs_no_model_path() -> None:
    # The pocket-tts gallery body sets `parameters: {model: ""}`; LocalAI's own docs show a pocket-tts
    # config with no parameters: at all (docs/content/features/text-to-audio.md).
    assert run("name: pocket-tts\nbackend: pocket-tts\nparameters:\n  model: \"\"\nknown_usecases: [tts]\n") == [
        "m.yaml:2:10: note: backend 'pocket-tts' is a LocalAI backend this harness does not build "
        "(only LocalAI's shared rules are checked)"]
    assert [o for o in run("name: pocket-tts\nbackend: pocket-tts\ntts: {voice: azelma}\n") if ": error: " in o] == []
    assert [o for o in run("name: k\nbackend: kitten-tts\n") if ": error: " in o] == []


def test_a_gallery_file_for_such_a_backend_has_no_error() -> None:
    # The shape of LocalAI's gallery/pocket-tts.yaml: a named body whose model is "" on purpose
    # (the gallery entry installs no model file), and of gallery/kokoros.yaml: a backend alone.
    out = run("---\nname: localai\n\nconfig_file: |-\n    name: pocket-tts\n    backend: pocket-tts\n"
              "    parameters:\n      model: \"\"\n    known_usecases:\n      - tts\n")
    assert [o for o in out if ": error: " in o or ": warning: " in o] == []
    out = run("---\nconfig_file: |\n  backend: kokoros\n")
    assert out == ["m.yaml:3:3: note: gallery body: checked as a template (name and parameters.model come from "
                   "its gallery entry)",
                   "m.yaml:3:12: note: backend 'kokoros' is a LocalAI backend this harness does not build "
                   "(only LocalAI's shared rules are checked)"]


def test_a_backend_that_loads_a_model_still_needs_one() -> None:
    errors = [o for o in run("name: p\nbackend: piper\nparameters:\n  model: \"\"\n") if ": error: " in o]
    assert errors == ["m.yaml:4:10: error: parameters.model is empty: the backend is handed no model and fails "
                      "at load"]
    errors = [o for o in run("name: n\nbackend: neutts\n") if ": error: " in o]
    assert [e.split(": error: ")[1].split(" (")[0] for e in errors] == [
        "the config is missing the required key 'parameters'"]
    # No backend: LocalAI guesses one from the model file, so the file is needed.
    assert any("missing the required key 'parameters'" in o for o in run("name: x\n"))


GO_CONFIG = """\
package config

type ModelConfig struct {
\tschema.PredictionOptions `yaml:"parameters,omitempty"`
\tName string `yaml:"name,omitempty"`
\tAlias string `yaml:"alias,omitempty"`
\tThreads *int `yaml:"threads,omitempty"`
\tTemplateConfig TemplateConfig `yaml:"template,omitempty"`
\tKnownUsecases *int `yaml:"-"`
\tLLMConfig `yaml:",inline"`
}

type LLMConfig struct {
\tMMProj string `yaml:"mmproj,omitempty"`
}

type TemplateConfig struct {
\tChat string `yaml:"chat,omitempty"`
}

func (c ModelConfig) IsAlias() bool { return c.Alias != "" }

func (c *ModelConfig) Validate() (bool, error) {
\tif c.Backend != "" || c.Model != "" {
\t\treturn false, fmt.Errorf("alias config %q must not set backend or parameters.model: an alias is a pure redirect", c.Name)
\t}
\treturn true, nil
}

func GetAllModelConfigUsecases() map[string]ModelConfigUsecase {
\treturn map[string]ModelConfigUsecase{
\t\t"FLAG_CHAT": FLAG_CHAT,
\t\t"FLAG_3D":   FLAG_3D,
\t}
}
"""


INITIALIZERS_V1 = """\
package model

const (
\tLlamaBackend = "llama"
\tBertEmbeddingsBackend = "bert-embeddings"
\tWhisperBackend = "whisper"
)
"""
INITIALIZERS_V2 = """\
package model

var Aliases = map[string]string{
\t"llama":                LLamaCPP,
\t"sentencetransformers": TransformersBackend,
}

var TypeAlias = map[string]string{
\t"sentencetransformers": "SentenceTransformer",
}

const (
\tLLamaCPP = "llama-cpp"
\tWhisperBackend = "whisper"
\tTransformersBackend = "transformers"
)
"""
INITIALIZERS = "pkg/model/initializers.go"
#: The fixture tree's expected index (regenerated by the test; every fact from the fixture's one HEAD).
FIXTURE_INDEX = ROOT / "tests" / "data" / "localai-fixture-index.yaml"


def _commit(checkout: Path, message: str, tag: str | None = None) -> None:
    # fixed names and dates: the fixture's commit hashes are the same on every run
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
    subprocess.run(["git", "-C", str(checkout), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(checkout), "commit", "-q", "--allow-empty", "-m", message], check=True, env=env)
    if tag:
        subprocess.run(["git", "-C", str(checkout), "tag", tag], check=True, env=env)


def _write(checkout: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text(text)


def test_refresh_script_generates_facts_from_a_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "LocalAI"
    subprocess.run(["git", "init", "-q", "-b", "master", str(checkout)], check=True)
    # two releases: v1.0.0 (Go-era names), then v2.0.0 drops bert-embeddings and makes llama an alias
    _write(checkout, {INITIALIZERS: INITIALIZERS_V1,
                      "Makefile": "GRPC_BACKENDS?=backend-assets/grpc/bert-embeddings backend-assets/grpc/whisper\n"})
    _commit(checkout, "v1", tag="v1.0.0")
    _write(checkout, {"Makefile": "GRPC_BACKENDS?=backend-assets/grpc/whisper\n",
                      INITIALIZERS: INITIALIZERS_V1.replace('\tBertEmbeddingsBackend = "bert-embeddings"\n', "")})
    _commit(checkout, "feat(backends): Drop bert.cpp")
    _write(checkout, {INITIALIZERS: INITIALIZERS_V2})
    _commit(checkout, "feat(alias): alias llama to llama-cpp", tag="v2.0.0")
    files = {
        "backend/index.yaml": "---\n- &piper\n  name: piper\n  tags: [text-to-speech]\n"
                              "- !!merge <<: *piper\n  name: piper-development\n",
        "core/config/model_config.go": GO_CONFIG,
        "core/schema/prediction.go": "package schema\n\ntype PredictionOptions struct {\n"
                                     "\tBasicModelRequest `yaml:\",inline\"`\n\tTopK *int `yaml:\"top_k\"`\n}\n",
        "core/schema/request.go": "package schema\n\ntype BasicModelRequest struct {\n"
                                  "\tModel string `json:\"model\" yaml:\"model,omitempty\"`\n}\n",
        "backend/cpp/llama-cpp/grpc-server.cpp": 'if (!strcmp(optname, "context_shift")) {\n'
                                                 '} else if (!strcmp(optname, "cache_ram")) {\n'
                                                 '} else if (!strcmp(optname, "spec_type")) {\n',
    }
    _write(checkout, files)
    _commit(checkout, "HEAD: the pinned commit")
    out = tmp_path / "index.yaml"
    script = str(ROOT / "scripts" / "refresh_localai_index.py")
    r = subprocess.run([sys.executable, script, str(checkout), "--out", str(out)], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    facts = yaml.safe_load(out.read_text())
    assert facts["backends"] == {"piper": ["tts"]}  # the variant is not a backend of its own
    assert facts["keys"]["config"] == {"alias": ["string", "core/config/model_config.go:6"],
                                       "mmproj": ["string", "core/config/model_config.go:14"],
                                       "name": ["string", "core/config/model_config.go:5"],
                                       "template": ["object", "core/config/model_config.go:8"],
                                       "threads": ["integer", "core/config/model_config.go:7"]}
    assert facts["keys"]["parameters"] == {"model": ["string", "core/schema/request.go:4"],
                                           "top_k": ["integer", "core/schema/prediction.go:5"]}
    assert facts["keys"]["template"] == {"chat": ["string", "core/config/model_config.go:18"]}
    assert facts["usecases"] == {"FLAG_CHAT": "core/config/model_config.go:32",
                                 "FLAG_3D": "core/config/model_config.go:33"}
    assert facts["refusals"] == [["core/config/model_config.go:25", "alias config %q must not set backend or "
                                  "parameters.model: an alias is a pure redirect"]]
    # options per LocalAI backend name (the parsers the script reads), and the neutral anchors citing them
    llama_cpp = {"cache_ram": "backend/cpp/llama-cpp/grpc-server.cpp:2",
                 "context_shift": "backend/cpp/llama-cpp/grpc-server.cpp:1",
                 "spec_type": "backend/cpp/llama-cpp/grpc-server.cpp:3"}
    # turboquant builds llama-cpp's grpc-server.cpp; the other parsers' files are not in the fixture
    assert facts["backend_options"] == {"llama-cpp": llama_cpp, "turboquant": llama_cpp}
    assert facts["anchors"]["options_parser"] == "backend/cpp/llama-cpp/grpc-server.cpp:1"
    assert facts["anchors"]["spec_type_passthrough"] == "backend/cpp/llama-cpp/grpc-server.cpp:3"
    assert facts["anchors"]["is_alias"] == "core/config/model_config.go:21"
    assert facts["anchors"]["alias_no_model"] == "core/config/model_config.go:25"
    # the history: when each name came and went, the commit that removed it, what an alias points at
    history = facts["history"]
    assert list(history["releases"]) == ["v1.0.0", "v2.0.0"]
    bert = history["backends"]["bert-embeddings"]
    assert [(s["since"], s["until"], s["subject"]) for s in bert] == [("v1.0.0", "v1.0.0", "feat(backends): Drop bert.cpp")]
    [llama] = history["backends"]["llama"]
    assert llama["became_alias_of"] == "llama-cpp" and llama["subject"] == "feat(alias): alias llama to llama-cpp"
    assert history["aliases"]["llama"] == [{"since": "v2.0.0", "target": "llama-cpp"}]
    assert facts["aliases"] == {"llama": ["llama-cpp", ""], "sentencetransformers": ["transformers", "SentenceTransformer"]}
    # the whole output, compared: every fact from the fixture's one commit (recorded once)
    assert out.read_text().count("commit: ") == 1
    assert out.read_text() == FIXTURE_INDEX.read_text(), "regenerate tests/data/localai-fixture-index.yaml"
    r = subprocess.run([sys.executable, script, str(checkout), "--out", str(out), "--check"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "up to date" in r.stdout
    r = subprocess.run([sys.executable, script, str(checkout / "backend" / "index.yaml"), "--check"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "LocalAI checkout" in r.stderr  # a copied file is not a checkout


def test_the_shipped_index_gives_each_backend_the_options_its_source_parses() -> None:
    v = vocabulary()
    assert v.backend_options  # at least one backend's parser was read
    for name, options in v.backend_options.items():
        assert set(options) <= v.backends[name].options, name
    assert v.anchors["spec_type_passthrough"]


# -- shapes from real LocalAI files the corpus had not seen (the held-out check) -------------------


def test_gallery_entry_fields_in_a_config_are_notes() -> None:
    # aio/cpu/image-gen.yaml carries license: and urls: (GalleryModel's fields, core/gallery/request.go).
    out = run("name: m\nbackend: llama-cpp\nparameters: {model: m.gguf}\nlicense: BSD-3\nurls: [https://x]\n"
              "tags: [a]\nicon: https://x/i.png\nlicence: BSD-3\n")
    assert [o for o in out if ": warning: " in o] == [
        "m.yaml:8:1: warning: unknown key 'licence': LocalAI ignores it"]
    assert "m.yaml:4:1: note: 'license' describes a gallery entry (LocalAI's GalleryModel); a model config has " \
           "no such field and LocalAI ignores it" in out
    assert len([o for o in out if "describes a gallery entry" in o]) == 4


def test_stablediffusion_ggml_options_the_gallery_uses_are_known() -> None:
    # gallery/qwen-image-edit-ggml.yaml and ltx-ggml.yaml: options gosd.cpp's load_model reads; it
    # no longer compares with vae_decode_only ("parsed and ignored", its comment says): a warning
    out = run("name: m\nbackend: stablediffusion-ggml\nparameters: {model: q.gguf}\noptions:\n"
              "  - diffusion_model\n  - diffusion_model_path:q.gguf\n  - vae_decode_only:false\n  - wtype:q8_0\n")
    [warning] = [o for o in out if ": warning: " in o or ": error: " in o]
    assert "'vae_decode_only'" in warning


def test_a_video_config_for_localai_options_only_is_a_coverage_note() -> None:
    # gallery/ltx-ggml.yaml: LocalAI's options, not this harness's video_* set.
    out = run("---\nname: ltx\nconfig_file: |\n  backend: stablediffusion-ggml\n  known_usecases:\n    - video\n"
              "  options:\n  - diffusion_model\n  - sampler:euler\n")
    assert [o for o in out if ": warning: " in o or ": error: " in o] == []
    assert any(": note: known_usecases includes video but no video_* option" in o for o in out)


def test_silero_vad_without_a_model_is_refused() -> None:
    # examples/silero-vad-custom-options.yaml names no model; the silero-vad backend passes the model
    # file to silero-vad-go's NewDetector, whose DetectorConfig.IsValid refuses an empty ModelPath.
    out = run("name: silero-vad\nbackend: silero-vad\noptions:\n  - threshold:0.55\n")
    assert [o.split(": error: ")[1].split(" (")[0] for o in out if ": error: " in o] == [
        "the config is missing the required key 'parameters'"]


def test_keys_localai_spells_otherwise_are_warnings() -> None:
    # examples/mlx-video/ltx2-mlx.yaml (usecases:), examples/rwkv (cutwords:), gallery/phi-3-vision
    # (template.image), gallery/diffusiongemma.yaml (context_size under parameters:).
    out = run("name: m\nbackend: mlx-vlm\nparameters: {model: m, context_size: 4096}\nusecases: [video]\n"
              "cutwords: [x]\ntemplate: {chat: '{{.Input}}', image: '<|image|>'}\n")
    warnings = [o.split(": warning: ")[1] for o in out if ": warning: " in o]
    assert warnings == [
        "'context_size' under parameters: is silently ignored by LocalAI there; it belongs at the top level",
        "unknown key 'usecases': LocalAI ignores it (did you mean 'known_usecases'?)",
        "unknown key 'cutwords': LocalAI ignores it (did you mean 'stopwords'?)",
        "unknown key 'image' in template: LocalAI ignores it"]


# -- use cases as LocalAI guesses them ------------------------------------------------------


@pytest.mark.parametrize(("backend", "expected"), [("stablediffusion-ggml", ["image"]),
                                                   ("whisper", ["transcript"]), ("silero-vad", ["vad"])])
def test_usecases_guessed_like_localai(backend: str, expected: list[str]) -> None:
    [item] = items(f"name: m\nbackend: {backend}\nparameters: {{model: m.bin}}\n")
    assert item.config is not None
    e = effective(item.config, item.options, cpus=2, engine=item.engine)
    assert (e.params["abilities"].value, e.params["abilities"].source) == (expected, "guessed like LocalAI")


def test_chat_guessed_from_templates_and_declared_kept() -> None:
    [item] = items("name: m\nbackend: llama-cpp\nknown_usecases: [embeddings]\nparameters: {model: m.gguf}\n"
                   "template: {chat: '{{.Input}}'}\n")
    e = effective(item.config, item.options, cpus=2, engine=item.engine)
    assert e.params["abilities"].value == ["embeddings", "chat"]
    assert e.params["abilities"].source == "known_usecases + guessed like LocalAI"


# -- severities and provenance --------------------------------------------------------------


@pytest.mark.usefixtures("wired")
def test_strict_fails_on_warnings_never_on_notes(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("name: m\nbackend: whisper\nparameters: {model: m.bin, language: auto}\nroles: {user: 'U:'}\n")
    assert cli("validate", "--strict", f) == 0  # notes only
    f.write_text("name: m\nbackend: whisper\nparameters: {model: m.bin, f16: true}\n")
    assert cli("validate", f) == 0 and cli("validate", "--strict", f) == 3  # misplaced key: a warning


def test_defaults_say_whose() -> None:
    [item] = items(FULL)
    e = effective(item.config, item.options, cpus=2, engine=item.engine)
    assert (e.params["sampling.top_p"].value, e.params["sampling.top_p"].source) == (0.95, "default (LocalAI default)")
    assert e.params["sampling.min_p"].source == "default (engine default)"
    assert e.params["mmap"].source == "default (LocalAI default)"


@pytest.mark.usefixtures("wired")
def test_localai_backend_options_are_labelled_as_such(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "flux.yaml"
    f.write_text((CORPUS / "image-flux-ggml.yaml").read_text())
    cli("config", "show", "--json", f)
    ignored = json.loads(capsys.readouterr().out)["ignored"]
    assert ignored["vae_path"]["source"] == "options (LocalAI backend option, not used by this harness)"
    assert not [k for k, s in ignored.items() if "unknown key" in s["source"]]


# Speed: tests/bench/test_bench_validate.py (nox -s bench) times validate on 1,000 configs; no unit test
# asserts a wall-clock bound (a busy CI host must not fail the test command).


def test_llamacpp_does_not_accept_a_config_for_images_or_transcription() -> None:
    """select showed llama.cpp "ok" for an SD-1.5 checkpoint: it serves text, and LocalAI guesses image."""
    from harness_plugins.llamacpp import match

    host = HostInfo(os="linux", arch="x86_64", cpu_model="x", microarch="x", cores=2, memory_bytes=1 << 30,
                    simd=(), gpus=())
    facts = {"format": "safetensors", "exists": True}
    for uses in (["image"], ["transcript"], ["image", "video"]):
        r = match({**facts, "abilities": uses}, host)
        assert not r.ok and r.reason.startswith(f"the config is for {', '.join(uses)}; llama.cpp serves chat")
    assert match({**facts, "abilities": ["chat", "image"]}, host).ok
    assert match({**facts, "abilities": ["embeddings"]}, host).ok
    assert match(facts, host).ok  # no use cases known: the text default
