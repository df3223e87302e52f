"""Schema and semantic rules of model configs (SPEC.md sections 4 and 6), with exact locations."""

from __future__ import annotations

import textwrap
from pathlib import Path

import gguf
import numpy as np
import pytest

from harness.config.loader import Diagnostic
from harness.config.rules import path_problem
from harness.config.validate import Validated, Validator
from harness.engine.plugin import make_manager
from harness.families.table import get_family

ENGINES = {"llamacpp", "sdcpp"}
#: The built-in plugins: each engine's own config rules run.
PM = make_manager(autoload=False)
BASE = """\
name: m
backend: llamacpp
parameters:
  model: m.gguf
"""


def run(text: str, models_dir: Path | None = None) -> list[str]:
    v = Validator(engines=ENGINES, models_dir=models_dir, pm=PM)
    out: list[str] = []
    for item in v.validate_text(textwrap.dedent(text), "m.yaml"):
        out += [str(d) for d in (item.diagnostics if isinstance(item, Validated) else [item])]
    return out


def with_options(*items: str, extra: str = "", base: str = BASE) -> str:
    return base + "options:\n" + "".join(f"  - {i}\n" for i in items) + extra


def tiny_gguf(path: Path, arch: str = "llama") -> Path:
    """A real (tiny) GGUF file: what llama.cpp's rules read the header of."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(2048)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_minimal_config_is_clean() -> None:
    assert run(BASE) == []


def test_diagnostic_str_and_json() -> None:
    d = Diagnostic(file="a.yaml", line=3, col=5, severity="warning", message="x")
    assert str(d) == "a.yaml:3:5: warning: x"
    assert d.to_json() == {"file": "a.yaml", "line": 3, "col": 5, "severity": "warning", "message": "x"}


# -- YAML level -------------------------------------------------------------


def test_yaml_syntax_error_is_located() -> None:
    out = run("name: m\nparameters: [a\n")
    assert len(out) == 1 and out[0].startswith("m.yaml:3:1: error: invalid YAML:")


def test_empty_file() -> None:
    assert run("") == ["m.yaml:1:1: warning: empty file: LocalAI loads it as an empty config under the empty "
                       "name; a model config needs name: and parameters:"]


def test_root_must_be_mapping() -> None:
    assert run("- 1\n- 2\n")[1].startswith("m.yaml:2:3: error: a model config is a mapping")
    assert run("just text\n") == [
        "m.yaml:1:1: error: a model config is a mapping (name:, backend:, parameters: ...), "
        "found string 'just text': yaml.v3 cannot decode it, so LocalAI refuses the file"
    ]


def test_duplicate_key() -> None:
    out = run(BASE + "name: n\n")
    assert "m.yaml:5:1: error: duplicate key 'name' on lines 1 and 5: LocalAI's YAML parser (yaml.v3) refuses a mapping that gives a key twice" in out


def test_not_utf8() -> None:
    v = Validator(engines=ENGINES)
    [d] = v.validate_text(b"name: \xff\xfe\n", "m.yaml")
    assert isinstance(d, Diagnostic) and "not UTF-8" in d.message


def test_alias_bomb_is_bounded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 7)]
    out = run("\n".join(lines) + "\n")
    assert out == ["m.yaml:1:1: error: YAML aliases expand this document by more than 100000 nodes "
                   "(the alias expansion limit); write the repeated parts out or use fewer nested aliases"]


def test_list_of_configs_file() -> None:
    text = ("- " + BASE.replace("\n", "\n  ").rstrip()
            + "\n- name: m2\n  backend: llamacpp\n  parameters: {model: x.bin, top_k: 1.5}\n")
    assert run(text) == [
        "m.yaml:7:37: warning: parameters.top_k: 1.5 is not an integer; LocalAI's field is one and yaml.v3 "
        "truncates the value to 1, which LocalAI then uses"
    ]


def test_a_bin_model_is_judged_by_its_content_not_its_name(tmp_path: Path) -> None:
    # LocalAI has no extension rule when a backend is set: llama.cpp reads the file's content.
    tiny_gguf(tmp_path / "m.bin")
    (tmp_path / "w.bin").write_text("x")
    assert run(BASE.replace("m.gguf", "m.bin")) == []
    assert run(BASE.replace("m.gguf", "m.bin"), tmp_path) == []
    assert run(BASE.replace("m.gguf", "w.bin"), tmp_path) == [
        "m.yaml:4:10: error: parameters.model: w.bin is not a GGUF file (it starts with b'x', not b'GGUF')"]


# -- schema ------------------------------------------------------------------


def test_unknown_top_level_key_did_you_mean() -> None:
    assert run(BASE + "contex_size: 10\n") == [
        "m.yaml:5:1: warning: unknown key 'contex_size': LocalAI ignores it (did you mean 'context_size'?)"
    ]


def test_unknown_nested_key() -> None:
    out = run(BASE + "  temprature: 1\n")
    assert out == ["m.yaml:5:3: warning: unknown key 'temprature' in parameters: LocalAI ignores it (did you mean 'temperature'?)"]


def test_missing_required() -> None:
    assert run("name: m\n") == [
        "m.yaml:1:1: error: the config is missing the required key 'parameters' (parameters.model "
        "names the model file; a gallery body gets it from its gallery entry): the backend is handed no "
        "model and fails at load"]
    assert run("name: m\nparameters: {}\n") == [
        "m.yaml:2:13: error: parameters is missing the required key 'model' (the model file; a gallery "
        "body gets it from its gallery entry): the backend is handed no model and fails at load"
    ]


def test_type_error_message() -> None:
    assert run(BASE + "context_size: lots\n") == [
        "m.yaml:5:15: error: context_size: expected an integer, found string 'lots': yaml.v3 cannot decode "
        "it into LocalAI's field, so LocalAI refuses the file"
    ]


def test_unknown_usecase_is_dropped_with_a_warning() -> None:
    # GetUsecasesFromYAML looks up "FLAG_" + upper(value), then the value: others are dropped.
    [msg] = run(BASE + "known_usecases: [chat, embedings, FLAG_TTS, Rerank]\n")
    assert msg == ("m.yaml:5:24: warning: known_usecases[1] 'embedings' is not a use case LocalAI knows: "
                   "it drops it (did you mean 'embeddings'?)")
    assert run(BASE + "known_usecases: [flag_chat]\n")[0].startswith(
        "m.yaml:5:18: warning: known_usecases[0] 'flag_chat' is not a use case LocalAI knows")


@pytest.mark.parametrize("field", ["context_size: 0", "threads: 0", "n_draft: 0"])
def test_positive_integers(field: str) -> None:
    key = field.split(":")[0]
    # this harness's bound, not LocalAI's (it passes the value on): a note
    assert run(BASE + field + "\n")[0] == (f"m.yaml:5:{len(key) + 3}: note: {key}: must be >= 1, found 0 (this "
                                          "harness's bound: LocalAI passes the value on)")


def test_sampling_ranges() -> None:
    out = run(BASE + "  top_p: 1.5\n  temperature: -1\n")
    assert out == [
        "m.yaml:5:10: note: parameters.top_p: must be <= 1, found 1.5 (this harness's bound: LocalAI passes the "
        "value on)",
        "m.yaml:5:10: warning: parameters.top_p 1.5 is outside 0..1: llama.cpp clamps it to 1, which turns "
        "top-p sampling off",
        "m.yaml:6:16: note: parameters.temperature: must be >= 0, found -1 (this harness's bound: LocalAI "
        "passes the value on)",
    ]


def test_null_scalar_means_unset() -> None:
    assert run(BASE + "context_size:\n") == []


# -- backend -----------------------------------------------------------------


def test_backend_must_be_known() -> None:
    out = run(BASE.replace("backend: llamacpp", "backend: lama-cpp"))
    assert out == [
        "m.yaml:2:10: warning: backend 'lama-cpp' is neither an engine here nor in LocalAI 82c191afadf5's backend "
        "names (did you mean 'llama-cpp'?): LocalAI loads the config and fails only when no gallery "
        "has that backend; engines here: llamacpp, sdcpp"
    ]


def test_backend_may_be_omitted() -> None:
    assert run(BASE.replace("backend: llamacpp\n", "")) == []


# -- model path ----------------------------------------------------------------


def test_model_path_absolute_refused() -> None:
    assert run(BASE.replace("m.gguf", "/models/m.gguf")) == [
        "m.yaml:4:10: error: parameters.model must be relative to the models directory, found "
        "absolute path '/models/m.gguf'; move the file under the models directory"
    ]


@pytest.mark.parametrize("ref", ["../m.gguf", "a/../../m.gguf", ".."])
def test_model_path_escape_refused(ref: str) -> None:
    [msg] = run(BASE.replace("m.gguf", ref))
    assert msg.endswith(f"error: parameters.model {ref!r} escapes the models directory with '..'")


def test_path_problem_allows_inner_dotdot() -> None:
    assert path_problem("x", "a/../b.gguf") is None


def test_model_path_against_models_dir(tmp_path: Path) -> None:
    tiny_gguf(tmp_path / "m.gguf")
    (tmp_path / "dir-ok").mkdir()
    (tmp_path / "dir-ok" / "config.json").write_text("{}")
    (tmp_path / "dir-bad").mkdir()
    (tmp_path / "w.txt").write_text("x")
    assert run(BASE, tmp_path) == []
    assert run(BASE.replace("m.gguf", "dir-ok"), tmp_path) == []
    assert run(BASE.replace("m.gguf", "dir-bad"), tmp_path) == [
        "m.yaml:4:10: error: parameters.model 'dir-bad' is a directory without config.json; "
        "llama.cpp loads a .gguf file or a model directory with config.json"
    ]
    assert run(BASE.replace("m.gguf", "w.txt"), tmp_path) == [
        "m.yaml:4:10: error: parameters.model: w.txt is not a GGUF file (it starts with b'x', not b'GGUF')"
    ]
    assert run(BASE.replace("m.gguf", "gone.gguf"), tmp_path) == [
        f"m.yaml:4:10: error: parameters.model 'gone.gguf' not found in the models directory {tmp_path}"
    ]


def test_mmproj_must_be_gguf(tmp_path: Path) -> None:
    tiny_gguf(tmp_path / "m.gguf")
    (tmp_path / "proj.bin").write_bytes(b"x")
    assert run(BASE + "mmproj: proj.bin\n", tmp_path) == [
        "m.yaml:5:9: error: mmproj 'proj.bin' must be a .gguf file (llama.cpp's multimodal projector)"
    ]


# -- options -------------------------------------------------------------------


def test_option_without_colon() -> None:
    assert run(with_options("max_num_seqs")) == [
        "m.yaml:6:5: note: option 'max_num_seqs' is not key:value (llama.cpp options are key:value; "
        "the key ends at the first colon)"
    ]


def test_option_empty_key() -> None:
    assert run(with_options(":3")) == ["m.yaml:6:5: note: option ':3' has an empty key"]


def test_unknown_option_key_warns() -> None:
    assert run(with_options("max_num_seq:16")) == [
        "m.yaml:6:5: warning: unknown option key 'max_num_seq': ignored (it may belong to another "
        "engine) (did you mean 'max_num_seqs'?)"
    ]


def test_unknown_engine_args_key_warns() -> None:
    assert run(BASE + "engine_args:\n  gpu_memory_utilization: 0.9\n") == [
        "m.yaml:6:3: note: unknown engine_args key 'gpu_memory_utilization': ignored "
        "(it may belong to another engine)"
    ]


def test_option_typed_values() -> None:
    out = run(with_options("block_size:big", "num_blocks:0", "enable_prefix_caching:maybe",
                           "threads:1.5", "n_parallel:-2"))
    assert out == [
        "m.yaml:6:5: warning: option block_size expects an integer, found 'big'",
        "m.yaml:7:5: warning: option num_blocks must be a positive integer, found 0",
        "m.yaml:8:5: warning: option enable_prefix_caching expects true or false, found 'maybe'",
        "m.yaml:9:5: warning: option threads expects an integer, found '1.5'",
        "m.yaml:10:5: warning: option n_parallel must be a positive integer, found -2",
    ]


def test_scheduling_policy() -> None:
    assert run(with_options("scheduling_policy:priority")) == []
    assert run(with_options("scheduling_policy:fifo")) == [
        "m.yaml:6:5: warning: option scheduling_policy must be one of fcfs, priority, lpm, found 'fifo'"
    ]
    assert run(BASE + "engine_args: {scheduling_policy: lmp}\n") == [
        "m.yaml:5:34: warning: engine_args.scheduling_policy: expected one of fcfs, priority, lpm, "
        "found string 'lmp' (did you mean 'lpm'?)"
    ]


def test_json_options_must_parse() -> None:
    assert run(with_options('speculative_config:{"method":"mtp","num_speculative_tokens":2}',
                            'kv_transfer_config:{"kv_connector":"LMCacheConnectorV1"}')) == []
    assert run(with_options('speculative_config:{"method":mtp}')) == [
        "m.yaml:6:5: warning: option speculative_config is not valid JSON: Expecting value at column 11"
    ]
    assert run(with_options("kv_transfer_config:[1]")) == [
        "m.yaml:6:5: warning: option kv_transfer_config must be a JSON object, found list"
    ]


def test_dotted_nested_keys() -> None:
    assert run(with_options("sampling.top_k:40", "sampling.temperature:0.2")) == []
    assert run(with_options("sampling.topk:40")) == [
        "m.yaml:6:5: warning: unknown option key 'sampling.topk': ignored (did you mean 'sampling.top_k'?)"
    ]
    assert run(with_options("sampling.top_k:many")) == [
        "m.yaml:6:5: warning: option sampling.top_k expects an integer, found 'many'"
    ]


def test_option_given_twice_warns() -> None:
    assert run(with_options("block_size:16", "block_size:64")) == [
        "m.yaml:7:5: warning: option block_size is given twice; this later value wins"
    ]


def test_video_device_auto_refused() -> None:
    [msg] = [m for m in run(with_options("video_device:auto")) if "video_device" in m]
    assert msg == ("m.yaml:6:5: warning: option video_device must be one of cpu, cuda, gpu, found "
                   "'auto'; there is no automatic choice")


# -- draft model -----------------------------------------------------------------


def test_draft_model_resolution(tmp_path: Path) -> None:
    tiny_gguf(tmp_path / "m.gguf")
    (tmp_path / "Qwen3-0.6B").mkdir()
    (tmp_path / "org" / "Draft").mkdir(parents=True)
    assert run(BASE + "draft_model: some/where/Qwen3-0.6B\n", tmp_path) == []
    assert run(BASE + "draft_model: org/Draft\n", tmp_path) == []
    assert run(BASE + f"draft_model: {tmp_path / 'Qwen3-0.6B'}\n", tmp_path) == []
    assert run(BASE + "draft_model: org/Missing\n", tmp_path) == [
        f"m.yaml:5:14: error: draft model 'org/Missing' not found; looked in: org/Missing, "
        f"{tmp_path / 'Missing'}, {tmp_path / 'org/Missing'}"
    ]


def test_draft_in_speculative_config(tmp_path: Path) -> None:
    tiny_gguf(tmp_path / "m.gguf")
    out = run(with_options('speculative_config:{"method":"dflash","model":"z/dr"}'), tmp_path)
    assert out == [
        f"m.yaml:6:5: error: draft model 'z/dr' not found; looked in: z/dr, {tmp_path / 'dr'}, "
        f"{tmp_path / 'z/dr'}"
    ]


# -- video (the stable-diffusion.cpp plugin applies the config's video family) ------------

VIDEO_BASE = BASE.replace("backend: llamacpp", "backend: sdcpp")
VIDEO = [
    "video_family:minimax-h3", "video_encoder:h3/enc.gguf", "video_tokenizer:h3/tokenizer.json",
    "video_vae:h3/vae.safetensors", "audio_vae:h3/audio.safetensors", "video_partition:fl2va",
]


def video(*items: str) -> list[str]:
    """The family's findings (the sdcpp engine renders wan only: a minimax-h3 set also gets HRN019, below)."""
    return [o for o in run(with_options(*items, base=VIDEO_BASE)) if "engine renders the wan family, not" not in o]


