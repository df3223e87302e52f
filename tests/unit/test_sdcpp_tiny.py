"""The tiny Wan checkpoint set: deterministic bytes, and the shapes patch 0001 reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from harness_plugins.sdcpp.tiny_wan import (
    HEAD_DIM,
    TinyWanConfig,
    dit_tensors,
    model_config_yaml,
    vae_tensors,
    write_tiny_wan,
)


def _ne(path: Path) -> dict[str, list[int]]:
    """ggml ne[] per tensor, as the engine sees them."""
    return {t.name: [int(x) for x in t.shape] for t in GGUFReader(path).tensors}


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a = write_tiny_wan(tmp_path / "a", seed=3)
    b = write_tiny_wan(tmp_path / "b", seed=3)
    for x, y in ((a.diffusion_model, b.diffusion_model), (a.vae, b.vae), (a.manifest, b.manifest)):
        assert x.read_bytes() == y.read_bytes()
    c = write_tiny_wan(tmp_path / "c", seed=4)
    assert c.diffusion_model.read_bytes() != a.diffusion_model.read_bytes()
    assert c.vae.read_bytes() != a.vae.read_bytes()


def test_set_layout(tmp_path: Path) -> None:
    tiny = write_tiny_wan(tmp_path)
    assert tiny.text_encoder is None
    assert tiny.diffusion_model.stat().st_size < 8 << 20
    assert tiny.vae.stat().st_size < 16 << 20
    meta = json.loads(tiny.manifest.read_text())
    assert meta["in_dim"] == 36 and meta["seed"] == 0
    text = tiny.model_config.read_text()
    assert text == model_config_yaml()
    assert "backend: sdcpp" in text
    assert f"model: {tiny.diffusion_model.name}" in text and f"video_vae:{tiny.vae.name}" in text


def test_dit_shapes_are_what_the_patch_reads(tmp_path: Path) -> None:
    cfg = TinyWanConfig()
    tiny = write_tiny_wan(tmp_path, config=cfg)
    ne = _ne(tiny.diffusion_model)
    dim = ne["time_embedding.0.weight"][1]
    assert dim == cfg.dim and dim % HEAD_DIM == 0
    assert ne["time_embedding.0.weight"][0] == cfg.freq_dim
    assert ne["text_embedding.0.weight"] == [cfg.text_dim, cfg.dim]
    assert ne["blocks.0.ffn.0.weight"] == [cfg.dim, cfg.ffn_dim]
    # Conv3d: ne = [kw, kh, kt, in * out]
    assert ne["patch_embedding.weight"] == [2, 2, 1, cfg.in_dim * cfg.dim]
    assert ne["head.head.weight"] == [cfg.dim, cfg.z_dim * 4]
    assert ne["blocks.0.modulation"] == [cfg.dim, 6, 1]
    # The engine recognizes Wan by this tensor and counts layers by "blocks.N."
    assert "blocks.0.cross_attn.norm_k.weight" in ne
    assert max(int(n.split(".")[1]) for n in ne if n.startswith("blocks.")) == cfg.num_layers - 1
    # Not a released size: patch_embedding channels differ from Wan2.2's magic numbers.
    assert ne["patch_embedding.weight"][3] not in (184320, 147456)


def test_vae_widths_are_what_the_patch_reads(tmp_path: Path) -> None:
    cfg = TinyWanConfig(vae_dim=8, vae_dec_dim=12)
    ne = _ne(write_tiny_wan(tmp_path, config=cfg).vae)
    assert ne["encoder.conv1.bias"] == [8]
    assert ne["decoder.conv1.bias"] == [4 * 12]
    assert ne["decoder.head.2.bias"] == [3]
    assert ne["encoder.head.2.bias"] == [2 * cfg.z_dim]
    assert ne["conv2.weight"] == [1, 1, 1, cfg.z_dim * cfg.z_dim]


def test_decoder_channel_chain_is_consistent() -> None:
    # Every conv's input width must equal what the previous layer produced.
    t = vae_tensors(TinyWanConfig(), seed=0)
    assert t["decoder.upsamples.0.residual.2.weight"].shape[0] == 64 * 64
    # After the first upsample3d halves 64 -> 32, the next block takes 32 in, 64 out.
    assert t["decoder.upsamples.3.resample.1.weight"].shape[:2] == (32, 64)
    assert t["decoder.upsamples.4.shortcut.weight"].shape[0] == 32 * 64
    assert t["decoder.upsamples.12.residual.2.weight"].shape[0] == 16 * 16


def test_weights_are_finite_and_scaled() -> None:
    for tensors in (dit_tensors(TinyWanConfig(), 0), vae_tensors(TinyWanConfig(), 0)):
        for name, a in tensors.items():
            assert np.isfinite(a.astype(np.float32)).all(), name
            assert float(np.abs(a.astype(np.float32)).max()) < 10, name


def test_dim_must_fit_the_head_size() -> None:
    with pytest.raises(ValueError, match="multiple of the head size"):
        dit_tensors(TinyWanConfig(dim=100), 0)
