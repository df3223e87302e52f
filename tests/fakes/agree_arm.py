"""Bench arm ``agree-fake`` for the agreement tests: a deterministic toy language model.

Its next-token logits after token ``t`` at position ``p`` are a fixed random table row ``t``;
``perturb=X`` adds ``X`` times a second table (a slightly different "kernel"), ``shift=C`` adds
the constant ``C`` to every logit (the same distribution: KLD must stay 0). Tokenising maps each
character to its code point modulo the vocabulary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.engine.plugin import hookimpl

VOCAB = 64


class AgreeFakeArm:
    def __init__(self, options: dict[str, Any]) -> None:
        rng = np.random.default_rng(0)
        self.table = rng.normal(0.0, 2.0, size=(VOCAB, VOCAB)).astype(np.float32)
        noise = np.random.default_rng(1).normal(0.0, 1.0, size=(VOCAB, VOCAB)).astype(np.float32)
        self.table = self.table + float(options.get("perturb", 0.0)) * noise + float(options.get("shift", 0.0))
        self.calls: list[tuple[int, int, int]] = []

    def warmup(self) -> None:
        pass

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        return {"ttft_s": 1.0, "decode_tps": 1.0, "aggregate_tps": 1.0}

    def describe(self) -> dict[str, Any]:
        return {"kind": "agree-fake", "cpu_variant": "fake", "model": {"path": "toy"}}

    def close(self) -> None:
        pass

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) % VOCAB for c in text]

    def evaluate(self, windows: list[list[int]], batch: int, chunk: int, out: list[str]) -> dict[str, Any]:
        self.calls.append((len(windows), batch, chunk))
        for w, path in zip(windows, out, strict=True):
            self.table[np.asarray(w)].astype(np.float32).tofile(path)
        return {"seconds": 0.01, "engine_s": 0.01, "decode_s": 0.01, "n_vocab": VOCAB}


@hookimpl
def harness_bench_arm(kind: str, options: dict[str, Any]) -> Any | None:
    return AgreeFakeArm(options) if kind == "agree-fake" else None
