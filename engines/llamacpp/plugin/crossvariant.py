"""Cross-variant check: the same greedy prompt on every built variant and forced CPU SIMD level,
then the numerical agreement of each with the reference level.

Different kernels may legitimately round differently, so greedy divergence is reported, not
failed; a variant that cannot answer the Paris check on SmolLM2 is garbage and fails. Whether a
divergence is rounding or a broken kernel is the agreement rows' answer: KLD and top-1 of the
next-token distributions over the pinned corpus against the reference level, gated by the
thresholds of the engine descriptor. Each run is a subprocess: ggml loads its backends once per
process.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core import crash
from harness.core.pyexec import python_argv
from harness.runtime import discovery, levels

PROMPT = "The capital of France is"
EXPECT = "Paris"
NOT_RUN = "not run here: this CPU lacks the level's features; audited (static) by harness audit isa"

_CHILD = r"""
import json, sys
from harness.core import crash
from harness.runtime import Runtime
model, variant, n, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[6])
crash.note(running="cross-variant " + sys.argv[5])
with Runtime.load(model, variant=variant, n_ctx=512, max_num_seqs=1, threads=threads) as eng:
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
    status: str = "ran"
    """ran | crashed | failed | not-run (the CPU lacks the level's features: audited statically only)"""
    error: str = ""


def _run(model: Path, variant: str, lib_dir: Path | None, n: int, label: str, threads: int) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop(levels.LEVEL_ENV, None)
    if lib_dir is not None:
        env[levels.LIB_DIR_ENV] = str(lib_dir)
    r = crash.run_child([*python_argv("-c", _CHILD), str(model), variant, str(n), PROMPT, label, str(threads)],
                        env=env, timeout=600)
    if r.crash is not None:
        return {"crash": r.crash}
    if r.returncode is None:
        return {"error": ["hung for 600 s"]}
    if r.returncode:
        return {"error": [r.last_line("failed")]}
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def cross_variant(model: Path, *, n_tokens: int = 24, levels_too: bool = True,
                  variants: list[str] | None = None, threads: int | None = None,
                  agreement: bool = True, only_levels: Collection[str] | None = None) -> dict[str, Any]:
    """Run every accepted installed variant, and each CPU level of ``cpu`` forced alone.

    A level this CPU cannot run is listed as not run here (the ISA audit covers it);
    a run that dies by a signal is reported as a crash with its signal and level.
    ``threads`` defaults to the host's physical cores (:func:`harness.core.host.default_threads`).
    ``agreement``: also compare the next-token distributions of every level that ran (and every
    other variant) with the reference level on the pinned corpus (:func:`agreement_rows`).
    ``only_levels``: force just these CPU levels (the variant's own pick, the reference, runs
    anyway). With ``$HARNESS_BINDING_LIB_DIR`` set, the levels are that directory's, not the
    installed variant's (:func:`harness.runtime.levels.backend_dir`: another build of this pin).
    """
    from harness.core.host import default_threads

    threads = threads or default_threads()
    from harness.engine.descriptor import load_engine
    from harness_plugins.llamacpp.engine import _committed_fingerprint

    spec = load_engine("llamacpp")
    cands = [c for c in discovery.discover("llamacpp", spec.pin, _committed_fingerprint())
             if c.accepted and (variants is None or c.variant in variants)]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="harness-xvariant-") as tmp:
        for c in cands:
            jobs: list[tuple[str, Path | None, str | None]] = [(c.variant, None, None)]
            if levels_too and c.identity.get("platform") == "cpu":
                lib = Path(os.environ.get(levels.LIB_DIR_ENV, "").strip() or c.location / "lib")
                for name in levels.cpu_levels(lib):
                    if only_levels is not None and name not in only_levels:
                        continue
                    jobs.append((f"{c.variant}/{name}", levels.level_dir(lib, [name], Path(tmp) / name), name))
            for label, lib_dir, level in jobs:
                out = _run(model, c.variant, lib_dir, n_tokens, label, threads)
                if "crash" in out:
                    died: crash.Crash = out["crash"]
                    where = died.cpu_level or level
                    runs.append(Run(label=label, variant=c.variant, cpu_level=where, text="", tokens=[], ok=False,
                                    status="crashed", error=f"crashed: {crash.signal_text(died.signal)}"
                                    + (f" on level {where}" if where else "")))
                    continue
                if "error" in out:
                    if level is not None and "no ggml backend could be loaded" in " ".join(out["error"]):
                        runs.append(Run(label=label, variant=c.variant, cpu_level=level, text="", tokens=[], ok=True,
                                        status="not-run", error=NOT_RUN))
                        continue
                    runs.append(Run(label=label, variant=c.variant, cpu_level=level, text="", tokens=[], ok=False,
                                    status="failed", error=" ".join(out["error"])))
                    continue
                got = out.get("cpu_variant")
                if level is not None and got != level:
                    runs.append(Run(label=label, variant=c.variant, cpu_level=level, text="", tokens=[], ok=True,
                                    status="not-run", error=f"{NOT_RUN} (the loader fell back to {got})"))
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
                     "status": r.status, "diverges_at": div, "text": r.text, "error": r.error})
    summary: dict[str, Any] = {"prompt": PROMPT, "expect": EXPECT, "threads": threads,
                               "reference": ref.label if ref else None, "runs": rows,
                               "passed": all(r["ok"] for r in rows) and bool(rows)}
    if agreement and ref is not None:
        ref_level = next((r.cpu_level for r in runs if r.variant == "cpu" and r.status == "ran" and r.cpu_level), None)
        ran_levels = [r.cpu_level for r in runs if r.variant == "cpu" and r.status == "ran" and r.cpu_level
                      and r.label != "cpu"]
        others = sorted({r.variant for r in runs if r.variant != "cpu" and r.status == "ran"})
        if ref_level is not None:
            summary["agreement"] = agreement_rows(model, ref_level, ran_levels, others, threads=threads)
    return summary


