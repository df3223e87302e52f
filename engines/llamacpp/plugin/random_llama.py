"""A bandwidth-bound llama: about 0.7B random Q4_0 weights (406 MB), byte-identical for a seed.

Its output is noise, but its speed is real: decoding a token reads every weight once,
and at 0.4 GB that read, not per-token overhead, is what bounds the decode, so "% of
the bandwidth roofline" means something for it (on SmolLM2-135M it does not: 98 MB
are read faster than the engine's fixed cost per token). The shape is a llama's (16
blocks of d=2048, grouped-query attention with 32/8 heads, a 5632-wide SwiGLU); the
vocabulary is the tiny model's BPE, so the output layer costs next to nothing and
prompts of any token ids below 359 work.

The Q4_0 blocks are drawn directly (an fp16 scale and 32 random 4-bit values from 1 to
15, so weights are symmetric around 0 with a standard deviation of 0.02), not quantized
from floats: writing takes a few seconds, bound by the disk. Tensors are streamed one
at a time, so memory stays at one tensor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType

from harness_plugins.llamacpp.tiny import (
    TinyConfig,
    add_metadata,
    atomic_path,
    check_config,
    tensor_shapes,
    vocabulary,
)

#: The shape qualify benchmarks: 16 x (4.2M + 1.0M + 1.0M + 4.2M attention + 34.6M FFN) = 0.72B parameters.
BANDWIDTH = TinyConfig(context_length=4096, embedding_length=2048, block_count=16, feed_forward_length=5632,
                       head_count=32, head_count_kv=8)
QK4_0 = 32
#: Bytes of one Q4_0 block: an fp16 scale and 32 4-bit values.
Q4_0_BLOCK = 2 + QK4_0 // 2
#: The scale: (q - 8) for q uniform in 1..15 has a standard deviation of sqrt(224/12) = 4.32.
SCALE = 0.02 / 4.32


def q4_0_blocks(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray[tuple[int, ...], np.dtype[np.uint8]]:
    """``rows`` x ``cols`` random weights as Q4_0 bytes (``rows`` x ``cols / 32 * 18``)."""
    nb = cols // QK4_0
    q = rng.integers(1, 16, size=(rows, nb, QK4_0), dtype=np.uint8)
    out = np.empty((rows, nb, Q4_0_BLOCK), dtype=np.uint8)
    out[:, :, :2] = np.frombuffer(np.float16(SCALE).tobytes(), dtype=np.uint8)
    out[:, :, 2:] = q[:, :, : QK4_0 // 2] | (q[:, :, QK4_0 // 2:] << 4)
    return out.reshape(rows, nb * Q4_0_BLOCK)


def write_random_llama(path: Path, *, seed: int = 0, config: TinyConfig | None = None) -> Path:
    """Write the model to ``path`` (atomically); same seed and config (default :data:`BANDWIDTH`), same bytes.

    The attention and feed-forward matrices are Q4_0; the embeddings, the output layer
    (both tiny with this vocabulary) and the norms are F32, as in :mod:`.tiny`.
    """
    config = config or BANDWIDTH
    check_config(config)
    if config.embedding_length % QK4_0 or config.feed_forward_length % QK4_0:
        msg = f"Q4_0 needs embedding_length and feed_forward_length divisible by {QK4_0}"
        raise ValueError(msg)
    shapes = tensor_shapes(config, len(vocabulary(config.n_merges)[0]))
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    q4 = {name for name, shape in shapes.items() if name.startswith("blk.") and len(shape) == 2}
    rng = np.random.default_rng(seed)
    with atomic_path(path) as tmp:
        w = GGUFWriter(tmp, "llama")
        add_metadata(w, config, name=f"random-llama-{n_params / 1e9:.1f}B-Q4_0-s{seed}",
                     file_type=int(LlamaFileType.MOSTLY_Q4_0))
        for name, shape in shapes.items():
            if name in q4:
                rows, cols = shape
                w.add_tensor_info(name, (rows, cols // QK4_0 * Q4_0_BLOCK), np.dtype(np.uint8),
                                  rows * cols // QK4_0 * Q4_0_BLOCK, raw_dtype=GGMLQuantizationType.Q4_0)
            else:
                w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for name, shape in shapes.items():
            if name in q4:
                data = q4_0_blocks(rng, shape[0], shape[1])
            elif len(shape) == 1:  # norm weights: identity scale keeps activations sane
                data = np.ones(shape, dtype=np.float32)
            else:
                data = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
            w.write_tensor_data(data)
        w.close()
    return path


if __name__ == "__main__":  # python -m harness_plugins.llamacpp.random_llama OUT.gguf
    import sys
    import time

    t0 = time.perf_counter()
    out = write_random_llama(Path(sys.argv[1]))
    print(f"{out}: {out.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s")