def test_a_family_the_engine_cannot_render_is_reported_in_video_checks_words() -> None:
    from harness.config import refs
    from harness.families.table import get_family, render_refusal

    [item] = Validator(engines=ENGINES, pm=PM).validate_text(with_options(*VIDEO, base=VIDEO_BASE), "m.yaml")
    assert isinstance(item, Validated)
    [d] = [d for d in item.diagnostics if d.code == "HRN019"]
    # the words video check, select and serve refuse it with; a warning (LocalAI loads it), a refusal here
    assert d.message == render_refusal("sdcpp", get_family("minimax-h3"), PM)
    assert (d.severity, d.line) == ("warning", 6) and refs.refused_here("HRN019")


def test_video_full_set_is_clean() -> None:
    assert video(*VIDEO) == []


def test_video_needs_both_vaes() -> None:
    out = video(*[o for o in VIDEO if not o.startswith("audio_vae")])
    assert out == ["m.yaml:5:1: warning: video options need audio_vae (the minimax-h3 family): both the "
                   "video and the audio VAE are required"]


def test_video_needs_encoder_or_embeds() -> None:
    opts = [o for o in VIDEO if not o.startswith(("video_encoder", "video_tokenizer"))]
    assert video(*opts) == [
        "m.yaml:5:1: warning: video options need video_encoder or video_prompt_embeds to condition on a "
        "prompt (the minimax-h3 family)"
    ]
    assert video(*opts, "video_prompt_embeds:h3/embeds.bin") == []


