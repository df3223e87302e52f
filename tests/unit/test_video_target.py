"""One resolution of a video config (config -> engine -> family), asked by check, generate, select,
validate and config show alike; an engine renders only the families it states."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.cli
from harness.config.effective import load_config_file
from harness.config.select import select_engine
from harness.config.video_rules import family_refusal
from harness.core.errors import ConfigError
from harness.core.types import HostInfo
from harness.engine.plugin import make_manager
from harness.families.table import get_family
from harness.video.target import load_target, resolve_checkpoints, resolve_target

from .video_engines import FamilyEngine, manager

HOST = HostInfo(os="linux", arch="x86_64", cpu_model="test", microarch="x86_64_v3", simd=("avx2",),
                cores=8, memory_bytes=16 << 30)
SDCPP = "sdcpp"
#: The MiniMax-H3 checkpoint set (SPEC section 6) declared for stable-diffusion.cpp, which renders Wan only.
H3_FOR_SDCPP = f"""\
name: h3
backend: {SDCPP}
known_usecases: [video]
parameters:
  model: h3/dit.gguf
options:
  - video_family:minimax-h3
  - video_partition:fl2va
  - video_vae:h3/vae.safetensors
  - audio_vae:h3/audio_vae.safetensors
  - video_prompt_embeds:h3/embeds.bin
"""
WAN_FOR_SDCPP = f"""\
name: wan
backend: {SDCPP}
known_usecases: [video]
parameters:
  model: wan/dit.gguf
options:
  - video_vae:wan/vae.gguf
"""


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_select_refuses_a_family_the_engine_does_not_render(tmp_path: Path) -> None:
    pm = make_manager(autoload=False)
    sel = select_engine(load_config_file(_config(tmp_path, H3_FOR_SDCPP)).validated.config,  # type: ignore[union-attr]
                        HOST, pm=pm)
    assert sel.chosen is None
    assert sel.reason.startswith(f"backend '{SDCPP}' rejects this model: the {SDCPP} engine renders the "
                                 "wan family, not minimax-h3 (17n+5 frames, with audio)")
    ok = select_engine(load_config_file(_config(tmp_path, WAN_FOR_SDCPP)).validated.config,  # type: ignore[union-attr]
                       HOST, pm=pm)
    assert ok.chosen is not None and ok.chosen.engine == SDCPP


def test_harness_select_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path, H3_FOR_SDCPP)
    # the config itself is refused (validate's HRN019, in the same words): a config error, not "no engine here"
    assert harness.cli.main(["select", str(path)]) == ConfigError.exit_code
    out = " ".join(capsys.readouterr().out.split())
    assert "renders the wan family, not minimax-h3" in out


def test_video_check_stops_on_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path, H3_FOR_SDCPP)
    (tmp_path / "r.json").write_text('{"prompt": "p"}')
    # one verdict per file: the loaded config carries the refusal (validate's HRN019) and nothing is planned
    loaded, target = load_target(path)
    assert target is None
    assert any("renders the wan family, not minimax-h3" in d.message for d in loaded.refusals)
    # video check exits as for any config it refuses (1), naming the refusal in validate's words
    assert harness.cli.main(["video", "check", str(path), str(tmp_path / "r.json")]) == 1
    captured = capsys.readouterr()
    assert "renders the wan family, not minimax-h3" in " ".join((captured.out + captured.err).split())


def test_resolve_target_refuses_it_and_resolves_the_family_once() -> None:
    pm = make_manager(autoload=False)
    with pytest.raises(ConfigError, match="renders the wan family, not minimax-h3"):
        resolve_target(SDCPP, {"video_family": "minimax-h3"}, pm=pm)
    target = resolve_target(SDCPP, {}, pm=pm)
    wan = get_family("wan")
    assert target.family == wan
    opts = target.options
    assert (opts.video_num_frames, opts.video_steps, opts.video_fps) == (wan.frames, wan.steps, wan.fps)
    assert target.limits.max_seed == 2**63 - 1  # the engine's own limits
    # an explicit value wins over the family's default
    assert resolve_target(SDCPP, {"video_num_frames": "9"}, pm=pm).options.video_num_frames == 9


def test_engines_state_their_families() -> None:
    pm = manager(FamilyEngine("h3", "minimax-h3"), FamilyEngine("w", "wan"))
    assert family_refusal("h3", None, pm) is None
    assert family_refusal("h3", "wan", pm) == (
        "the h3 engine renders the minimax-h3 family, not wan (4n+1 frames); declare "
        "video_family:minimax-h3 for a minimax-h3 checkpoint set, or serve this one with an engine "
        "that renders its family")
    assert family_refusal("w", "wan", pm) is None
    assert family_refusal("not-registered", "wan", pm) is None  # the render says no plugin renders it


def test_config_show_prints_the_familys_defaults(tmp_path: Path) -> None:
    eff = load_config_file(_config(tmp_path, WAN_FOR_SDCPP)).resolve()
    assert eff is not None
    target = resolve_target(SDCPP, {})
    assert eff.params["video_num_frames"].value == target.options.video_num_frames == 81
    assert eff.params["video_steps"].value == target.options.video_steps == 30
    assert eff.params["video_family"].value == target.family.name == "wan"


def test_checkpoints_resolve_inside_the_models_directory(tmp_path: Path) -> None:
    models, outside = tmp_path / "models", tmp_path / "outside"
    (models / "wan").mkdir(parents=True)
    outside.mkdir()
    (models / "wan" / "dit.gguf").write_bytes(b"x")
    (outside / "vae.gguf").write_bytes(b"x")
    (models / "wan" / "vae.gguf").symlink_to(outside / "vae.gguf")
    model = {"parameters": {"model": "wan/dit.gguf"}, "options": ["video_vae:wan/vae.gguf"]}
    target = resolve_target(SDCPP, model=model, models_dir=models)
    with pytest.raises(ConfigError) as e:
        resolve_checkpoints(target)
    assert str(e.value).startswith(f"config key 'video_vae': 'wan/vae.gguf' is outside the models directory {models}")
    for ref in ("../outside/vae.gguf", str(outside / "vae.gguf"), "../outside/nothing.gguf", "/etc/passwd"):
        model = {"parameters": {"model": "wan/dit.gguf"}, "options": [f"video_vae:{ref}"]}
        with pytest.raises(ConfigError, match="is outside the models directory"):
            resolve_checkpoints(resolve_target(SDCPP, model=model, models_dir=models))
    inside = {"parameters": {"model": str(models / "wan" / "dit.gguf")}, "options": ["video_vae:wan/dit.gguf"]}
    assert resolve_checkpoints(resolve_target(SDCPP, model=inside, models_dir=models)) == {
        "parameters.model": models / "wan" / "dit.gguf", "video_vae": models / "wan" / "dit.gguf"}
