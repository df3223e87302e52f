"""Memory-fitted GPU layers and device choice in model configs (issue 60): ``n_gpu_layers`` takes
"auto", ``device`` (fed by LocalAI's ``main_gpu``) and ``fit_target`` reach the effective parameters,
and LocalAI's integer ``gpu_layers`` refuses a word with a hint."""

from __future__ import annotations

import textwrap
from typing import Any

import jsonschema
import pytest

from harness.config import schema
from harness.config.effective import Effective, effective
from harness.config.model import OPTION_ALIASES, option_specs
from harness.config.options import convert, parameter, parse_options
from harness.config.validate import GPU_LAYERS_HINT, Validated, Validator
from harness.engine.plugin import make_manager

ENGINES = {"llamacpp", "sdcpp"}
#: The built-in plugins: each engine's own config rules run too.
PM = make_manager(autoload=False)
BASE = "name: m\nbackend: llamacpp\nparameters:\n  model: m.gguf\n"


def validated(text: str) -> Validated:
    [item] = Validator(engines=ENGINES, pm=PM).validate_text(textwrap.dedent(text), "m.yaml")
    assert isinstance(item, Validated)
    return item


def diags(text: str) -> list[str]:
    return [str(d) for d in validated(text).diagnostics]


def show(text: str) -> Effective:
    item = validated(text)
    assert item.ok and not item.diagnostics, [str(d) for d in item.diagnostics]
    assert item.config is not None
    return effective(item.config, item.options, cpus=4, engine=item.engine)


def val(text: str, key: str) -> tuple[Any, str]:
    s = show(text).params[key]
    return s.value, s.source


# -- n_gpu_layers: an integer or auto ----------------------------------------------------


@pytest.mark.parametrize(("extra", "source"), [
    ('options: ["gpu_layers:auto"]\n', "options"),
    ('options: ["n_gpu_layers:auto"]\n', "options"),
    ('options: ["n_gpu_layers: AUTO "]\n', "options"),
    ("engine_args: {n_gpu_layers: auto}\n", "engine_args"),
    ("engine_args: {gpu_layers: auto}\n", "engine_args"),
    ('gpu_layers: 10\noptions: ["gpu_layers:auto"]\n', "options"),
])
def test_auto_layers_validate_and_reach_n_gpu_layers(extra: str, source: str) -> None:
    assert val(BASE + extra, "n_gpu_layers") == ("auto", source)


def test_integer_layers_still_typed_and_ordered() -> None:
    assert val(BASE, "n_gpu_layers") == (None, "default")
    assert val(BASE + "gpu_layers: 10\n", "n_gpu_layers") == (10, "gpu_layers")
    assert val(BASE + 'gpu_layers: 10\noptions: ["gpu_layers:20"]\n', "n_gpu_layers") == (20, "options")
    assert val(BASE + 'options: ["n_gpu_layers:auto"]\nengine_args: {n_gpu_layers: -1}\n',
               "n_gpu_layers") == (-1, "engine_args")
    assert val(BASE + 'options: ["n_gpu_layers:-1"]\nengine_args: {n_gpu_layers: auto}\n',
               "n_gpu_layers") == ("auto", "engine_args")


def test_top_level_gpu_layers_auto_is_refused_with_a_hint() -> None:
    out = diags(BASE + "gpu_layers: auto\n")
    assert out == [
        "m.yaml:5:13: error: gpu_layers: expected an integer, found string 'auto': yaml.v3 cannot decode it "
        "into LocalAI's field, so LocalAI refuses the file; for layers fitted to memory write "
        "options: [gpu_layers:auto] (LocalAI passes options through)"]
    assert out[0].endswith(GPU_LAYERS_HINT)
    # the hint is gpu_layers' own: another integer field refused a word says nothing of it
    [other] = diags(BASE + "threads: auto\n")
    assert "error: threads: expected an integer" in other and "gpu_layers:auto" not in other


def test_bad_layer_words_and_bounds() -> None:
    # HRN006 warnings: LocalAI passes the option on; this harness's engine refuses the value at load
    assert diags(BASE + 'options: ["n_gpu_layers:atuo", "gpu_layers:-2", "gpu_layers:1.5"]\n') == [
        "m.yaml:5:11: warning: option n_gpu_layers expects an integer or auto, found 'atuo' (did you mean 'auto'?)",
        "m.yaml:5:32: warning: option gpu_layers must be >= -1, found -2",
        "m.yaml:5:49: warning: option gpu_layers expects an integer or auto, found '1.5'",
    ]
    assert diags(BASE + "engine_args: {n_gpu_layers: aut, gpu_layers: -2}\n") == [
        "m.yaml:5:29: warning: engine_args.n_gpu_layers: expected an integer or auto, found string 'aut' "
        "(did you mean 'auto'?)",
        "m.yaml:5:46: warning: engine_args.gpu_layers: must be >= -1, found -2",
    ]