def test_video_encoder_needs_tokenizer() -> None:
    out = video(*[o for o in VIDEO if not o.startswith("video_tokenizer")])
    assert out == ["m.yaml:7:5: warning: video_encoder needs video_tokenizer (the encoder's tokenizer.json)"]


def test_video_partition_undeclared_warns() -> None:
    out = video(*VIDEO[:-1])
    assert out == ["m.yaml:5:1: warning: video_partition is not declared; assuming fl2va (the FL2VA and "
                   "Ref2VA checkpoints cannot be told apart: declare video_partition:fl2va or ref2va)"]
    assert video(*VIDEO[:-1], "video_partition:t2vx")[0].endswith(
        "warning: option video_partition must be one of t2va, fl2va, ref2va, found 't2vx' "
        "(did you mean 't2va'?)")


def test_video_grids_warn_with_engine_value() -> None:
    out = video(*VIDEO, "video_width:1000", "video_height:768", "video_num_frames:100")
    assert out == [
        "m.yaml:12:5: warning: video_width 1000 is not on the minimax-h3 family's 32-pixel grid; "
        "the engine will use 992",
        "m.yaml:14:5: warning: video_num_frames 100 is not on the 17n+5 grid (minimax-h3); "
        "the engine will use 107",
    ]
    assert video(*VIDEO, "video_canvas:1350x768") == [
        "m.yaml:12:5: warning: video_canvas width 1350 is not on the minimax-h3 family's 32-pixel grid; "
        "the engine will use 1344"
    ]


