"""``harness video check`` and ``harness video generate`` through their argparse wiring."""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pluggy
import pytest

from harness.cli import video as cli
from harness.core.errors import ConfigError, UsageError, VideoError
from harness.engine import hookspec
from harness.engine.registry import EngineImpl
from harness.video import pipeline as pipeline_mod
from harness.video.ffmpeg import resolve_ffmpeg
from harness.video.job import EngineOutput, VideoJob

hookimpl = pluggy.HookimplMarker("harness")

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


class Engine:
    @hookimpl
    def harness_engine_register(self) -> list[EngineImpl]:
        return [EngineImpl(name="fake", video_generate=self.generate)]

    def generate(self, request: VideoJob, workdir: Path, progress: Callable[[int, int], None],
                 cancel: threading.Event) -> EngineOutput | None:
        raw = workdir / "frames.rgb"
        for step in range(1, request.steps + 1):
            progress(step, request.steps)
        raw.write_bytes(bytes(request.width * request.height * 3) * request.num_frames)
        return EngineOutput(frames=raw)


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., int]:
    try:
        resolve_ffmpeg(None)
    except Exception as e:
        pytest.skip(f"no ffmpeg: {e}")
    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    pm.register(Engine())
    monkeypatch.setattr(pipeline_mod, "_default_manager", lambda: pm)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h3.yaml").write_text(CONFIG)
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
    err = capsys.readouterr().err
    assert "warning: cfg_scale is ignored" in err and "ok: fl2va 64x32" in err


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
    assert out["audio_codecs"] == []


def test_generate_needs_a_prompt(run: Callable[..., int]) -> None:
    with pytest.raises(UsageError, match="--prompt"):
        run("video", "generate", "h3.yaml")


@pytest.mark.parametrize(("text", "match"), [
    ("options: [a]\n", "no 'backend:'"),
    ("backend: x\noptions: [novalue]\n", "not key:value"),
    ("backend: x\noptions: ['video_widht:3']\n", "did you mean 'video_width'"),
    ("- a\n", "mapping at the top level"),
    ("a: [\n", "not valid YAML"),
])
def test_bad_configs(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError, match=match):
        cli.load_config(tmp_path / "c.yaml")


def test_bare_video_prints_help(run: Callable[..., int], capsys: pytest.CaptureFixture[str]) -> None:
    assert run("video") == 2
    assert "generate" in capsys.readouterr().out
