"""vllm.cpp against llama.cpp on the same weights: greedy tokens, prompt by prompt.

vllm.cpp loads the Hugging Face directory, llama.cpp the pinned converter's GGUF of it (the same
BF16 weights). Each prompt runs greedy with EOS ignored for ``max_tokens`` tokens in both.

What can be compared: vllm.cpp's C ABI (``VLLM_ABI_VERSION`` 5) returns a completion's text and
its prompt and completion token counts, and no token ids, logits or log-probabilities. So the
distributions cannot be compared (``harness agree`` needs logits from both arms); the tokens are
compared through what the ABI gives: the prompt token counts, the generated token counts and the
text. llama.cpp's side is taken token by token: the greedy chain is rebuilt from its log-softmax
(``evaluate``), which also gives, at every step, the margin between its top two candidates. Where
the texts part, the step is the first llama.cpp token whose text leaves vllm.cpp's, and its margin
there says whether llama.cpp itself saw a near-tie (a rounding difference flips a near-tie; a
clear winner lost is a real disagreement).

``python -m harness_plugins.vllmcpp.crossengine MODEL_DIR GGUF`` prints the result as JSON (what
qualify's cross-engine stage runs, in a process of its own).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ENGINE = "vllmcpp"
PEER = "llamacpp"
PROMPTS = ("The capital of France is", "Once upon a time, there was a", "def fibonacci(n):\n   ",
           "1, 2, 3, 4, 5,", "The quick brown fox", "In the beginning")
MAX_TOKENS = 32
#: A divergence where llama.cpp's top-1 led its top-2 by less than this (nats) is a near-tie.
NEAR_TIE = 0.05
NO_LOGITS = ("vllm.cpp's C ABI (VLLM_ABI_VERSION 5) returns text and token counts only, no token ids, logits or "
             "log-probabilities: the distributions cannot be compared (harness agree needs logits from both "
             "sides), so tokens are compared through the prompt/completion token counts and the text, with "
             "llama.cpp's top-1/top-2 margin at any divergence")


def _greedy_chain(peer: Any, ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """llama.cpp's greedy tokens after ``ids`` and the top-1/top-2 log-probability margin at each step."""
    import numpy as np

    seq = list(ids)
    for _ in range(n):
        row = peer.evaluate([seq])[0][-1]
        seq.append(int(np.argmax(row)))
    rows = peer.evaluate([seq])[0][len(ids) - 1:-1]
    top2 = np.sort(rows, axis=1)[:, -2:]
    return seq[len(ids):], [float(m) for m in top2[:, 1] - top2[:, 0]]


def compare(engine: Any, peer: Any, prompts: Sequence[str] = PROMPTS, *, max_tokens: int = MAX_TOKENS) -> list[dict[str, Any]]:
    """Per prompt: both engines' greedy output and where (whether) they part."""
    rows = []
    for prompt in prompts:
        ids = peer.tokenize(prompt, add_special=True)
        gen, margins = _greedy_chain(peer, ids, max_tokens)
        peer_text = peer.detokenize(gen)
        own = peer.complete(prompt, temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        mine = engine.complete_exact(prompt, {"temperature": 0.0, "max_tokens": max_tokens, "ignore_eos": True})
        identical = (mine.text == peer_text and mine.n_generated == len(gen) and mine.n_prompt == len(ids))
        diverges = None
        if mine.text != peer_text:
            diverges = next((k for k in range(len(gen)) if not mine.text.startswith(peer.detokenize(gen[:k + 1]))),
                            len(gen))
        at = diverges if diverges is not None and diverges < len(gen) else None
        rows.append({
            "prompt": prompt, "identical": identical,
            "prompt_tokens": {ENGINE: mine.n_prompt, PEER: len(ids)},
            "completion_tokens": {ENGINE: mine.n_generated, PEER: len(gen)},
            "text": {ENGINE: mine.text, PEER: peer_text},
            # llama.cpp's own sampler agrees with the argmax chain (else its evaluate and decode differ)
            "peer_sampler_agrees": own.text == peer_text,
            "diverges_at": diverges,
            "peer_token_at_divergence": None if at is None else peer.detokenize([gen[at]]),
            "peer_margin_at_divergence": None if at is None else margins[at],
            "near_tie": None if at is None else margins[at] < NEAR_TIE,
            "peer_min_margin": min(margins) if margins else None,
        })
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    identical = sum(r["identical"] for r in rows)
    tokens = sum(r["completion_tokens"][PEER] for r in rows)
    # tokens that match before the first divergence, over all prompts
    same = sum(r["completion_tokens"][PEER] if r["diverges_at"] is None else r["diverges_at"] for r in rows)
    clear = [r for r in rows if r["diverges_at"] is not None and not r["near_tie"]]
    prompts_agree = all(r["prompt_tokens"][ENGINE] == r["prompt_tokens"][PEER] for r in rows)
    counts_agree = all(r["completion_tokens"][ENGINE] == r["completion_tokens"][PEER] for r in rows)
    return {"prompts": len(rows), "identical": identical, "tokens": tokens, "tokens_before_divergence": same,
            "clear_divergences": len(clear), "prompt_counts_agree": prompts_agree,
            "completion_counts_agree": counts_agree, "passed": not clear and prompts_agree and counts_agree}


def run(model: Path, peer_model: Path, *, prompts: Sequence[str] = PROMPTS, max_tokens: int = MAX_TOKENS,
        threads: int | None = None) -> dict[str, Any]:
    """Load both engines in this process and compare them (:func:`compare`)."""
    from harness.core import errors
    from harness.core.host import default_threads
    from harness.engine import registry
    from harness_plugins.vllmcpp.engine import Engine

    t = threads or default_threads()
    n_ctx = 2 * (max_tokens + 64)
    load = registry.get(PEER).load
    if load is None:
        msg = f"the {PEER} engine plugin registers no load(): it cannot be the cross-engine peer"
        raise errors.EngineError(msg)
    peer = load(peer_model, threads=t, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, max_num_seqs=1)
    try:
        with Engine.load(model, threads=t, max_num_seqs=1, max_model_len=n_ctx) as engine:
            rows = compare(engine, peer, prompts, max_tokens=max_tokens)
            info = {ENGINE: engine.info(), PEER: {k: v for k, v in peer.info().items()
                                                   if k in ("pin", "variant", "cpu_variant", "n_vocab")}}
    finally:
        peer.close()
    return {"engine": ENGINE, "peer": PEER, "model": str(model), "peer_model": str(peer_model),
            "max_tokens": max_tokens, "threads": t, "near_tie_nats": NEAR_TIE, "logits": NO_LOGITS,
            "info": info, "summary": summarize(rows), "rows": rows}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness_plugins.vllmcpp.crossengine", description=__doc__)
    ap.add_argument("model", type=Path, help="the Hugging Face directory vllm.cpp loads")
    ap.add_argument("peer_model", type=Path, help="its GGUF conversion, for llama.cpp")
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    out = run(args.model, args.peer_model, max_tokens=args.max_tokens, threads=args.threads)
    json.dump(out, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
