"""Numerical agreement on the real model: the binding's evaluate() and ``harness agree``.

evaluate() must give the distributions generation uses (its last row's argmax is the greedy
token), batching sequences side by side must not change prompt-shaped evaluation, and
``harness agree`` on two CPU levels of this host (ggml's own pick against the portable x64 level)
must report a small but non-zero distance, a perplexity ratio near 1, and its cost.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.qualify.specs import model_path, require_variant


def _agree(variant: str, a: str, b: str, tmp_path: Path, *extra: str) -> dict[str, object]:
    r = subprocess.run([sys.executable, "-m", "harness", "agree", f"in-process:variant={variant}{a}",
                        f"in-process:variant={variant}{b}", "--model", str(model_path("HARNESS_MODEL")),
                        "--window", "256", "--tokens", "512", "--resamples", "200", "--out", str(tmp_path),
                        "--json", *extra], capture_output=True, text=True, check=False, timeout=900,
                       env={**os.environ, "HARNESS_CPU_LEVEL": ""})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return dict(json.loads(r.stdout))


def test_evaluate_gives_the_distributions_generation_uses(variant: str) -> None:
    require_variant(variant)
    from harness.runtime import Runtime

    with Runtime.load(model_path("HARNESS_MODEL"), variant=variant, n_ctx=1024, max_num_seqs=4, n_batch=1024,
                      n_ubatch=1024, prefix_caching=False) as eng:
        toks = eng.tokenize("The capital of France is Paris. The capital of Germany is", add_special=False)
        [lp] = eng.evaluate([toks])
        assert lp.shape == (len(toks), eng.info()["n_vocab"]) and lp.dtype == np.float32
        assert np.allclose(np.exp(lp.astype(np.float64)).sum(axis=1), 1.0, atol=1e-4)
        greedy = eng.complete(toks, temperature=0.0, max_tokens=1)
        assert eng.detokenize([int(lp[-1].argmax())]) == greedy.text
        [raw] = eng.evaluate([toks], log_softmax=False)
        assert np.allclose(raw - raw.max(axis=1, keepdims=True), lp - lp.max(axis=1, keepdims=True), atol=1e-4)
        seq = toks * 20  # 240 tokens
        [alone] = eng.evaluate([seq])
        side = eng.evaluate([seq, seq[::-1], seq, seq[1:]])
        # prompt-shaped evaluation: every row's matmul is the same whatever else is in the batch
        assert float(np.abs(side[0] - alone).max()) < 1e-3
        assert side[3].shape == (len(seq) - 1, lp.shape[1])
        with pytest.raises(Exception, match="max_num_seqs"):
            eng.evaluate([seq] * 5)


def test_the_same_level_twice_agrees_exactly(variant: str, tmp_path: Path) -> None:
    require_variant(variant)
    data = _agree(variant, "", ",batch=2", tmp_path)
    s = data["summary"]
    assert s["n_positions"] == 512 and s["n_windows"] == 2
    assert s["kld_max"] == 0.0 and s["top1"] == 1.0 and s["ppl_ratio"] == 1.0
    assert Path(data["plot"]).is_file()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 CPU levels")
def test_two_cpu_levels_of_this_host(variant: str, tmp_path: Path) -> None:
    require_variant(variant)
    data = _agree(variant, "", ",level=x64", tmp_path)
    a, b = data["arms"]["A"]["describe"], data["arms"]["B"]["describe"]
    assert b["cpu_variant"] == "x64"
    s = data["summary"]
    if a["cpu_variant"] == "x64":
        assert s["kld_max"] == 0.0
        return
    # other kernels round differently: a distance, but the same model (perplexities within 2%)
    assert 0.0 < s["kld_mean"] < 0.05, s
    assert s["top1"] > 0.85, s
    assert 0.98 < s["ppl_ratio"] < 1.02, s
    lo, hi = s["ci"]["kld_mean"]
    assert lo <= s["kld_mean"] <= hi
    assert data["timing"]["cost_ratio"] and data["timing"]["cost_ratio"] > 0
    md = (Path(data["report_dir"]) / "agree.md").read_text()
    assert "| mean KLD (nats) |" in md and "x64" in md
