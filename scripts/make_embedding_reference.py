"""Compute the MiniLM reference embeddings the e2e spec compares against.

Runs sentence-transformers (PyTorch) on the fixture's safetensors directory, offline:

    pip install sentence-transformers torch==2.13.0
    python scripts/make_embedding_reference.py $HARNESS_EMBED_DIR > engines/llamacpp/e2e/data/minilm_reference.json
"""

from __future__ import annotations

import json
import os
import sys

SENTENCES = [
    "The cat sits on the mat.",
    "A kitten is playing with a ball of yarn.",
    "The car is parked in the garage.",
    "Paris is the capital of France.",
    "Quantum computers use qubits.",
    "cat",
    "kitten",
    "car",
]


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(sys.argv[1], device="cpu")
    emb = model.encode(SENTENCES, normalize_embeddings=True)
    json.dump({"model": "all-MiniLM-L6-v2", "normalized": True, "sentences": SENTENCES,
               "embeddings": [[round(float(x), 6) for x in row] for row in emb]}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