def test_wan_family_is_the_engines_default() -> None:
    """stable-diffusion.cpp renders Wan: 4n+1 frames, a 16-pixel grid up, no audio, no encoder needed."""
    assert video("video_vae:wan/vae.safetensors", "video_num_frames:81", "video_width:832") == []
    out = video("video_vae:wan/vae.safetensors", "audio_vae:wan/audio.safetensors",
                "video_num_frames:22", "video_width:100")
    assert out == [
        "m.yaml:7:5: warning: audio_vae is not used: the wan family renders no audio (the MP4 is video-only)",
        "m.yaml:8:5: warning: video_num_frames 22 is not on the 4n+1 grid (wan); the engine will use 25",
        "m.yaml:9:5: warning: video_width 100 is not on the wan family's 16-pixel grid; the engine will use 112",
    ]
    assert video("video_encoder:wan/umt5.gguf") == [
        "m.yaml:5:1: warning: video options need video_vae (the wan family): it is required"]
    assert video("video_vae:v.gguf", "video_partition:ref2va") == [
        "m.yaml:7:5: warning: video_partition ref2va is not one of the wan family's: t2va, fl2va"]


def test_unknown_video_family() -> None:
    [msg] = video(*VIDEO[1:], "video_family:minimax")  # no family: no family rules
    assert msg == ("m.yaml:11:5: warning: option video_family must be one of minimax-h3, wan, found "
                   "'minimax' (did you mean 'minimax-h3'?)")


