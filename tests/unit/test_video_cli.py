"""``harness video check`` and ``harness video generate`` through their argparse wiring."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import video as cli
from harness.core.errors import ConfigError, UsageError, VideoError
from harness.families.table import get_family
from harness.video.ffmpeg import resolve_ffmpeg
from harness.video.mux import probe

from .video_engines import FamilyEngine, install

CONFIG = """\
name: h3
backend: fake
known_usecases: [video]
parameters:
  model: dit.gguf
options:
  - video_partition:fl2va
  - video_width:64
  - video_height:32
  - video_num_frames:5
  - video_steps:2
  - video_encoder:enc.gguf
  - max_num_seqs:4
"""
#: A Wan config that sets no frame count, steps or fps: the family's defaults apply.
WAN_CONFIG = """\
name: wan
backend: fake-wan
known_usecases: [video]
parameters:
  model: dit.gguf
options:
  - video_vae:vae.gguf
  - video_width:32
  - video_height:32
"""
ENGINES = {"h3.yaml": "fake", "wan.yaml": "fake-wan"}


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> dict[str, FamilyEngine]:
    found = {"fake": FamilyEngine("fake", "minimax-h3"), "fake-wan": FamilyEngine("fake-wan", "wan")}
    install(monkeypatch, *found.values())
    return found


@pytest.fixture
def run(engines: dict[str, FamilyEngine], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> Callable[..., int]:
    try:
        resolve_ffmpeg(None)
    except Exception as e:
        pytest.skip(f"no ffmpeg: {e}")
    monkeypatch.delenv("HARNESS_MODELS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h3.yaml").write_text(CONFIG)
    (tmp_path / "wan.yaml").write_text(WAN_CONFIG)
    for name in ("dit.gguf", "enc.gguf", "vae.gguf"):
        (tmp_path / name).write_bytes(b"x")
    parser = argparse.ArgumentParser(prog="harness")
    cli.register(parser.add_subparsers(dest="command"))

    def go(*argv: str) -> int:
        args = parser.parse_args(list(argv))
        return int(args.func(args))

    return go


def test_check_ok_json(run: Callable[..., int], tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "req.json").write_text(json.dumps({"prompt": "p", "num_frames": 100}))
    assert run("video", "check", "h3.yaml", "req.json", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["engine"] == "fake"
    plan = out["plan"]
    assert (plan["width"], plan["height"], plan["num_frames"], plan["steps"]) == (64, 32, 107, 2)
    assert any("17n+5" in w for w in plan["warnings"])


def test_check_text(run: Callable[..., int], tmp_path: Path,
                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "req.json").write_text(json.dumps({"prompt": "p", "cfg_scale": 3}))
    assert run("video", "check", "h3.yaml", "req.json") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: cfg_scale is ignored" in err and "ok: minimax-h3 fl2va 64x32" in err


def test_check_resolves_request_paths_against_its_directory(
        run: Callable[..., int], tmp_path: Path) -> None:
    sub = tmp_path / "reqs"
    sub.mkdir()
    (sub / "req.json").write_text(json.dumps({"prompt": "p", "start_image": "missing.png"}))
    with pytest.raises(VideoError, match=str(sub / "missing.png")):
        run("video", "check", "h3.yaml", "reqs/req.json")


def test_check_refuses_unknown_keys(run: Callable[..., int], tmp_path: Path) -> None:
    (tmp_path / "req.json").write_text(json.dumps({"prompt": "p", "ref_imag": "x"}))
    with pytest.raises(VideoError, match="did you mean 'ref_image'"):
        run("video", "check", "h3.yaml", "req.json")


def test_check_bad_json(run: Callable[..., int], tmp_path: Path) -> None:
    (tmp_path / "req.json").write_text("{")
    with pytest.raises(VideoError, match="not valid JSON"):
        run("video", "check", "h3.yaml", "req.json")


def test_generate_json(run: Callable[..., int], tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    assert run("video", "generate", "h3.yaml", "--prompt", "a kite", "--seed", "9",
               "-o", "out.mp4", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == "out.mp4" and (tmp_path / "out.mp4").is_file()
    assert (out["width"], out["height"], out["frames"], out["seed"]) == (64, 32, 5, 9)
    assert out["audio_codecs"] == ["aac"]  # minimax-h3 renders audio


def test_generate_needs_a_prompt(run: Callable[..., int]) -> None:
    with pytest.raises(UsageError, match="--prompt"):
        run("video", "generate", "h3.yaml")


def test_bare_video_prints_help(run: Callable[..., int], capsys: pytest.CaptureFixture[str]) -> None:
    assert run("video") == 2
    assert "generate" in capsys.readouterr().out


# -- one resolution: the family's grid and defaults, in check and generate alike ----------


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_wan_check_plans_4n_plus_1_and_generate_renders_that_count(
        run: Callable[..., int], engines: dict[str, FamilyEngine], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "req.json").write_text(json.dumps({"prompt": "p", "num_frames": 22, "seed": 1}))
    assert run("video", "check", "wan.yaml", "req.json", "--json") == 0
    plan = _json(capsys)["plan"]
    # Wan's grid (4n+1: 22 -> 25), not MiniMax-H3's 17n+5 (22); Wan's defaults, not the default family's.
    assert (plan["family"], plan["num_frames"], plan["steps"], plan["fps"]) == ("wan", 25, 30, 16.0)
    assert plan["audio_track"] is False
    assert any("4n+1" in w for w in plan["warnings"])
    assert run("video", "check", "wan.yaml", "req.json") == 0
    assert "ok: wan fl2va 32x32 (options), 25 frames at 16 fps" in " ".join(capsys.readouterr().err.split())
    assert run("video", "generate", "wan.yaml", "--request", "req.json", "-o", "w.mp4", "--json") == 0
    out = _json(capsys)
    assert json.dumps(out["plan"]) == json.dumps(plan)
    assert [j.num_frames for j in engines["fake-wan"].jobs] == [25]
    info = probe(resolve_ffmpeg(None), tmp_path / "w.mp4")
    assert (info.frames, info.width, info.height, info.audio_codecs) == (25, 32, 32, ())
    assert info.duration == pytest.approx(25 / 16, abs=1 / 16)


def test_wan_defaults_when_the_request_sets_none(run: Callable[..., int], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "req.json").write_text(json.dumps({"prompt": "p"}))
    assert run("video", "check", "wan.yaml", "req.json", "--json") == 0
    plan = _json(capsys)["plan"]
    wan = get_family("wan")
    assert (plan["num_frames"], plan["steps"], plan["fps"]) == (wan.frames, wan.steps, wan.fps) == (81, 30, 16)
    assert run("video", "check", "h3.yaml", "req.json", "--json") == 0
    assert _json(capsys)["plan"]["num_frames"] == 5  # the config's own, on 17n+5


REQUESTS = st.fixed_dictionaries(
    {"prompt": st.just("a kite"), "seed": st.integers(0, 2**31 - 1)},
    optional={"num_frames": st.integers(1, 45), "width": st.integers(8, 80), "height": st.integers(8, 80),
              "steps": st.integers(1, 3), "crf": st.integers(0, 51)})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.sampled_from(sorted(ENGINES)), request=REQUESTS)
def test_the_plan_check_prints_is_the_plan_generate_renders(
        run: Callable[..., int], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        config: str, request: dict[str, Any]) -> None:
    family = get_family({"h3.yaml": "minimax-h3", "wan.yaml": "wan"}[config])
    (tmp_path / "req.json").write_text(json.dumps(request))
    out = tmp_path / "gen.mp4"
    out.unlink(missing_ok=True)
    try:
        run("video", "check", config, "req.json", "--json")
    except VideoError as refused:
        # A request check refuses, generate refuses with the same words, rendering nothing.
        with pytest.raises(VideoError) as again:
            run("video", "generate", config, "--request", "req.json", "-o", str(out), "--json")
        assert str(again.value) == str(refused) and not out.exists()
        capsys.readouterr()
        return
    checked = _json(capsys)["plan"]
    assert run("video", "generate", config, "--request", "req.json", "-o", str(out), "--json") == 0
    rendered = _json(capsys)
    assert json.dumps(rendered["plan"]) == json.dumps(checked)  # byte for byte
    asked = request.get("num_frames", 5 if family.name == "minimax-h3" else family.frames)
    assert checked["num_frames"] == family.align_frames(asked)
    assert checked["family"] == family.name and checked["audio_track"] is family.audio
    assert checked["width"] % family.pixel_grid == 0 and checked["height"] % family.pixel_grid == 0
    info = probe(resolve_ffmpeg(None), out)
    assert (info.frames, info.width, info.height) == (checked["num_frames"], checked["width"], checked["height"])
    assert info.audio_codecs == (("aac",) if family.audio else ())
    assert abs(info.duration - checked["num_frames"] / checked["fps"]) <= 1 / checked["fps"]


# -- the config through validate's path: an invalid config renders nothing ----------------


@pytest.mark.parametrize(("edit", "where"), [
    (("  - video_steps:2\n", "  - video_steps:0\n"), "h3.yaml:11:"),       # a video value out of range
    (("  model: dit.gguf\n", "  model: dit.gguf\n  temperature: hot\n"), "h3.yaml:6:16:"),  # a type error
    (("parameters:\n  model: dit.gguf\n", "parameters:\n  model: /etc/passwd\n"), "h3.yaml:5:"),  # absolute
])
def test_an_invalid_config_stops_every_video_command_with_located_diagnostics(
        run: Callable[..., int], engines: dict[str, FamilyEngine], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], edit: tuple[str, str], where: str) -> None:
    (tmp_path / "h3.yaml").write_text(CONFIG.replace(*edit))
    (tmp_path / "req.json").write_text(json.dumps({"prompt": "p"}))
    assert run("video", "check", "h3.yaml", "req.json") == 1
    captured = capsys.readouterr()
    # LocalAI's refusal is an error; this harness's engine's (video_steps:0) a warning validate prints alike
    assert where in captured.out and (": error: " in captured.out or ": warning: " in captured.out)
    assert "nothing is planned or rendered" in captured.err
    assert run("video", "generate", "h3.yaml", "--prompt", "p", "-o", "x.mp4") == 1
    assert where in capsys.readouterr().out
    assert run("video", "check", "h3.yaml", "req.json", "--json") == 1
    doc = _json(capsys)
    assert doc["ok"] is False and any(d["severity"] in ("error", "warning") for d in doc["diagnostics"])
    assert engines["fake"].jobs == [] and not (tmp_path / "x.mp4").exists()


@pytest.mark.parametrize("text", [
    "name: x\nbackend: fake\nparameters: {model: dit.gguf}\noptions: ['video_family:minimax']\n",
    "name: x\nbackend: fake\nparameters: {model: dit.gguf, top_k: many}\n",
    "- a\n",                                                  # not a mapping
    "a: [\n",                                                 # not YAML
])
def test_configs_validate_rejects_are_not_rendered(run: Callable[..., int], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str], text: str) -> None:
    (tmp_path / "c.yaml").write_text(text)
    assert run("video", "generate", "c.yaml", "--prompt", "p", "-o", "x.mp4") == 1
    assert "c.yaml:" in capsys.readouterr().out and not (tmp_path / "x.mp4").exists()


def test_a_misspelled_video_option_is_refused_not_defaulted(run: Callable[..., int], tmp_path: Path) -> None:
    # validate warns (the key may be another engine's); a render would silently use the default.
    (tmp_path / "c.yaml").write_text("name: x\nbackend: fake\nparameters: {model: dit.gguf}\n"
                                     "options: ['video_widht:3']\n")
    with pytest.raises(ConfigError, match="did you mean 'video_width'"):
        run("video", "generate", "c.yaml", "--prompt", "p", "-o", "x.mp4")


def test_a_valid_config_without_a_backend_names_no_engine(run: Callable[..., int], tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("name: x\nparameters: {model: dit.gguf}\noptions: ['video_vae:vae.gguf']\n")
    with pytest.raises(ConfigError, match="no 'backend:'"):
        run("video", "generate", "c.yaml", "--prompt", "p")


# -- checkpoint paths: inside the models directory, symlinks included ----------------------


def _outside_message(run: Callable[..., int], tmp_path: Path, target: str) -> str:
    link = tmp_path / "dit-link.gguf"
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    (tmp_path / "h3.yaml").write_text(CONFIG.replace("model: dit.gguf", "model: dit-link.gguf"))
    with pytest.raises(ConfigError) as e:
        run("video", "check", "h3.yaml", "req.json")
    return str(e.value)


def test_checkpoints_outside_the_models_directory_get_one_message(
        run: Callable[..., int], engines: dict[str, FamilyEngine], tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "real.gguf").write_bytes(b"x")
    (tmp_path / "req.json").write_text(json.dumps({"prompt": "p"}))
    exists = _outside_message(run, tmp_path, str(outside / "real.gguf"))
    missing = _outside_message(run, tmp_path, str(outside / "missing.gguf"))
    assert exists == missing  # nothing said about what is there
    assert "'parameters.model'" in exists and f"outside the models directory {tmp_path}" in exists
    assert "symlinks are followed" in exists
    # A link that stays inside is followed.
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "sha256-1").write_bytes(b"x")
    (tmp_path / "dit-link.gguf").unlink()
    (tmp_path / "dit-link.gguf").symlink_to("blobs/sha256-1")
    assert run("video", "check", "h3.yaml", "req.json") == 0


def test_checkpoints_reach_the_engine_resolved(run: Callable[..., int], engines: dict[str, FamilyEngine],
                                               tmp_path: Path) -> None:
    (tmp_path / "models" / "blobs").mkdir(parents=True)
    (tmp_path / "models" / "blobs" / "sha256-1").write_bytes(b"x")
    os.symlink("blobs/sha256-1", tmp_path / "models" / "dit.gguf")  # a link inside is followed
    (tmp_path / "models" / "vae.gguf").write_bytes(b"x")
    assert run("video", "generate", "wan.yaml", "--prompt", "p", "--seed", "1", "--frames", "1",
               "--steps", "1", "-o", "x.mp4", "--models-dir", "models") == 0
    [job] = engines["fake-wan"].jobs
    assert dict(job.checkpoints) == {"parameters.model": tmp_path / "models" / "blobs" / "sha256-1",
                                     "video_vae": tmp_path / "models" / "vae.gguf"}


def test_a_missing_checkpoint_is_refused_before_rendering(run: Callable[..., int], tmp_path: Path,
                                                          engines: dict[str, FamilyEngine]) -> None:
    (tmp_path / "vae.gguf").unlink()
    with pytest.raises(ConfigError, match=r"'video_vae': 'vae.gguf' not found in the models directory"):
        run("video", "generate", "wan.yaml", "--prompt", "p", "-o", "x.mp4")
    assert engines["fake-wan"].jobs == []
