"""What llama.cpp's runtime takes for each core parameter.

:mod:`harness_plugins.llamacpp.engine` checks its arguments against it; the config rules (in the
package) check model configs against it without importing the runtime.
"""

from __future__ import annotations

RUNTIME_BOUNDS: dict[str, tuple[int, int]] = {
    "n_ctx": (0, 1 << 24), "n_threads": (1, 4096), "n_threads_batch": (1, 4096), "n_batch": (1, 1 << 20),
    "n_ubatch": (1, 1 << 20), "max_num_seqs": (1, 4096), "seed": (-1, (1 << 32) - 1), "n_gpu_layers": (-1, 1 << 16),
    "n_draft": (1, 64), "ngram_n": (1, 64), "token_delay_us": (0, 1_000_000),
}