def test_video_rules_are_the_video_engines_only() -> None:
    """A text engine's config with video_* keys gets no video family rules (only typing), and the
    refusal select makes of it (the engine renders no video family), in select's words."""
    assert run(with_options("video_vae:v.gguf")) == [
        "m.yaml:2:10: warning: the llamacpp engine renders no video family (its plugin states none)"]


def test_grid_helpers() -> None:
    h3, wan = get_family("minimax-h3"), get_family("wan")
    assert [h3.align_frames(n) for n in (1, 5, 6, 22, 23, 124, 125)] == [5, 5, 22, 22, 39, 124, 141]
    assert [h3.align_side(n) for n in (1344, 1000, 31, 768)] == [1344, 992, 32, 768]
    assert [wan.align_frames(n) for n in (1, 5, 6, 81, 82)] == [1, 5, 9, 81, 85]
    assert [wan.align_side(n) for n in (832, 100, 1)] == [832, 112, 16]


def test_video_vae_config_defaults_beside_weights(tmp_path: Path) -> None:
    files = ["m.gguf", "h3/enc.gguf", "h3/tokenizer.json", "h3/vae.safetensors", "h3/audio.safetensors"]
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_bytes(b"x")
    assert [o for o in run(with_options(*VIDEO, base=VIDEO_BASE), tmp_path) if "renders the wan" not in o] == [
        f"m.yaml:9:5: warning: video_vae_config is not set and there is no config.json beside video_vae "
        f"(looked at {tmp_path / 'h3/config.json'})",
        f"m.yaml:10:5: warning: audio_vae_config is not set and there is no config.json beside audio_vae "
        f"(looked at {tmp_path / 'h3/config.json'})",
    ]
    (tmp_path / "h3" / "config.json").write_text("{}")
    assert [o for o in run(with_options(*VIDEO, base=VIDEO_BASE), tmp_path) if "renders the wan" not in o] == []


