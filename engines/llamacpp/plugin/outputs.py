"""Two builds of llama.cpp compared on their next-token distributions, by llama.cpp's own tool.

``llama-perplexity --kl-divergence-base FILE`` on build A saves A's distributions over the pinned agreement
corpus (:func:`harness.agree.corpus.load_corpus`); ``--kl-divergence`` on build B reads them back and
prints the mean KL divergence of B from A and how often both put the same token on top ("Same top p").
What ``harness bisect --gate kld<=X|top1>=F`` asks of a commit against the good build (the probes build
``llama-perplexity``: ``bisect.programs.agreement`` in the descriptor). One thread, so both runs compute
in the same order.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

from harness.core.errors import AgreementError, UsageError

#: Context per chunk and chunks: 4 x 128 = 512 positions, ~50 MB of saved distributions for a 49k vocabulary.
CTX, CHUNKS = 128, 4
TIMEOUT_S = 1800

_KLD = re.compile(r"Mean\s+KLD:\s+([0-9.eE+-]+)")
_TOP = re.compile(r"Same top p:\s+([0-9.]+)")


def _run(artifact: Path, args: list[str], log: Path) -> str:
    exe = artifact / "bin" / "llama-perplexity"
    if not exe.is_file():
        msg = (f"no llama-perplexity in {artifact}: the agreement of two builds runs it (bisect.programs.agreement "
               "in the engine descriptor names it for a bisect's probes)")
        raise UsageError(msg)
    argv = [str(exe), *args, "-t", "1", "-c", str(CTX), "--chunks", str(CHUNKS), "-b", str(CTX)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                       env={**os.environ, "LD_LIBRARY_PATH": str(artifact / "lib")})
    log.write_text(r.stdout + r.stderr)
    if r.returncode:
        msg = f"{' '.join(argv)} failed (exit {r.returncode}); its output is in {log}:\n{(r.stdout + r.stderr)[-1500:]}"
        raise AgreementError(msg)
    return r.stdout + r.stderr


def compare_outputs(a: Path, b: Path, *, model: Any = None, workdir: Path | None = None) -> dict[str, Any]:
    """``kld``, ``top1`` and ``positions`` of build ``b`` against build ``a`` on ``model``."""
    from harness.agree.corpus import load_corpus

    if not model:
        msg = "comparing two builds' outputs needs a model: --option model=PATH (a GGUF both builds load)"
        raise UsageError(msg)
    work = Path(workdir or ".")
    work.mkdir(parents=True, exist_ok=True)
    text = work / "corpus.txt"
    text.write_text(load_corpus().text)
    base = work / "base.kld"
    _run(a, ["-m", str(model), "-f", str(text), "--kl-divergence-base", str(base)], work / "a.log")
    out = _run(b, ["-m", str(model), "--kl-divergence-base", str(base), "--kl-divergence"], work / "b.log")
    base.unlink(missing_ok=True)
    kld, top = _KLD.search(out), _TOP.search(out)
    if kld is None or top is None:
        msg = f"llama-perplexity printed no 'Mean KLD' / 'Same top p' line; its output is in {work / 'b.log'}"
        raise AgreementError(msg)
    return {"kld": float(kld.group(1)), "top1": float(top.group(1)) / 100.0, "positions": CTX * CHUNKS // 2,
            "tool": "llama-perplexity --kl-divergence"}
