"""LocalAI's configs as operators have them: vocabulary, backend names, engine-owned rules,
answers for imperfect configs, numbers and files, gallery templates, operator tooling.

Each class of false positive issue 17 found in real LocalAI configs has a test here.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path
from typing import Any

import pluggy
import pytest
import yaml

import harness.cli
import harness.cli.config as config_cli
import harness.config
import harness.config.validate as validate
import harness.engine.plugin
from harness.config import loader, model, refs, schema
from harness.config.localai import SECTIONS, resolve_backend, vocabulary
from harness.config.validate import Validated, Validator
from harness.core.types import GpuInfo, HostInfo, MatchResult
from harness.engine import hookspec
from harness.engine.plugin import make_manager
from harness.engine.registry import EngineImpl
from tests.unit.test_config_validate import tiny_gguf

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "localai"
EXAMPLES = ROOT / "examples" / "models"
ENGINES = frozenset({"llamacpp", "sdcpp"})
PM = make_manager(autoload=False)
engine_llamacpp: Any = PM.get_plugin("engine-llamacpp")
HOST = HostInfo(os="linux", arch="x86_64", cpu_model="t", microarch="x", simd=(), cores=4,
                memory_bytes=1 << 30, cuda_version="13.0")
hookimpl = pluggy.HookimplMarker("harness")


def run(text: str, models_dir: Path | None = None, *, template: bool | None = None) -> list[str]:
    v = Validator(engines=ENGINES, models_dir=models_dir, pm=PM, template=template)
    out: list[str] = []
    for item in v.validate_text(textwrap.dedent(text), "m.yaml"):
        out += [str(d) for d in (item.diagnostics if isinstance(item, Validated) else [item])]
    return out


def errors(text: str, models_dir: Path | None = None) -> list[str]:
    return [o for o in run(text, models_dir) if ": error: " in o]


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.cli, "COMMAND_MODULES", ("harness.cli.config",))
    monkeypatch.setattr(harness.engine.plugin, "get_manager", lambda: PM)
    monkeypatch.setattr(config_cli, "probe_host", lambda: HOST)
    monkeypatch.delenv(harness.config.MODELS_DIR_ENV, raising=False)


def cli(*argv: str | Path) -> int:
    return harness.cli.main([str(a) for a in argv])


# -- the corpus ------------------------------------------------------------------------


def test_corpus_validates_with_warnings_only() -> None:
    files = sorted(CORPUS.glob("*.yaml"))
    assert len(files) >= 12
    report = Validator(engines=ENGINES, pm=PM).validate_paths([CORPUS])
    assert [str(d) for d in report.diagnostics if d.severity == "error"] == []
    assert report.files == len(files) and report.configs >= len(files) + 3  # the list file holds 4
    warned = {d.file for d in report.diagnostics}
    assert len(warned) >= 10


def test_examples_and_corpus_via_cli(wired: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("validate", CORPUS, EXAMPLES) == 0
    assert ": error: " not in capsys.readouterr().out


# -- vocabulary -------------------------------------------------------------------------


LOCALAI_KEYS = """\
name: m
backend: llama-cpp
parameters:
  model: m.gguf
