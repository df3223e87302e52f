"""Video rendered for real by stable-diffusion.cpp, muxed and verified by harness/video.

Tiny set (CI): ``HARNESS_VIDEO_TINY=DIR`` (written there by
``python -m harness_plugins.sdcpp.tiny_wan DIR`` when missing). Needs the binding wheel:
``harness build sdcpp --variant cpu`` and
``harness build-binding sdcpp --variant cpu``.

Real Wan (slow): ``HARNESS_VIDEO_MODEL`` (DiT .gguf/.safetensors),
``HARNESS_VIDEO_VAE`` (Wan2.1 VAE) and optionally ``HARNESS_VIDEO_ENCODER``
(umt5-xxl; without it the render is unconditioned).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness.video.ffmpeg import resolve_ffmpeg
from harness.video.mux import VideoCancelledError, probe
from harness.video.pipeline import VideoPipeline
from harness.video.target import resolve_target

ENGINE = "sdcpp"


def _binding() -> None:
    from harness.core.errors import BindingError
    from harness_plugins.sdcpp import load_binding

    try:
        load_binding()
    except BindingError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def tiny() -> Path:
    value = os.environ.get("HARNESS_VIDEO_TINY")
    if not value:
        pytest.skip("set HARNESS_VIDEO_TINY=DIR to render with the tiny Wan set (written there if missing)")
    from harness_plugins.sdcpp.tiny_wan import CONFIG_FILE, DIT_FILE, VAE_FILE, write_tiny_wan

    d = Path(value)
    if not all((d / f).is_file() for f in (DIT_FILE, VAE_FILE, CONFIG_FILE)):
        write_tiny_wan(d)
    _binding()
    return d


def _pipeline(models_dir: Path, options: dict[str, Any], model: dict[str, Any], tmp: Path) -> VideoPipeline:
    items = [*model["options"], *(f"{k}:{v}" for k, v in {**options, "video_workdir": str(tmp / "work")}.items())]
    return VideoPipeline(resolve_target(ENGINE, model={**model, "options": items}, models_dir=models_dir))


def _tiny_model() -> dict[str, Any]:
    from harness_plugins.sdcpp.tiny_wan import DIT_FILE, VAE_FILE

    return {"backend": ENGINE, "parameters": {"model": DIT_FILE}, "options": [f"video_vae:{VAE_FILE}"]}


TINY_OPTIONS = {"video_partition": "fl2va", "video_device": "cpu", "video_width": "64",
                "video_height": "64", "video_num_frames": "5", "video_steps": "2", "video_fps": "16"}


def _png(path: Path, rgb: tuple[int, int, int]) -> Path:
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    w = h = 64
    raw = (b"\x00" + bytes(rgb) * w) * h
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return path


def test_tiny_t2va_renders_a_verified_mp4(tiny: Path, tmp_path: Path) -> None:
    pipe = _pipeline(tiny, TINY_OPTIONS, _tiny_model(), tmp_path)
    steps: list[tuple[int, int]] = []
    t0 = time.monotonic()
    result = pipe.generate({"prompt": "a red fox in the snow", "seed": 7}, tmp_path / "out.mp4",
                           progress=lambda s, n: steps.append((s, n)))
    seconds = time.monotonic() - t0
    assert result.path.is_file()
    info = result.info
    assert (info.width, info.height, info.frames) == (64, 64, 5)
    assert list(info.video_codecs) == ["h264"]
    assert steps == [(1, 2), (2, 2)]
    assert result.plan.partition == "fl2va"
    assert seconds < 120, f"tiny render took {seconds:.1f}s"
    assert not list((tmp_path / "work").iterdir()), "workdir not removed after a verified mux"


def test_tiny_first_last_frame(tiny: Path, tmp_path: Path) -> None:
    pipe = _pipeline(tiny, TINY_OPTIONS, _tiny_model(), tmp_path)
    start = _png(tmp_path / "first.png", (220, 30, 30))
    end = _png(tmp_path / "last.png", (30, 30, 220))
    # The canvas is given: with keyframes alone it would derive from their aspect (768 short side).
    result = pipe.generate({"prompt": "p", "seed": 1, "width": 64, "height": 64,
                            "start_image": str(start), "end_image": str(end)},
                           tmp_path / "fl.mp4", base_dir=tmp_path)
    assert (result.info.width, result.info.height, result.info.frames) == (64, 64, 5)


def test_tiny_off_grid_frame_count_is_planned_on_wans_grid(tiny: Path, tmp_path: Path) -> None:
    # 22 is on MiniMax-H3's 17n+5 grid, not Wan's 4n+1: the plan is 25, and 25 are rendered.
    pipe = _pipeline(tiny, {**TINY_OPTIONS, "video_num_frames": "22"}, _tiny_model(), tmp_path)
    result = pipe.generate({"prompt": "p", "seed": 2}, tmp_path / "25.mp4")
    assert result.plan.num_frames == 25 and result.info.frames == 25
    assert any("4n+1" in w for w in result.warnings)


def test_tiny_same_seed_same_frames(tiny: Path, tmp_path: Path) -> None:
    from harness_plugins.sdcpp import load_binding

    core = load_binding()
    params = {"diffusion_model": str(tiny / "tiny-wan-dit.gguf"), "vae": str(tiny / "tiny-wan-vae.gguf")}
    ctx = core.VideoContext(params)
    outs = []
    for run in ("a", "b"):
        d = tmp_path / run
        d.mkdir()
        r = ctx.generate_video(out_dir=str(d), prompt="p", width=64, height=64, frames=5, steps=2, seed=11)
        assert r["frames"] == 5 and r["frames_rendered"] == 5
        outs.append([Path(p).read_bytes() for p in r["paths"]])
    assert outs[0] == outs[1]
    assert outs[0][0].startswith(b"P6\n64 64\n255\n")


def test_tiny_cancel_stops_and_cleans_up(tiny: Path, tmp_path: Path) -> None:
    pipe = _pipeline(tiny, {**TINY_OPTIONS, "video_steps": "6"}, _tiny_model(), tmp_path)
    cancel = threading.Event()
    seen: list[int] = []

    def on_step(step: int, total: int) -> None:
        seen.append(step)
        cancel.set()

    with pytest.raises(VideoCancelledError):
        pipe.generate({"prompt": "p", "seed": 3}, tmp_path / "x.mp4", progress=on_step, cancel=cancel)
    assert seen == [1]
    assert not (tmp_path / "x.mp4").exists()
    assert not list((tmp_path / "work").iterdir())
    # The dropped context is reloaded: the next request renders.
    result = pipe.generate({"prompt": "p", "seed": 3}, tmp_path / "y.mp4")
    assert result.info.frames == 5


def _ffprobe_frames(path: Path) -> tuple[int, int, int, list[str]]:
    """Frames (decoded and counted), size and stream kinds, by ffprobe itself."""
    import shutil

    ffprobe = shutil.which("ffprobe")
    if ffprobe is None:
        pytest.skip("no ffprobe on PATH")
    out = subprocess.run([ffprobe, "-v", "error", "-count_frames", "-show_streams", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    streams = json.loads(out)["streams"]
    video = next(s for s in streams if s["codec_type"] == "video")
    return (int(video["nb_read_frames"]), int(video["width"]), int(video["height"]),
            [s["codec_type"] for s in streams])


def _harness(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *argv], capture_output=True, text=True, env=env,
                          check=False, timeout=600)


def test_tiny_cli(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli.mp4"
    env = {**os.environ, "HARNESS_MODELS_DIR": str(tiny)}
    proc = _harness("video", "generate", str(tiny / "wan-tiny.yaml"), "--prompt", "a lighthouse", "--seed", "5",
                    "-o", str(out), "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["frames"] == 5 and data["width"] == 64 and out.is_file()


@pytest.mark.parametrize(("asked", "planned"), [(6, 9), (22, 25), (5, 5)])
def test_tiny_cli_check_plans_4n_plus_1_and_generate_renders_it(tiny: Path, tmp_path: Path, asked: int,
                                                                planned: int) -> None:
    config = tiny / "wan-tiny.yaml"
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_MODELS_DIR"}  # the config's directory
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"prompt": "a lighthouse", "seed": 5, "num_frames": asked}))
    check = _harness("video", "check", str(config), str(request), "--json", env=env)
    assert check.returncode == 0, check.stderr[-2000:]
    plan = json.loads(check.stdout)["plan"]
    assert (plan["family"], plan["num_frames"], plan["audio_track"]) == ("wan", planned, False)
    out = tmp_path / "r.mp4"
    gen = _harness("video", "generate", str(config), "--request", str(request), "-o", str(out), "--json", env=env)
    assert gen.returncode == 0, gen.stderr[-2000:]
    rendered = json.loads(gen.stdout)
    assert json.dumps(rendered["plan"]) == json.dumps(plan)  # check's plan, byte for byte
    assert _ffprobe_frames(out) == (planned, 64, 64, ["video"])  # no audio track: Wan renders none
    info = probe(resolve_ffmpeg(None), out)
    assert abs(info.duration - planned / plan["fps"]) <= 1 / plan["fps"]


# --------------------------------------------------------------------------- real Wan


@pytest.fixture(scope="module")
def real_set() -> dict[str, Path]:
    names = {"model": "HARNESS_VIDEO_MODEL", "vae": "HARNESS_VIDEO_VAE"}
    found: dict[str, Path] = {}
    for key, env in names.items():
        value = os.environ.get(env)
        if not value:
            pytest.skip(f"set {env} (and HARNESS_VIDEO_VAE, optionally HARNESS_VIDEO_ENCODER) "
                        "to render with a real Wan checkpoint")
        if not Path(value).is_file():
            pytest.skip(f"{env}={value} does not exist")
        found[key] = Path(value)
    encoder = os.environ.get("HARNESS_VIDEO_ENCODER")
    if encoder:
        found["encoder"] = Path(encoder)
    _binding()
    return found


@pytest.mark.slow
def test_real_wan_t2v(real_set: dict[str, Path], tmp_path: Path) -> None:
    options = [f"video_vae:{real_set['vae']}"]
    if "encoder" in real_set:
        options.append(f"video_encoder:{real_set['encoder']}")
    model = {"backend": ENGINE, "parameters": {"model": str(real_set["model"])}, "options": options}
    opts = {**TINY_OPTIONS, "video_partition": "t2va", "video_width": "256", "video_height": "256",
            "video_steps": os.environ.get("HARNESS_VIDEO_STEPS", "4")}
    # Checkpoint paths must resolve inside the models directory: the set's common parent.
    root = Path(os.path.commonpath([str(p.resolve().parent) for p in real_set.values()]))
    pipe = _pipeline(root, opts, model, tmp_path)
    result = pipe.generate({"prompt": "a red fox running through snow", "seed": 42}, tmp_path / "wan.mp4")
    assert (result.info.width, result.info.height, result.info.frames) == (256, 256, 5)
    assert list(result.info.video_codecs) == ["h264"]
