"""A tiny random-weight Wan checkpoint set (DiT + video VAE), byte-identical for a seed.

It loads in the pinned stable-diffusion.cpp with patch 0001 (which reads the
Wan widths from the tensor shapes) and renders a 64x64, 5-frame, 2-step video
in seconds on a CPU, so the video path is tested end to end without a
download. Its output is noise by design.

Shapes mirror the engine's module constructors (``wan.hpp``: ``Wan``,
``WanAttentionBlock``, ``Head``, ``Encoder3d``, ``Decoder3d``, ``Resample``,
``ResidualBlock``, ``AttentionBlock``). Tensors are written in PyTorch order;
GGUF stores them reversed, which is ggml's ``ne`` order. 5-D conv weights are
stored 4-D with ``(out * in)`` leading, as the engine's Conv3d expects.

No text encoder: without one the engine conditions on zeros of width 4096
(the umt5-xxl width), so the DiT's text dim is 4096 and the prompt is unused.
The DiT takes noise + mask + keyframe latent (``in_dim = 2 * 16 + 4``) like
Wan2.2-I2V, so first/last-frame requests exercise the VAE encoder too.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

DIT_FILE = "tiny-wan-dit.gguf"
VAE_FILE = "tiny-wan-vae.gguf"
MANIFEST_FILE = "tiny-wan.json"
CONFIG_FILE = "wan-tiny.yaml"
#: The engine's RoPE axes (44 + 42 + 42) fix the head size.
HEAD_DIM = 128
PATCH = (1, 2, 2)


@dataclass(frozen=True, kw_only=True)
class TinyWanConfig:
    """Sizes of the tiny set; defaults are what the CI fixture pins."""

    dim: int = 128
    """DiT hidden size (a multiple of 128: one head per 128)."""
    ffn_dim: int = 256
    num_layers: int = 2
    text_dim: int = 4096
    """Must be 4096 without a text encoder (the engine's zero conditioning width)."""
    freq_dim: int = 256
    z_dim: int = 16
    """Latent channels; the engine's latent statistics exist for 16 (Wan2.1 VAE)."""
    concat_keyframes: bool = True
    """Input = noise + 4 mask channels + keyframe latent (first/last-frame capable)."""
    vae_dim: int = 16
    """VAE encoder base width (96 in Wan2.1)."""
    vae_dec_dim: int = 16
    """VAE decoder base width (96 in Wan2.1)."""

    @property
    def in_dim(self) -> int:
        return 2 * self.z_dim + 4 if self.concat_keyframes else self.z_dim


@dataclass(frozen=True, kw_only=True)
class TinyWanSet:
    """Paths of a written set."""

    directory: Path
    diffusion_model: Path
    vae: Path
    text_encoder: Path | None
    manifest: Path
    model_config: Path
    """A model config for the set (``harness video generate`` takes it as is)."""
    seed: int
    config: TinyWanConfig


class _Tensors:
    """Collects named tensors in creation order from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.items: dict[str, np.ndarray] = {}

    def add(self, name: str, array: np.ndarray) -> None:
        if name in self.items:
            msg = f"duplicate tensor {name}"
            raise ValueError(msg)
        self.items[name] = array

    def weight(self, name: str, shape: tuple[int, ...], *, fan_in: int, dtype: type = np.float32) -> None:
        # Scaled so activations stay O(1) through the random network: no NaNs, no blow-up.
        scale = 1.0 / np.sqrt(max(1, fan_in))
        self.add(name, (self.rng.standard_normal(shape) * scale).astype(dtype))

    def bias(self, name: str, n: int) -> None:
        self.add(name, (self.rng.standard_normal(n) * 0.01).astype(np.float32))

    def ones(self, name: str, n: int) -> None:
        self.add(name, np.ones(n, dtype=np.float32))

    def linear(self, prefix: str, n_in: int, n_out: int) -> None:
        self.weight(f"{prefix}.weight", (n_out, n_in), fan_in=n_in)
        self.bias(f"{prefix}.bias", n_out)

    def conv3d(self, prefix: str, n_in: int, n_out: int, kernel: tuple[int, int, int]) -> None:
        # (out, in, kt, kh, kw) folded to (out * in, kt, kh, kw): ggml has 4 dims.
        self.weight(f"{prefix}.weight", (n_out * n_in, *kernel), fan_in=n_in * int(np.prod(kernel)),
                    dtype=np.float16)
        self.bias(f"{prefix}.bias", n_out)

    def conv2d(self, prefix: str, n_in: int, n_out: int, kernel: tuple[int, int]) -> None:
        self.weight(f"{prefix}.weight", (n_out, n_in, *kernel), fan_in=n_in * int(np.prod(kernel)),
                    dtype=np.float16)
        self.bias(f"{prefix}.bias", n_out)


def _dit(cfg: TinyWanConfig, t: _Tensors) -> None:
    d = cfg.dim
    t.conv3d("patch_embedding", cfg.in_dim, d, PATCH)
    t.linear("text_embedding.0", cfg.text_dim, d)
    t.linear("text_embedding.2", d, d)
    t.linear("time_embedding.0", cfg.freq_dim, d)
    t.linear("time_embedding.2", d, d)
    t.linear("time_projection.1", d, 6 * d)
    for i in range(cfg.num_layers):
        b = f"blocks.{i}"
        t.add(f"{b}.modulation", (t.rng.standard_normal((1, 6, d)) * 0.02).astype(np.float32))
        for attn in ("self_attn", "cross_attn"):
            for proj in ("q", "k", "v", "o"):
                t.linear(f"{b}.{attn}.{proj}", d, d)
            t.ones(f"{b}.{attn}.norm_q.weight", d)
            t.ones(f"{b}.{attn}.norm_k.weight", d)
        t.ones(f"{b}.norm3.weight", d)
        t.add(f"{b}.norm3.bias", np.zeros(d, dtype=np.float32))
        t.linear(f"{b}.ffn.0", d, cfg.ffn_dim)
        t.linear(f"{b}.ffn.2", cfg.ffn_dim, d)
    t.add("head.modulation", (t.rng.standard_normal((1, 2, d)) * 0.02).astype(np.float32))
    t.linear("head.head", d, cfg.z_dim * int(np.prod(PATCH)))


def _residual(t: _Tensors, prefix: str, n_in: int, n_out: int) -> None:
    t.ones(f"{prefix}.residual.0.gamma", n_in)
    t.conv3d(f"{prefix}.residual.2", n_in, n_out, (3, 3, 3))
    t.ones(f"{prefix}.residual.3.gamma", n_out)
    t.conv3d(f"{prefix}.residual.6", n_out, n_out, (3, 3, 3))
    if n_in != n_out:
        t.conv3d(f"{prefix}.shortcut", n_in, n_out, (1, 1, 1))


def _attention(t: _Tensors, prefix: str, dim: int) -> None:
    t.ones(f"{prefix}.norm.gamma", dim)
    t.conv2d(f"{prefix}.to_qkv", dim, 3 * dim, (1, 1))
    t.conv2d(f"{prefix}.proj", dim, dim, (1, 1))


def _resample(t: _Tensors, prefix: str, dim: int, mode: str) -> None:
    if mode.startswith("upsample"):
        t.conv2d(f"{prefix}.resample.1", dim, dim // 2, (3, 3))
        if mode == "upsample3d":
            t.conv3d(f"{prefix}.time_conv", dim, 2 * dim, (3, 1, 1))
    else:
        t.conv2d(f"{prefix}.resample.1", dim, dim, (3, 3))
        if mode == "downsample3d":
            t.conv3d(f"{prefix}.time_conv", dim, dim, (3, 1, 1))


DIM_MULT = (1, 2, 4, 4)
NUM_RES_BLOCKS = 2
TEMPORAL_DOWN = (False, True, True)
TEMPORAL_UP = (True, True, False)


def _encoder(cfg: TinyWanConfig, t: _Tensors) -> None:
    dims = [cfg.vae_dim] + [cfg.vae_dim * m for m in DIM_MULT]
    t.conv3d("encoder.conv1", 3, dims[0], (3, 3, 3))
    index = 0
    out_dim = dims[0]
    for i in range(len(dims) - 1):
        in_dim, out_dim = dims[i], dims[i + 1]
        for _ in range(NUM_RES_BLOCKS):
            _residual(t, f"encoder.downsamples.{index}", in_dim, out_dim)
            index += 1
            in_dim = out_dim
        if i != len(DIM_MULT) - 1:
            _resample(t, f"encoder.downsamples.{index}", out_dim,
                      "downsample3d" if TEMPORAL_DOWN[i] else "downsample2d")
            index += 1
    _residual(t, "encoder.middle.0", out_dim, out_dim)
    _attention(t, "encoder.middle.1", out_dim)
    _residual(t, "encoder.middle.2", out_dim, out_dim)
    t.ones("encoder.head.0.gamma", out_dim)
    t.conv3d("encoder.head.2", out_dim, 2 * cfg.z_dim, (3, 3, 3))
    t.conv3d("conv1", 2 * cfg.z_dim, 2 * cfg.z_dim, (1, 1, 1))


def _decoder(cfg: TinyWanConfig, t: _Tensors) -> None:
    d = cfg.vae_dec_dim
    dims = [DIM_MULT[-1] * d] + [d * m for m in reversed(DIM_MULT)]
    t.conv3d("decoder.conv1", cfg.z_dim, dims[0], (3, 3, 3))
    _residual(t, "decoder.middle.0", dims[0], dims[0])
    _attention(t, "decoder.middle.1", dims[0])
    _residual(t, "decoder.middle.2", dims[0], dims[0])
    index = 0
    out_dim = dims[0]
    for i in range(len(dims) - 1):
        in_dim, out_dim = dims[i], dims[i + 1]
        if i in (1, 2, 3):
            in_dim //= 2  # the previous Resample halved the channels
        for _ in range(NUM_RES_BLOCKS + 1):
            _residual(t, f"decoder.upsamples.{index}", in_dim, out_dim)
            index += 1
            in_dim = out_dim
        if i != len(DIM_MULT) - 1:
            _resample(t, f"decoder.upsamples.{index}", out_dim,
                      "upsample3d" if TEMPORAL_UP[i] else "upsample2d")
            index += 1
    t.ones("decoder.head.0.gamma", out_dim)
    t.conv3d("decoder.head.2", out_dim, 3, (3, 3, 3))
    t.conv3d("conv2", cfg.z_dim, cfg.z_dim, (1, 1, 1))


def dit_tensors(cfg: TinyWanConfig, seed: int) -> dict[str, np.ndarray]:
    """The DiT's tensors, named as in Wan checkpoints (no ``model.diffusion_model.`` prefix)."""
    if cfg.dim % HEAD_DIM:
        msg = f"dim {cfg.dim} must be a multiple of the head size {HEAD_DIM}"
        raise ValueError(msg)
    t = _Tensors(seed)
    _dit(cfg, t)
    return t.items


def vae_tensors(cfg: TinyWanConfig, seed: int) -> dict[str, np.ndarray]:
    """The video VAE's tensors (encoder and decoder), named as in the Wan2.1 VAE."""
    t = _Tensors(seed + 1)
    _encoder(cfg, t)
    _decoder(cfg, t)
    return t.items


def _write_gguf(path: Path, tensors: dict[str, np.ndarray], description: str) -> None:
    # Written beside the target, then renamed: a reader never sees half a file.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        writer = GGUFWriter(tmp, "wan")
        writer.add_name(description)
        for name, array in tensors.items():
            writer.add_tensor(name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp, 0o644)  # mkstemp makes it private; these are shared fixtures
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_tiny_wan(directory: Path, *, seed: int = 0, config: TinyWanConfig | None = None) -> TinyWanSet:
    """Write the set into ``directory`` (created) and return its paths.

    The same seed and config give byte-identical files.
    """
    cfg = config or TinyWanConfig()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dit, vae = directory / DIT_FILE, directory / VAE_FILE
    _write_gguf(dit, dit_tensors(cfg, seed), f"tiny random Wan DiT (seed {seed})")
    _write_gguf(vae, vae_tensors(cfg, seed), f"tiny random Wan VAE (seed {seed})")
    manifest = directory / MANIFEST_FILE
    manifest.write_text(json.dumps({"seed": seed, "config": asdict(cfg), "in_dim": cfg.in_dim,
                                    "diffusion_model": DIT_FILE, "vae": VAE_FILE, "text_encoder": None},
                                   indent=2, sort_keys=True) + "\n")
    config_file = directory / CONFIG_FILE
    config_file.write_text(model_config_yaml(dit.name, vae.name))
    return TinyWanSet(directory=directory, diffusion_model=dit, vae=vae, text_encoder=None,
                      manifest=manifest, model_config=config_file, seed=seed, config=cfg)


def model_config_yaml(diffusion_model: str = DIT_FILE, vae: str = VAE_FILE, *, name: str = "wan-tiny") -> str:
    """A model config rendering with the set (paths relative to the set's directory).

    Its family is the engine's (wan: no audio VAE, the text encoder optional, 4n+1 frames),
    so ``harness validate`` passes it; ``harness video generate`` reads only the keys the
    render needs.
    """
    lines = [
        f"name: {name}",
        "backend: sdcpp",
        "description: Tiny random-weight Wan set (CI smoke renders; output is noise).",
        "known_usecases: [video]",
        "parameters:",
        f"  model: {diffusion_model}",
        "options:",
        f"  - video_vae:{vae}",
        "  - video_partition:fl2va",
        "  - video_device:cpu",
        "  - video_width:64",
        "  - video_height:64",
        "  - video_num_frames:5",
        "  - video_steps:2",
        "  - video_fps:16",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m harness_plugins.sdcpp.tiny_wan DIR [--seed N]``: write the set, print its paths."""
    p = argparse.ArgumentParser(prog="python -m harness_plugins.sdcpp.tiny_wan", description=main.__doc__)
    p.add_argument("directory", type=Path)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    tiny = write_tiny_wan(args.directory, seed=args.seed)
    print(json.dumps({"diffusion_model": str(tiny.diffusion_model), "vae": str(tiny.vae),
                      "model_config": str(tiny.model_config), "manifest": str(tiny.manifest),
                      "seed": tiny.seed}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