stopwords: ["</s>"]
function: {grammar: {parallel_calls: true}}
roles: {user: "User:"}
step: 25
cfg_scale: 7
download_files: [{filename: m.gguf, uri: "https://example.com/m.gguf"}]
reranking: true
low_vram: true
trust_remote_code: true
max_model_len: 4096
system_prompt: be brief
type: AutoModelForCausalLM
tts: {voice: v.onnx}
template: {multimodal: "{{.Text}}"}
known_usecases: [chat, vision, 3d, sound_classification, realtime_audio]
"""


def test_localai_top_level_keys_are_not_errors() -> None:
    out = run(LOCALAI_KEYS)
    assert out == ["m.yaml:6:1: note: LocalAI keys this harness does not use: function, roles, "
                   "step, cfg_scale, download_files, trust_remote_code, type, tts"]


def test_unused_keys_one_warning_per_file() -> None:
    text = "- {name: a, parameters: {model: a.gguf}, roles: {}}\n- {name: b, parameters: {model: b.gguf}, roles: {}, step: 2}\n"
    assert run(text) == ["m.yaml:1:42: note: LocalAI keys this harness does not use: roles, step"]


def test_unknown_key_is_a_warning_with_did_you_mean() -> None:
    # yaml.v3 decodes leniently: LocalAI drops a key no field takes (accepted, probably wrong).
    assert run("name: m\nparameters: {model: m.gguf}\nstopword: [x]\n") == [
        "m.yaml:3:1: warning: unknown key 'stopword': LocalAI ignores it (did you mean 'stopwords'?)"]
    assert run("name: m\nparameters: {model: m.gguf, keep: 3}\n") == [
        "m.yaml:2:29: warning: unknown key 'keep' in parameters: LocalAI ignores it (did you mean 'n_keep'?)"]


def test_mapped_keys_show_their_provenance() -> None:
    [item] = Validator(engines=ENGINES, pm=PM).validate_text(LOCALAI_KEYS, "m.yaml")
    assert isinstance(item, Validated) and item.config is not None
    from harness.config.effective import effective

    e = effective(item.config, item.options, cpus=4, engine=item.engine)
    src = {k: (s.value, s.source) for k, s in e.params.items()}
    assert src["sampling.stop"] == (["</s>"], "stopwords")
    assert src["n_ctx"] == (4096, "max_model_len")
    assert src["low_vram"] == (True, "low_vram")
    assert src["system_prompt"] == ("be brief", "system_prompt")
    assert src["template.multimodal"] == ("{{.Text}}", "template")
    assert src["abilities"][1] == "known_usecases"  # reranking: true declares rerank
    assert "rerank" in src["abilities"][0]


def test_vocabulary_matches_the_typed_model_and_schema() -> None:
    """Every key the data maps is a typed field; every field is LocalAI's or the harness's own."""
    vocab = vocabulary()
    classes = {"config": model.ModelConfig, "parameters": model.Parameters, "template": model.Template}
    generated = schema.generate()
    for section in SECTIONS:
        fields = {f.name for f in dataclasses.fields(classes[section])}
        used = set(vocab.used(section))
        assert used <= fields, f"{section}: mapped keys without a field: {used - fields}"
        own = vocab.harness_keys.get(section, frozenset())
        assert fields - used <= own, f"{section}: fields not in localai.yaml: {fields - used - own}"
        props = generated["properties"] if section == "config" else generated["$defs"][classes[section].__name__]["properties"]
        assert set(vocab.unused(section)) | fields == set(props)
    # known_usecases takes any string (LocalAI drops unknown values: a rule warns); the names are generated
    assert generated["properties"]["known_usecases"]["items"] == {"type": "string"}
    assert {"vision", "3d", "sound_classification", "realtime_audio", "llm"} <= set(vocab.usecases)
    # every LocalAI fact is the generated index's, at its one commit; the harness's table maps only keys it has
    assert vocab.source == vocab.index_source and set(vocab.source) == {"repository", "commit"}
    for section in SECTIONS:
        assert set(vocab.used(section)) - {"parameters"} <= set(vocab.generated_keys[section]), section


# -- backend names ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama-cpp", "llama", "go-llama", "llamacpp"])
def test_llama_cpp_names_resolve_to_the_engine(name: str) -> None:
    assert resolve_backend(name, ENGINES).engine == "llamacpp"
    # the engine's own rules apply (its options are key:value: a note, LocalAI reads a bare name as
    # true); a .bin name is no rule of LocalAI's
    text = f"name: m\nbackend: {name}\nparameters: {{model: m.bin}}\noptions: [flag]\n"
    assert errors(text) == []
    assert "m.yaml:4:11: note: option 'flag' is not key:value (llama.cpp options are key:value; the key ends " \
           "at the first colon)" in run(text)


@pytest.mark.parametrize("name", ["stablediffusion-ggml", "stablediffusion"])
def test_stablediffusion_names_resolve_to_the_video_engine(name: str) -> None:
    assert resolve_backend(name, ENGINES).engine == "sdcpp"


@pytest.mark.parametrize("name", ["whisper", "piper", "vllm", "sglang", "diffusers", "transformers", "vllm-cpp"])
def test_known_backends_we_do_not_serve_warn(name: str) -> None:
    out = run(f"name: m\nbackend: {name}\nparameters: {{model: m.gguf}}\n")
    assert out == [f"m.yaml:2:10: note: backend {name!r} is a LocalAI backend this harness does not "
                   "build (only LocalAI's shared rules are checked)"]


def test_vllm_cpp_is_the_engine_of_that_name_when_registered() -> None:
    assert resolve_backend("vllm-cpp", {*ENGINES, "vllm-cpp"}).engine == "vllm-cpp"
    assert resolve_backend("vllm-cpp", ENGINES).kind == "localai"


class VllmCpp:
    @hookimpl
    def harness_engine_register(self) -> list[EngineImpl]:
        return [EngineImpl(name="vllm-cpp",
                           match=lambda model, host: MatchResult(engine="vllm-cpp", ok=True, variant="cpu"))]


def test_spec_section_4_example_is_served_by_a_registered_vllm_cpp(
        tmp_path: Path, wired: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "q.yaml"
    f.write_text("name: qwen3-vllm\nbackend: vllm-cpp\ncontext_size: 8192\nparameters:\n  model: Qwen3-4B\n"
                 "options:\n  - max_num_seqs:16\n")
    # the vllm.cpp engine plugin serves LocalAI's vllm-cpp: no "does not build" note, and it is selected
    model = tmp_path / "Qwen3-4B"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}')
    (model / "model.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}")
    assert cli("validate", "--strict", f) == 0
    assert "does not build" not in capsys.readouterr().out
    assert cli("select", f) == 0
    assert "selected vllmcpp variant cpu" in capsys.readouterr().out
    # an engine registered under the exact name wins the name, as any exactly-named engine does
    monkeypatch.setattr(harness.engine.plugin, "get_manager", lambda: make_manager(autoload=False, extra=(VllmCpp(),)))
    assert cli("validate", "--strict", f) == 0
    assert cli("select", f) == 0
    assert "selected vllm-cpp variant cpu" in capsys.readouterr().out


# -- rules belong to their engine -------------------------------------------------------


@pytest.mark.parametrize(("backend", "model_file"), [
    ("whisper", "ggml-whisper-base.bin"), ("piper", "en-us-amy-low.onnx"), ("silero-vad", "silero-vad.onnx"),
    ("transformers", "model.safetensors"),
])
def test_gguf_rule_is_llama_cpps_only(backend: str, model_file: str) -> None:
    assert errors(f"name: m\nbackend: {backend}\nparameters: {{model: {model_file}}}\n") == []


def test_other_backends_options_are_their_own() -> None:
    text = "name: m\nbackend: sherpa-onnx\nparameters: {model: asr}\noptions: [asr.sample_rate=16000, flag]\n"
    assert errors(text) == []
    flags = "name: m\nbackend: stablediffusion-ggml\nparameters: {model: f.gguf}\noptions: [diffusion_model]\n"
    assert errors(flags) == []
    assert "m.yaml:4:11: note: option 'diffusion_model' is not key:value (llama.cpp options are key:value; " \
           "the key ends at the first colon)" in run(flags.replace("stablediffusion-ggml", "llama-cpp"))


def test_unset_backend_gets_no_engine_rules() -> None:
    assert errors("name: m\nparameters: {model: ggml-whisper.bin}\n") == []


def test_tiny_wan_config_validates(tmp_path: Path) -> None:
    from harness_plugins.sdcpp.tiny_wan import write_tiny_wan

    tiny = write_tiny_wan(tmp_path)
    report = Validator(models_dir=tmp_path, engines=ENGINES, pm=PM).validate_paths([tiny.model_config])
    assert report.diagnostics == [] and report.configs == 1


def test_llama_dot_cpp_is_a_name_localai_refuses() -> None:
    # GuessUsecases lists "llama.cpp", but Validate() refuses a backend name with a dot
    assert resolve_backend("llama.cpp", ENGINES).kind == "refused"


def test_minimax_h3_config_still_needs_its_audio_vae(tmp_path: Path) -> None:
    text = (CORPUS / "video-minimax-h3-sdcpp.yaml").read_text()
    assert errors(text) == []
    without = "\n".join(line for line in text.splitlines() if "audio_vae" not in line) + "\n"
    # this harness's video engine refuses it at load; LocalAI loads it: a warning that says so
    assert [o for o in run(without) if "audio_vae" in o] == [
        "m.yaml:14:1: warning: video options need audio_vae (the minimax-h3 family): both the video and the "
        "audio VAE are required"]
    assert refs.refused_here("HRN013") and refs.severity("HRN013") == "warning"
    assert any("17n+5" in o for o in run(text.replace("video_num_frames:124", "video_num_frames:100")))


# -- imperfect configs: config show and select still answer -----------------------------


BAD = """\
name: bad
backend: llama-cpp
context_size: lots
stopwords: ["</s>"]
parameters:
  model: m.gguf
  temperature: .nan
  top_k: 40