def test_video_paths_refused_outside_models_dir() -> None:
    out = video(*VIDEO, "video_vae_config:../x.json")
    assert out == ["m.yaml:12:5: error: video_vae_config '../x.json' escapes the models directory with '..'"]


def test_video_usecase_without_video_options_is_a_coverage_note() -> None:
    # LocalAI's backend renders from its own options; only this harness's engine needs video_*.
    assert run(VIDEO_BASE + "known_usecases: [video]\n") == [
        "m.yaml:5:17: note: known_usecases includes video but no video_* option names the "
        "checkpoint set (video_vae, ...) that this harness's stable-diffusion.cpp engine renders from"
    ]


# -- files and directories -----------------------------------------------------------


def test_validate_paths_walks_directories(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(BASE)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yml").write_text(BASE.replace("name: m", "name: m"))
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "c.yaml").write_text("broken: [")
    (tmp_path / "notes.txt").write_text("x")
    report = Validator(engines=ENGINES).validate_paths([tmp_path, tmp_path / "nope.yaml"])
    assert report.files == 2 and report.configs == 2
    # LocalAI loads one models directory, not its subdirectories: the same name in sub/ is no clash
    assert [str(d) for d in report.diagnostics] == [
        f"{tmp_path / 'nope.yaml'}:1:1: error: no such file or directory",
    ]
    assert report.exit_code() == 1


def test_a_name_used_twice_in_one_directory_is_a_warning(tmp_path: Path) -> None:
    # LoadModelConfigsFromPath puts each file's config in a map by name: the file read last wins
    # and LocalAI says nothing, so the file is accepted but one config is lost
    (tmp_path / "a.yaml").write_text(BASE)
    (tmp_path / "b.yaml").write_text(BASE)
    report = Validator(engines=ENGINES).validate_paths([tmp_path])
    assert [str(d) for d in report.diagnostics] == [
        f"{tmp_path / 'b.yaml'}:1:7: warning: model name 'm' is already used at {tmp_path / 'a.yaml'}:1:7: "
        "LocalAI loads both and keeps the one it reads last (files in name order), dropping the other "
        "without a word"]
    assert report.exit_code() == 0 and report.exit_code(strict=True) == 1


