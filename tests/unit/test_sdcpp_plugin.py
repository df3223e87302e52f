"""The stable-diffusion.cpp engine plugin and descriptor: pure Python, no build."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from harness.abi.used import used_from
from harness.core.errors import VideoError
from harness.core.types import HostInfo
from harness.engine.descriptor import load_engine
from harness.engine.plugin import make_manager
from harness.video.job import VideoJob
from harness_plugins import sdcpp as plugin

ROOT = Path(__file__).resolve().parents[2]


def host() -> HostInfo:
    from harness.core.host import probe

    return probe()


def job(**kw: Any) -> VideoJob:
    base: dict[str, Any] = {"prompt": "p", "family": "wan", "audio_track": False, "partition": "t2va",
                            "width": 64, "height": 64, "num_frames": 5, "fps": 16.0, "steps": 2, "seed": 1,
                            "crf": 18}
    base.update(kw)
    return VideoJob(**base)


def test_registered_and_named() -> None:
    pm = make_manager(autoload=False)
    assert "engine-sdcpp" in [name for name, _ in pm.list_name_plugin()]
    from harness.engine import registry

    assert plugin.NAME in registry.names(pm)
    assert (ROOT / "engines" / plugin.NAME / "engine.yaml").is_file()


def test_match() -> None:
    h = host()
    ok = plugin.match({"format": "ggufv2", "abilities": ["video"]}, h)
    assert ok is not None and ok.ok and ok.variant == "cpu"
    chat = plugin.match({"format": "ggufv2", "abilities": ["chat"]}, h)
    assert chat is not None and not chat.ok and "video models only" in chat.reason
    gptq = plugin.match({"format": "gptq", "abilities": ["video"]}, h)
    assert gptq is not None and not gptq.ok and "gptq" in gptq.reason


def test_descriptor() -> None:
    spec = load_engine(plugin.NAME)
    assert spec.variants == ("cpu",)
    assert spec.source.subdir == "vendor/stable-diffusion.cpp"
    assert spec.upstream["commit"] == "90e87bc8" and spec.upstream["ggml"] == "0.9.8"
    base = spec.cmake["base"]
    assert base["SD_BUILD_SHARED_LIBS"] == "ON" and base["BUILD_SHARED_LIBS"] == "ON"
    assert base["SD_BUILD_EXAMPLES"] == "OFF" and base["SD_WEBP"] == "OFF"


def test_patch_series_headers() -> None:
    patches = sorted((ROOT / "engines" / plugin.NAME / "patches").glob("*.patch"))
    assert [p.name[:4] for p in patches] == ["0001", "0002", "0003"]
    for patch in patches:
        head = patch.read_text().split("\n---\n", 1)[0]
        for field in ("Subject:", "Why:", "Upstream:", "Retire-when:"):
            assert field in head, (patch.name, field)


def test_used_set_from_binding_sources() -> None:
    spec = load_engine(plugin.NAME)
    used = used_from(ROOT / str(spec.abi["used_from"]), spec.abi.get("used_pattern"))
    assert {"generate_video", "new_sd_ctx", "sd_vid_gen_params_t", "sd_set_progress_callback"} <= used


def test_checkpoint_set_names_the_resolved_paths_as_the_binding_does(tmp_path: Path) -> None:
    paths = {"parameters.model": tmp_path / "dit.gguf", "video_vae": tmp_path / "vae.gguf",
             "video_encoder": tmp_path / "umt5.gguf", "video_width": tmp_path / "ignored"}
    assert plugin.checkpoint_set(paths) == {"diffusion_model": str(tmp_path / "dit.gguf"),
                                            "vae": str(tmp_path / "vae.gguf"),
                                            "text_encoder": str(tmp_path / "umt5.gguf")}
    no_encoder = plugin.checkpoint_set({k: paths[k] for k in ("parameters.model", "video_vae")})
    assert "text_encoder" not in no_encoder
    with pytest.raises(VideoError, match="video_vae"):
        plugin.checkpoint_set({"parameters.model": paths["parameters.model"]})
    with pytest.raises(VideoError, match=r"parameters\.model"):
        plugin.checkpoint_set({"video_vae": paths["video_vae"]})


def test_the_engine_states_the_families_it_renders() -> None:
    from harness.engine import registry

    impl = registry.engines(make_manager(autoload=False))[plugin.NAME]
    assert (impl.video_family, impl.video_families) == ("wan", ("wan",))


def test_refusals_before_loading(tmp_path: Path) -> None:
    cancel = threading.Event()
    with pytest.raises(VideoError, match="ref2va"):
        plugin.video_generate(job(partition="ref2va"), tmp_path, lambda s, t: None, cancel)
    with pytest.raises(VideoError, match="cpu only"):
        plugin.video_generate(job(device="cuda"), tmp_path, lambda s, t: None, cancel)
    # A job planned on another family's grids would render another count than planned.
    with pytest.raises(VideoError, match=r"22 frames at 64x64, off wan's grids \(4n\+1 frames"):
        plugin.video_generate(job(num_frames=22), tmp_path, lambda s, t: None, cancel)
    with pytest.raises(VideoError, match="off wan's grids"):
        plugin.video_generate(job(width=72), tmp_path, lambda s, t: None, cancel)
    with pytest.raises(VideoError, match="renders the wan family, not minimax-h3"):
        plugin.video_generate(job(family="minimax-h3", num_frames=22), tmp_path, lambda s, t: None, cancel)