def test_layers_spec_and_schema() -> None:
    spec = option_specs()["n_gpu_layers"]
    assert (spec.kind, spec.choices, spec.minimum) == ("int", ("auto",), -1)
    assert OPTION_ALIASES["gpu_layers"] == "n_gpu_layers"
    assert parameter("gpu_layers") == parameter("n_gpu_layers") == "n_gpu_layers"
    assert convert("x", spec, "auto") == ("auto", None)
    assert convert("x", spec, 7) == (7, None)
    assert convert("x", spec, True)[1] == "x expects an integer or auto, found True"
    prop = schema.generate()["properties"]["engine_args"]["properties"]["n_gpu_layers"]
    assert prop["type"] == ["integer", "string", "null"] and prop["pattern"] == "^(auto)$"
    check = jsonschema.Draft202012Validator(prop)
    assert check.is_valid("auto") and check.is_valid(-1) and check.is_valid(None)
    assert not check.is_valid("all") and not check.is_valid(-2) and not check.is_valid(True)
    assert "n_gpu_layers:auto" in schema.generate()["properties"]["options"]["items"]["examples"]
    # the top-level key stays LocalAI's integer
    assert schema.generate()["properties"]["gpu_layers"]["type"] == ["integer", "null"]


# -- device, and LocalAI's main_gpu ------------------------------------------------------


def test_device_from_options_main_gpu_and_engine_args() -> None:
    assert val(BASE, "device") == (None, "default")
    assert val(BASE + 'options: ["device:Vulkan0"]\n', "device") == ("Vulkan0", "options")
    assert val(BASE + "main_gpu: Vulkan0\n", "device") == ("Vulkan0", "main_gpu")
    assert val(BASE + 'main_gpu: "1"\n', "device") == ("1", "main_gpu")
    assert val(BASE + 'main_gpu: ""\n', "device") == (None, "default")  # LocalAI's default: no choice
    assert val(BASE + 'main_gpu: CUDA0\noptions: ["device:none"]\n', "device") == ("none", "options")
    # an index given as a YAML integer reaches the engine as a string, like every other spelling
    assert val(BASE + 'options: ["device:0"]\nengine_args: {device: 1}\n', "device") == ("1", "engine_args")


def test_main_gpu_is_a_used_key() -> None:
    assert parameter("main_gpu") == "device"
    # used: no "LocalAI keys this harness does not use" note names it
    assert not any("main_gpu" in d for d in diags(BASE + "main_gpu: Vulkan0\n"))
    # LocalAI's field is a string: a YAML integer is refused as every string field's is
    [out] = diags(BASE + "main_gpu: 0\n")
    assert "error: main_gpu: expected a string, found integer 0" in out


def test_device_via_parse_options() -> None:
    opts = parse_options({"device": "CUDA0", "gpu_layers": "auto", "fit_target": "512"})
    assert not opts.diagnostics
    assert (opts.get("device"), opts.get("n_gpu_layers"), opts.get("fit_target")) == ("CUDA0", "auto", 512)


# -- fit_target --------------------------------------------------------------------------


def test_fit_target_default_and_overrides() -> None:
    assert val(BASE, "fit_target") == (1024, "default")
    assert val(BASE + 'options: ["fit_target:2048"]\n', "fit_target") == (2048, "options")
    assert val(BASE + 'options: ["fit_target:2048"]\nengine_args: {fit_target: 0}\n', "fit_target") == (
        0, "engine_args")
    assert diags(BASE + 'options: ["fit_target:-1", "fit_target:lots"]\n') == [
        "m.yaml:5:11: warning: option fit_target must be >= 0, found -1",
        "m.yaml:5:28: warning: option fit_target expects an integer, found 'lots'",
    ]
    assert diags(BASE + "engine_args: {fit_target: -5}\n") == [
        "m.yaml:5:27: warning: engine_args.fit_target: must be >= 0, found -5"]
    spec = option_specs()["fit_target"]
    assert (spec.kind, spec.default, spec.minimum) == ("int", 1024, 0)


def test_all_three_reach_effective_params_together() -> None:
    e = show(BASE + 'main_gpu: Vulkan0\noptions: ["gpu_layers:auto", "fit_target:512"]\n')
    got = {k: (e.params[k].value, e.params[k].source) for k in ("n_gpu_layers", "device", "fit_target")}
    assert got == {"n_gpu_layers": ("auto", "options"), "device": ("Vulkan0", "main_gpu"),
                   "fit_target": (512, "options")}
