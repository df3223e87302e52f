"""video_options: the config schema's VideoOptions, read through the one options parser, strictly."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest

from harness.config import model, schema
from harness.config.effective import effective
from harness.config.loader import Document
from harness.config.options import config_options, parse_options, resolve_options
from harness.core.errors import ConfigError
from harness.video import target
from harness.video.options import VideoOptions, configured_canvas, video_options


def test_defaults() -> None:
    o = video_options({})
    assert (o.video_partition, o.video_width, o.video_height, o.video_num_frames, o.video_steps, o.video_fps,
            o.video_crf) == (None, None, None, 124, 50, 24.0, 18)


def test_options_list_spelling_with_string_values() -> None:
    o = video_options({
        "video_partition": "fl2va", "video_device": "cuda", "video_width": "1344",
        "video_height": "768", "video_num_frames": "124", "video_steps": "30",
        "video_fps": "25", "video_crf": "20", "video_ffmpeg": "/usr/bin/ffmpeg",
        "video_workdir": "/tmp/w", "video_encoder": "enc.gguf", "max_num_seqs": "8",
    })
    assert {k: v for k, v in dataclasses.asdict(o).items() if v is not None} == {
        "video_partition": "fl2va", "video_device": "cuda", "video_width": 1344, "video_height": 768,
        "video_num_frames": 124, "video_steps": 30, "video_fps": 25.0, "video_crf": 20,
        "ffmpeg": "/usr/bin/ffmpeg", "video_workdir": "/tmp/w", "video_encoder": "enc.gguf"}


def test_family_is_declared_by_name() -> None:
    assert video_options({"video_family": "wan"}).video_family == "wan"
    with pytest.raises(ConfigError, match="must be one of minimax-h3, wan, found 'wann'"):
        video_options({"video_family": "wann"})


@pytest.mark.parametrize(("value", "size"), [("1344x768", (1344, 768)), ("640X480", (640, 480)),
                                             (" 64 x 32 ", (64, 32))])
def test_canvas(value: str, size: tuple[int, int]) -> None:
    o = video_options({"video_canvas": value, "video_num_frames": 22})
    assert (*configured_canvas(o), o.video_num_frames) == (*size, 22)
    assert configured_canvas(video_options({"video_width": "64"})) == (64, None)


@pytest.mark.parametrize(("data", "match"), [
    ({"video_widht": 1}, "did you mean 'video_width'"),
    ({"video_partition": "ref2v"}, "did you mean 'ref2va'"),
    ({"video_device": "auto"}, "cpu, cuda, gpu"),
    ({"video_width": "wide"}, "expects an integer"),
    ({"video_width": True}, "expects an integer"),
    ({"video_crf": 60}, "must be <= 51"),
    ({"video_fps": 0}, "must be > 0"),
    ({"video_canvas": "1344x768", "video_width": 1344}, "both set the canvas"),
    ({"video_canvas": "big"}, "WIDTHxHEIGHT"),
    ({"video_canvas": [800, 600]}, "expects a string"),
])
def test_bad_options(data: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        video_options(data)


def test_other_engines_keys_and_their_problems_are_not_ours() -> None:
    o = video_options({"n_batch": "many", "tool_parser": "x", "video_steps": "3"})
    assert o.video_steps == 3


def test_frozen() -> None:
    o = video_options({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.video_crf = 1  # type: ignore[misc]


# -- one declaration: the schema, validation, config show and the pipeline read the same type -----


def _sample(spec: model.OptionSpec) -> tuple[Any, Any]:
    """An ``options:`` string for a key and the typed value it gives."""
    if spec.choices:
        return spec.choices[-1], spec.choices[-1]
    if spec.key == "video_canvas":
        return "64x32", "64x32"
    return {"int": ("7", 7), "float": ("7.5", 7.5), "bool": ("true", True)}.get(spec.kind, ("x/y.gguf", "x/y.gguf"))


def test_video_options_are_declared_once() -> None:
    assert typing.get_type_hints(target.VideoTarget)["options"] is VideoOptions is model.VideoOptions
    specs = {k: s for k, s in model.option_specs().items() if s.video}
    assert list(specs) == [f.name for f in dataclasses.fields(VideoOptions)]
    engine_args = schema.generate()["properties"]["engine_args"]["properties"]
    examples = schema.generate()["properties"]["options"]["items"]["examples"]
    for key, spec in specs.items():
        text, typed = _sample(spec)
        assert key in engine_args and any(e.startswith(f"{key}:") for e in examples), key
        # Every key the schema documents reaches the pipeline's options under its own name ...
        assert getattr(video_options({key: text}), key) == typed, key
        # ... typed as validation types it.
        resolved = parse_options({key: text})
        assert resolved.values[key].value == typed and not resolved.diagnostics, key


def test_the_video_cli_reads_what_config_show_prints() -> None:
    data = {"name": "v", "backend": "x", "parameters": {"model": "dit.gguf"},
            "options": ["video_vae:vae.gguf", "video-steps:3", "video_ffmpeg:/bin/ff"],
            "engine_args": {"video_steps": 7, "video_width": 64}}
    o = video_options(config_options(data))
    shown = effective(data, resolve_options(Document(file="c.yaml", data=data))).params
    assert (o.video_steps, o.video_width, o.ffmpeg) == (7, 64, "/bin/ff")
    assert (shown["video_steps"].value, shown["video_width"].value, shown["ffmpeg"].value) == (7, 64, "/bin/ff")


def test_one_options_parser_for_validation_the_video_cli_and_the_engine(tmp_path: Path) -> None:
    from harness.video.target import load_target, resolve_checkpoints
    from harness_plugins.sdcpp import checkpoint_set

    for name in ("dit.gguf", "vae.gguf", "umt5.gguf"):
        (tmp_path / name).write_bytes(b"x")
    config = tmp_path / "c.yaml"
    config.write_text("name: c\nbackend: sdcpp\nparameters: {model: dit.gguf}\n"
                      "options: ['video-vae: vae.gguf', 'video_steps:3']\nengine_args: {video_encoder: umt5.gguf}\n")
    loaded, resolved_target = load_target(config)
    assert resolved_target is not None, [str(d) for d in loaded.diagnostics]
    options, data = resolved_target.options, resolved_target.model
    resolved = resolve_options(Document(file=str(config), data=data))
    assert (options.video_vae, options.video_encoder, options.video_steps) == ("vae.gguf", "umt5.gguf", 3)
    assert {k: resolved.get(k) for k in ("video_vae", "video_encoder", "video_steps")} == {
        "video_vae": "vae.gguf", "video_encoder": "umt5.gguf", "video_steps": 3}
    root = tmp_path.resolve()
    assert checkpoint_set(resolve_checkpoints(resolved_target)) == {
        "diffusion_model": str(root / "dit.gguf"), "vae": str(root / "vae.gguf"),
        "text_encoder": str(root / "umt5.gguf")}
