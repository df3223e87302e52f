"""Cross-variant check: the same greedy prompt on every built variant and forced CPU SIMD level.

Different kernels may legitimately round differently, so divergence is reported,
not failed; a variant that cannot answer the Paris check on SmolLM2 is garbage
and fails. Each run is a subprocess: ggml loads its backends once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.runtime import discovery

PROMPT = "The capital of France is"
EXPECT = "Paris"

_CHILD = r"""
import json, sys
from harness.runtime import Engine
model, variant, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Engine.load(model, variant=variant, n_ctx=512, max_num_seqs=1, threads=2) as eng:
    c = eng.complete(sys.argv[4], temperature=0.0, max_tokens=n)
    info = eng.info()
    print(json.dumps({"text": c.text, "tokens": eng.tokenize(c.text, add_special=False),
                      "cpu_variant": info["cpu_variant"], "devices": info["devices"]}))
"""


@dataclass(frozen=True, kw_only=True)
class Run:
    label: str
    variant: str
    cpu_level: str | None
    text: str
    tokens: list[int]
    ok: bool
    error: str = ""


def _run(model: Path, variant: str, lib_dir: Path | None, n: int) -> dict[str, Any]:
    env = dict(os.environ)
    if lib_dir is not None:
        env["HARNESS_BACKEND_LIB_DIR"] = str(lib_dir)
    r = subprocess.run([sys.executable, "-c", _CHILD, str(model), variant, str(n), PROMPT],
                       capture_output=True, text=True, env=env, timeout=600, check=False)
    if r.returncode:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1:] or ["failed"]}
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def cpu_levels(lib: Path) -> list[str]:
    return sorted(p.name[len("libggml-cpu-"):-3] for p in lib.glob("libggml-cpu-*.so"))


def forced_level_dir(lib: Path, level: str, into: Path) -> Path:
    """A lib dir exposing a single CPU level: ggml then has no better one to choose."""
    d = into / level
    d.mkdir(parents=True)
    for p in lib.iterdir():
        if p.name.startswith("libggml-cpu-") and p.name != f"libggml-cpu-{level}.so":
            continue
        (d / p.name).symlink_to(p.resolve())
    return d


def cross_variant(model: Path, *, n_tokens: int = 24, levels: bool = True) -> dict[str, Any]:
    """Run every accepted installed variant (and each forced CPU level of ``cpu``)."""
    from harness.engines import load_engine
    from harness.runtime.engine import _committed_fingerprint

    spec = load_engine("llamacpp")
    cands = [c for c in discovery.discover("llamacpp", spec.pin, _committed_fingerprint()) if c.accepted]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="harness-xvariant-") as tmp:
        for c in cands:
            jobs: list[tuple[str, Path | None, str | None]] = [(c.variant, None, None)]
            if levels and c.identity.get("backend") == "cpu":
                for name in cpu_levels(c.location / "lib"):
                    jobs.append((f"{c.variant}/{name}", forced_level_dir(c.location / "lib", name, Path(tmp)), name))
            for label, lib_dir, level in jobs:
                out = _run(model, c.variant, lib_dir, n_tokens)
                if "error" in out:
                    unsupported = level is not None
                    runs.append(Run(label=label, variant=c.variant, cpu_level=level, text="", tokens=[],
                                    ok=unsupported, error=("not supported by this CPU: " if unsupported else "")
                                    + " ".join(out["error"])))
                    continue
                got = out.get("cpu_variant")
                if level is not None and got != level:
                    runs.append(Run(label=label, variant=c.variant, cpu_level=level, text="", tokens=[], ok=True,
                                    error=f"not supported by this CPU (the loader fell back to {got})"))
                    continue
                runs.append(Run(label=label, variant=c.variant, cpu_level=got or level,
                                text=out["text"], tokens=list(out["tokens"]), ok=EXPECT in out["text"]))
    ref = next((r for r in runs if r.tokens), None)
    rows = []
    for r in runs:
        div = None
        if ref is not None and r.tokens and r.tokens != ref.tokens:
            div = next((i for i, (a, b) in enumerate(zip(ref.tokens, r.tokens, strict=False)) if a != b),
                       min(len(ref.tokens), len(r.tokens)))
        rows.append({"label": r.label, "variant": r.variant, "cpu_level": r.cpu_level, "ok": r.ok,
                     "diverges_at": div, "text": r.text, "error": r.error})
    return {"prompt": PROMPT, "expect": EXPECT, "reference": ref.label if ref else None, "runs": rows,
            "passed": all(r["ok"] for r in rows) and bool(rows)}