#: Tokens of the batch-invariance row (one token per sequence and decode is slow: ~250 tok/s alone).
BATCH_ROW_TOKENS = 2048


def agreement_rows(model: Path, ref_level: str, levels_ran: list[str], variants: list[str], *,
                   threads: int) -> dict[str, Any]:
    """KLD and top-1 of every other CPU level (and variant) against the reference level, on the pinned corpus.

    Plus the batch-invariance row: the reference level with one sequence per decode against
    four side by side, one token each (the shape of generation). Thresholds and sizes come from
    ``qualify.agreement`` of the engine descriptor. A row that could not run (a crash: the greedy
    check above names it) records its error.
    """
    from harness.agree.corpus import load_corpus
    from harness.agree.report import rows_markdown
    from harness.agree.run import DEFAULT_WINDOW, ReferenceRows, agree
    from harness.agree.thresholds import agreement_settings, for_engine
    from harness.core.errors import HarnessError

    settings, table = agreement_settings("llamacpp"), for_engine("llamacpp")
    window = int(settings.get("window", DEFAULT_WINDOW))
    tokens = settings.get("tokens")
    corpus = load_corpus()
    ref = f"in-process:variant=cpu,level={ref_level}"
    jobs: list[tuple[str, str, str, int | None]] = [
        (f"cpu/{lvl}", f"in-process:variant=cpu,level={lvl}", "level", tokens) for lvl in dict.fromkeys(levels_ran)
        if lvl != ref_level]
    # every layer on the variant's device: the engine's default (0) would leave the weights in host
    # memory and run all but the large batches' matrix products on the CPU backend
    jobs += [(v, f"in-process:variant={v},n_gpu_layers=-1", "variant", tokens) for v in variants]
    batch_tokens = min(int(tokens), BATCH_ROW_TOKENS) if tokens else BATCH_ROW_TOKENS
    jobs.append((f"cpu/{ref_level} batch 4 vs 1", "", "batch", batch_tokens))
    results: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    # the reference level's rows are evaluated once and compared with every level and variant
    with tempfile.TemporaryDirectory(prefix="harness-agree-reference-") as keep:
        reference = ReferenceRows(Path(keep))
        for label, arm, kind, limit in jobs:
            a, b = (f"{ref},batch=1,chunk=1", f"{ref},batch=4,chunk=1") if kind == "batch" else (ref, arm)
            try:
                r = agree(a, b, model=str(model), corpus=corpus, window=window, max_tokens=limit, threads=threads,
                          kind=kind, threshold=table.get(kind), resamples=1000, reference=reference)
            except HarnessError as e:
                errors.append({"label": label, "kind": kind, "error": f"{type(e).__name__}: {e}"})
                continue
            results.append({"label": label, **r.as_dict()})
    return {"reference": f"cpu/{ref_level}", "corpus": corpus.describe(), "window": window, "tokens": tokens,
            "results": results, "errors": errors, "markdown": rows_markdown(results) if results else "",
            "passed": all(x["passed"] for x in results)}