def test_a_second_yaml_document_is_dropped() -> None:
    # yaml.v3's Unmarshal decodes the first document of its input: LocalAI loads it and drops the second
    out = run(BASE + "---\n" + BASE.replace("name: m", "name: n"))
    assert [o for o in out if ": warning: " in o] == [
        "m.yaml:6:1: warning: YAML document 2 of this file is never loaded: LocalAI reads a config file "
        "with yaml.v3's Unmarshal, which decodes the first document only; give it a file of its own, "
        "or make the file a list of configs"]


def test_engines_default_comes_from_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.config.validate as validate

    monkeypatch.setattr(validate, "described_engines", lambda: frozenset())
    monkeypatch.setattr(validate, "known_engines_from_plugins", lambda: frozenset({"x"}))
    assert Validator().engines == frozenset({"x"})

    def broken() -> frozenset[str]:
        raise RuntimeError("plugin import failed")

    monkeypatch.setattr(validate, "known_engines_from_plugins", broken)
    assert Validator().engines == frozenset()


def test_an_engine_with_a_descriptor_is_known_before_its_plugin(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    import harness.config.validate as validate

    engines = tmp_path / "engines"
    (engines / "tiny").mkdir(parents=True)
    (engines / "tiny" / "engine.yaml").write_text("name: tiny\n")
    monkeypatch.setenv("HARNESS_ENGINES_PATH", str(engines))
    monkeypatch.setattr(validate, "known_engines_from_plugins", lambda: frozenset({"x"}))
    assert Validator().engines >= {"x", "tiny"}
    text = "name: m\nbackend: tiny\nparameters:\n  model: m.gguf\n"

    def diags() -> list[str]:
        return [str(d) for item in Validator().validate_text(text, "m.yaml")
                for d in (item.diagnostics if isinstance(item, Validated) else [item])]

    assert not [d for d in diags() if ": error: " in d]
    monkeypatch.delenv("HARNESS_ENGINES_PATH")
    assert any("backend 'tiny' is neither an engine here" in d for d in diags())


def test_plugin_config_checks_add_located_diagnostics() -> None:
    import pluggy

    from harness.config.model import ModelConfig
    from harness.config.refs import Rule, register
    from harness.config.rules import CheckContext
    from harness.engine import hookspec
    from harness.engine.registry import EngineImpl

    hookimpl = pluggy.HookimplMarker("harness")

    def no_big_context(config: ModelConfig, context: CheckContext) -> list[Diagnostic]:
        if (config.context_size or 0) > 4096:
            # an engine's finding is its rule's: registered with the source line that makes it true
            register(Rule(code="TST001", severity="warning", source="example/engine@abc src/ctx.c:1",
                          summary="context above 4096"))
            return [context.document.diag(("context_size",), "warning", "context above 4096", code="TST001")]
        return []

    def boom(config: ModelConfig, context: CheckContext) -> list[Diagnostic]:
        raise RuntimeError("boom")

    class NoBigContext:
        @hookimpl
        def harness_engine_register(self) -> list[EngineImpl]:
            return [EngineImpl(name="llamacpp", config_check=no_big_context)]

    class Raises:  # registered later: replaces the engine of the same name
        @hookimpl
        def harness_engine_register(self) -> list[EngineImpl]:
            return [EngineImpl(name="llamacpp", config_check=boom)]

    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    pm.register(NoBigContext())
    v = Validator(engines=ENGINES, pm=pm)
    [item] = v.validate_text(BASE + "context_size: 8192\n", "m.yaml")
    assert isinstance(item, Validated)
    assert [str(d) for d in item.diagnostics] == ["m.yaml:5:15: warning: context above 4096"]
    pm.register(Raises())
    [item] = v.validate_text(BASE, "m.yaml")
    assert isinstance(item, Validated)
    assert [str(d) for d in item.diagnostics] == [
        "m.yaml:1:1: warning: the llamacpp plugin's config check failed with RuntimeError: boom; the config was "
        "not checked by it. Fix what the error names (a model file it could not read) or report the plugin bug"
    ]