options:
  - n_parallel:4
"""


def test_config_show_prints_diagnostics_then_values(tmp_path: Path, wired: None,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(BAD)
    assert cli("config", "show", f) == 3
    out = capsys.readouterr().out
    first, rest = out.split("\n", 1)
    assert first == (f"{f}:3:15: LAI013 error: context_size: expected an integer, found string 'lots': yaml.v3 "
                     "cannot decode it into LocalAI's field, so LocalAI refuses the file")
    assert "temperature: expected a finite number, found nan" in rest
    assert "INVALID" in rest and "n_parallel" in rest and "stopwords" in rest
    assert rest.index("finite number") < rest.index("n_parallel")
    assert cli("config", "show", "--json", f) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and len(data["diagnostics"]) == 2
    assert data["params"]["n_parallel"] == {"value": 4, "source": "options"}
    assert data["params"]["sampling.top_k"] == {"value": 40, "source": "parameters"}
    assert data["params"]["sampling.temperature"]["source"] == "default (LocalAI default)"  # NaN left out


def test_select_answers_for_an_invalid_config(tmp_path: Path, wired: None, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(BAD)
    assert cli("select", f) == 3
    out = capsys.readouterr().out
    assert out.startswith(f"{f}:3:15: LAI013 error: context_size")
    assert "llamacpp" in out and "selected llamacpp variant cpu" in out and "the config is invalid" in out
    assert cli("select", "--json", f) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["chosen"]["engine"] == "llamacpp" and data["engine"] == "llamacpp"


def test_json_is_always_valid(tmp_path: Path, wired: None, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("name: m\nparameters: {model: m.gguf}\ncontext_size: lots\n"
                 "engine_args: {gpu_memory_utilization: .nan, x: -.inf}\n")
    assert cli("config", "show", "--json", f) == 3
    text = capsys.readouterr().out

    def refuse(constant: str) -> Any:
        raise AssertionError(f"bare {constant} in --json output")

    data = json.loads(text, parse_constant=refuse)
    assert data["ignored"]["gpu_memory_utilization"]["value"] == "nan"


# -- numbers ----------------------------------------------------------------------------


def test_nan_and_infinity_noted() -> None:
    # yaml.v3 decodes .nan and .inf into a float field and LocalAI passes them on: a note of this harness's
    out = [o for o in run("name: m\nparameters: {model: m.gguf, temperature: .nan, top_p: .inf}\n")
           if "finite" in o]
    assert out == [
        "m.yaml:2:42: note: parameters.temperature: expected a finite number, found nan (LocalAI passes it on; "
        "NaN and infinity are never valid settings here)",
        "m.yaml:2:55: note: parameters.top_p: expected a finite number, found inf (LocalAI passes it on; NaN "
        "and infinity are never valid settings here)"]


def test_integers_bounded() -> None:
    out = errors("name: m\nparameters: {model: m.gguf, seed: 100000000000000000000000000, "
                 "max_tokens: 10000000000000}\n")
    # an integer no Go int holds: yaml.v3 refuses the file; one above this harness's bound: passed on
    assert out == [
        "m.yaml:2:35: error: parameters.seed: 100000000000000000000000000 does not fit a 64-bit integer: "
        "yaml.v3 cannot decode it, so LocalAI refuses the file",
    ]


def test_llama_cpp_bounds_are_the_runtimes() -> None:
    text = ("name: m\nbackend: llama-cpp\ncontext_size: 100000000\nthreads: 5000\n"
            "parameters: {model: m.gguf, seed: 10000000000, max_tokens: 2000000}\noptions: [max_num_seqs:9999]\n")
    # the binding's bounds, not a refusal LocalAI's backend makes: notes (LCP005 has no reference)
    assert [o for o in run(text) if "outside what" in o] == [
        "m.yaml:3:15: note: context_size 100000000 is outside what llama.cpp takes here (0..16777216)",
        "m.yaml:4:10: note: threads 5000 is outside what llama.cpp takes here (1..4096)",
        "m.yaml:5:35: note: parameters.seed 10000000000 is outside what llama.cpp takes here (-1..4294967295)",
        "m.yaml:5:60: note: parameters.max_tokens 2000000 is outside what llama.cpp takes here (0..1048576)",
        "m.yaml:6:11: note: options n_parallel 9999 is outside what llama.cpp takes here (1..4096)",
    ]
    assert errors(text.replace("llama-cpp", "vllm").replace("options: [max_num_seqs:9999]\n", "")) == []


# -- files ------------------------------------------------------------------------------


def test_each_finding_reported_once(tmp_path: Path) -> None:
    assert run("backend: llamacpp\n") == [
        "m.yaml:1:1: note: gallery body: checked as a template (name and parameters.model come from its "
        "gallery entry)"]
    assert run("backend: llamacpp\n", template=False) == [
        "m.yaml:1:1: warning: the config is missing the required key 'name'; LocalAI loads it under the empty "
        "name, where no request can name it and the next nameless config replaces it",
        "m.yaml:1:1: error: the config is missing the required key 'parameters' (parameters.model names the "
        "model file; a gallery body gets it from its gallery entry): the backend is handed no model and fails "
        "at load",
    ]


def test_long_plain_config_is_not_an_alias_bomb() -> None:
    stops = "".join(f"  - stop word number {i} with some padding text to make it long\n" for i in range(160_000))
    text = "name: m\nparameters:\n  model: m.gguf\n  stop:\n" + stops
    assert len(text) > 10_000_000
    [item] = Validator(engines=ENGINES).validate_text(text, "m.yaml")
    assert isinstance(item, Validated) and item.diagnostics == ()


def test_size_guard_names_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "MAX_TEXT_BYTES", 100)
    assert run("name: m\n" + "#" * 200 + "\n") == [
        "m.yaml:1:1: error: file is 209 bytes, above the size limit for a model config (100 bytes, 64 MiB)"]


def test_empty_directory_is_an_error(tmp_path: Path, wired: None, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("x")
    assert cli("validate", tmp_path) == 3
    assert capsys.readouterr().out == (f"{tmp_path}:1:1: HRN016 error: no model configs here: the directory holds "
                                       "no *.yaml or *.yml file\n")
    assert cli("validate", "--json", tmp_path) == 3
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_config_show_of_a_directory(tmp_path: Path, wired: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("config", "show", tmp_path) == 2
    assert "is a directory: give one config file" in " ".join(capsys.readouterr().err.split())


def test_several_configs_are_all_named(tmp_path: Path, wired: None, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("- {name: x, parameters: {model: a.gguf}}\n- {parameters: {model: b.gguf}}\n"
                 "- {name: y, parameters: {model: c.gguf}}\n- {name: 3, parameters: {model: d.gguf}}\n")
    assert cli("config", "show", f) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds 4 configs ('x', #2 (no name), 'y', #4 (no name)); pick one with --name" in err


def test_remote_model_uris(tmp_path: Path) -> None:
    for uri in ["huggingface://org/repo/m.gguf", "oci://registry/m:tag", "ollama://gemma:2b",
                "https://example.com/m.gguf", "http://example.com/m.bin"]:
        out = run(f"name: m\nbackend: llama-cpp\nparameters: {{model: '{uri}'}}\n", tmp_path)
        assert len(out) == 1 and out[0].endswith("fetched by LocalAI, not checked here"), out
    [item] = Validator(engines=ENGINES, pm=PM).validate_text(
        "name: m\nparameters: {model: 'huggingface://o/r/m.gguf'}\n", "m.yaml")
    assert isinstance(item, Validated) and item.config is not None
    from harness.config.effective import effective

    e = effective(item.config, item.options, models_dir=tmp_path, cpus=2)
    assert e.params["model"].value == "huggingface://o/r/m.gguf"


# -- the model file behind a config -----------------------------------------------------


def test_select_refuses_a_file_that_is_not_gguf(tmp_path: Path, wired: None,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.gguf").write_bytes(bytes(range(256)) * 4)
    f = tmp_path / "c.yaml"
    f.write_text("name: m\nbackend: llamacpp\nparameters: {model: a.gguf}\n")
    assert cli("select", "--models-dir", tmp_path, f) == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "a.gguf is not a GGUF file" in out and "no engine selected" in out
    assert cli("validate", "--models-dir", tmp_path, f) == 3
    assert "parameters.model: a.gguf is not a GGUF file (it starts with" in capsys.readouterr().out


def test_select_refuses_an_architecture_the_pin_does_not_know(
        tmp_path: Path, wired: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(engine_llamacpp, "pinned_architectures", lambda: frozenset({"llama", "mamba2"}))
    tiny_gguf(tmp_path / "m.gguf", arch="mamba9")
    f = tmp_path / "c.yaml"
    f.write_text("name: m\nbackend: llamacpp\nparameters: {model: m.gguf}\n")
    assert cli("select", "--models-dir", tmp_path, f) == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "architecture 'mamba9' is not one the pinned llama.cpp loads" in out
    assert cli("validate", "--models-dir", tmp_path, f) == 3
    assert "(did you mean 'mamba2'?)" in capsys.readouterr().out
    tiny_gguf(tmp_path / "m.gguf", arch="llama")
    assert cli("select", "--models-dir", tmp_path, f) == 0


def test_architectures_are_read_from_the_pinned_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.engine.descriptor import load_engine

    src = load_engine("llamacpp").source
    arch = (tmp_path / "sources" / src.sha256 / "tree" / "pkg-1" / src.subdir / "src" / "llama-arch.cpp")
    arch.parent.mkdir(parents=True)
    arch.write_text('static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {\n'
                    '    { LLM_ARCH_LLAMA,  "llama"  },\n    { LLM_ARCH_QWEN3, "qwen3" }, // x\n};\n')
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    engine_llamacpp.pinned_architectures.cache_clear()
    try:
        assert engine_llamacpp.pinned_architectures() == frozenset({"llama", "qwen3"})
    finally:
        engine_llamacpp.pinned_architectures.cache_clear()


def test_the_real_pinned_source_when_fetched() -> None:
    engine_llamacpp.pinned_architectures.cache_clear()
    known = engine_llamacpp.pinned_architectures()
    if known is None:
        pytest.skip("the pinned llama.cpp source is not in the cache (harness fetch llamacpp)")
    assert {"llama", "qwen2", "qwen3", "bert", "gemma3"} <= known and "mamba9" not in known


def test_wheel_index_needs_a_cuda_device() -> None:
    assert config_cli.wheel_index(HOST) == (None, "none, CPU index: no CUDA device (CUDA toolkit 13.0 found)")
    with_gpu = dataclasses.replace(HOST, gpus=(GpuInfo(api="cuda", name="H200"),))
    assert config_cli.wheel_index(with_gpu) == ("cu132", "cu132")


# -- gallery templates ------------------------------------------------------------------


def test_gallery_file_body_is_checked_in_place() -> None:
    text = (CORPUS / "gallery-chatml.yaml").read_text()
    assert run(text) == ["m.yaml:7:3: note: gallery body: checked as a template (name and parameters.model "
                         "come from its gallery entry)",
                         "m.yaml:9:3: note: LocalAI keys this harness does not use: function"]
    broken = text.replace("  context_size: 4096", "  context_size: lots").replace("  f16: true", "  f61: true")
    assert [o for o in run(broken) if ": note: " not in o] == [
        "m.yaml:26:17: error: context_size: expected an integer, found string 'lots': yaml.v3 cannot decode it "
        "into LocalAI's field, so LocalAI refuses the file",
        "m.yaml:27:3: warning: unknown key 'f61': LocalAI ignores it (did you mean 'f16'?)",
    ]
    lines = broken.splitlines()
    assert lines[25].index("lots") == 16 and lines[26].index("f61") == 2


def test_template_flag_does_not_demand_name_or_model() -> None:
    body = "backend: llama-cpp\ncontext_size: 4096\nstopwords: ['<|im_end|>']\nparameters: {temperature: 0.2}\n"
    assert [o for o in run(body, template=True) if ": note: " not in o] == []
    assert [o.split(": ", 2)[2].split(" (")[0].split(";")[0] for o in run(body, template=False)
            if ": note: " not in o] == [
        "the config is missing the required key 'name'", "parameters is missing the required key 'model'"]


# -- where operators work ---------------------------------------------------------------


def test_github_annotations(tmp_path: Path, wired: None, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("name: m\nparameters: {model: m.gguf}\ncontex_size: 10\nroles: {}\n")
    assert cli("validate", "--format", "github", f) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"::warning file={f},line=3,col=1,title=harness validate LAI009::unknown key 'contex_size': LocalAI "
        "ignores it (did you mean 'context_size'?)",
        f"::notice file={f},line=4,col=1,title=harness validate HRN009::LocalAI keys this harness does not use: "
        "roles",
    ]
    assert config_cli._github_escape("a,b:c%\n", prop=True) == "a%2Cb%3Ac%25%0A"


def test_config_schema_command(wired: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("config", "schema", "--path") == 0
    path = Path(capsys.readouterr().out.strip())
    assert path == schema.SCHEMA_PATH and path.is_file()
    assert cli("config", "schema") == 0
    assert json.loads(capsys.readouterr().out) == schema.committed()


def test_pre_commit_hooks_file() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    by_id = {h["id"]: h for h in hooks}
    assert by_id["harness-validate"]["entry"] == "harness validate"
    assert by_id["harness-validate"]["language"] == "python"
    assert by_id["harness-validate-templates"]["entry"] == "harness validate --template"
    assert all(h["types"] == ["yaml"] for h in hooks)


def test_unknown_engines_from_a_failing_plugin_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> frozenset[str]:
        raise RuntimeError("boom")

    monkeypatch.setattr(validate, "known_engines_from_plugins", broken)
    # a broken plugin manager leaves the engines that have a descriptor (their schema rules apply)
    v = Validator()
    assert v.engines == validate.described_engines()
    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    assert Validator(pm=pm).engines == validate.described_engines()


def test_depth_guard_names_its_limit() -> None:
    deep = "name: m\nparameters: {model: m.gguf}\nengine_args: {x: " + "[" * 120 + "]" * 120 + "}\n"
    assert run(deep) == ["m.yaml:3:117: error: nested deeper than 100 levels (the depth limit for a model config)"]


def test_video_cli_resolves_localai_backend_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.video.target import load_target

    monkeypatch.setattr(harness.engine.plugin, "get_manager", lambda: PM)
    f = tmp_path / "c.yaml"
    f.write_text("name: c\nbackend: stablediffusion-ggml\nparameters: {model: d.gguf}\n"
                 "options: [video_vae:v.gguf, video_family:wan]\n")
    _, target = load_target(f)
    assert target is not None
    assert (target.engine, target.options.video_family) == ("sdcpp", "wan")


def test_validate_template_flag(tmp_path: Path, wired: None, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "body.yaml"
    f.write_text("backend: llama-cpp\ncontext_size: 4096\nf16: true\nstopwords: ['</s>']\n")
    assert cli("validate", "--strict", f) == 0  # recognised as a body on its own
    assert "note: gallery body: checked as a template" in capsys.readouterr().out
    assert cli("validate", "--no-template", f) == 3
    assert "missing the required key 'name'" in capsys.readouterr().out
    assert cli("validate", "--template", "--strict", f) == 0
