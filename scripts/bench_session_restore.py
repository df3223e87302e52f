"""Time to the first token of a chat switched back to: its saved state restored (B) against its prefill
(A), measured as a benchmark (never a timed test), ABBA-interleaved on one loaded engine.

    python scripts/bench_session_restore.py --model $HARNESS_MODEL [--tokens 2048] [--blocks 8]
        [--threads N] [--out DIR]

The chat: a system prompt and written-out turns of about ``--tokens`` tokens, one generated turn, its
state saved to a file right after (the conversation as the engine holds it), then the next user
message. Switching away is another conversation taking the engine's one sequence (max_num_seqs 1).
Each run switches away, then times from the switch back to the first token of the next answer:

- A, prefill: ``chat(next turn, max_tokens=1)``, the whole chat prefilled;
- B, restore: ``restore_state_file(state)`` then the same call, the chat's tokens reused.

Before timing, the continuation after a restore is checked against the chat that never left: the
greedy answers (48 tokens) must be identical. A block is A B B A; the figure is the geometric mean of
the blocks' A/B ratios with its interval (harness.bench.stats.ratio_interval), every run's seconds,
the load average before and after, and the CPU model, in ``<out>/session-restore.json`` and ``.md``.
Run it on a quiet host: a figure taken while anything else compiles or tests is not evidence.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_FACTS = [
    "The Loire is the longest river in France and flows into the Atlantic Ocean near Saint-Nazaire.",
    "Mont Blanc, on the border with Italy, is the highest mountain of the Alps.",
    "Lyon sits where the Rhone and the Saone meet and is known for its cooking.",
    "Bordeaux is famous for its wine and its eighteenth-century stone quays.",
    "The Camargue is a delta of marshes, white horses and pink flamingos.",
    "Strasbourg is home to the European Parliament and a Gothic cathedral.",
    "Marseille is the oldest city of France, founded by Greek sailors from Phocaea.",
    "The Massif Central is an old volcanic upland in the middle of the country.",
]
GREEDY: dict[str, Any] = {"temperature": 0.0}


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def long_chat(eng: Any, tokens: int) -> list[dict[str, str]]:
    """A geography chat whose template rendering is just over ``tokens`` tokens, ending on a question."""
    msgs = [{"role": "system", "content": "You are a patient geography tutor. Answer in one or two sentences."}]
    i = 0
    while len(eng.core.chat_tokens(json.dumps(msgs))) < tokens - 48:
        fact = _FACTS[i % len(_FACTS)]
        msgs.append({"role": "user", "content": f"Tell me something about France, part {i + 1}. {fact} Is that so?"})
        msgs.append({"role": "assistant", "content": f"Yes. {fact} It is one of the things people remember about "
                                                     f"French geography, lesson {i + 1}."})
        i += 1
    msgs.append({"role": "user", "content": "What is the capital of France?"})
    return msgs


def switch_away(eng: Any) -> None:
    eng.chat([{"role": "user", "content": "Write a haiku about the sea."}], sampling={**GREEDY, "max_tokens": 8})


def run_once(eng: Any, follow: list[dict[str, str]], state: Path | None) -> dict[str, float]:
    switch_away(eng)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    restore_s = 0.0
    if state is not None:
        eng.restore_state_file(state)
        restore_s = time.perf_counter() - t0
    r = eng.chat(follow, sampling={**GREEDY, "max_tokens": 1})
    wall = time.perf_counter() - t0
    return {"seconds": wall, "restore_s": restore_s, "engine_ttft_s": r.completion.ttft_s,
            "n_prompt": r.completion.n_prompt, "n_cached": r.completion.n_cached,
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=os.environ.get("HARNESS_MODEL"),
                    help="the bench model (default $HARNESS_MODEL: SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("--variant", default=None)
    ap.add_argument("--tokens", type=int, default=2048, help="the chat's length in tokens (default 2048)")
    ap.add_argument("--blocks", type=int, default=8, help="ABBA blocks (default 8)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=None, help="report dir (default reports/<stamp>-session-restore)")
    args = ap.parse_args(argv)
    if args.model is None or not Path(args.model).is_file():
        sys.exit("give --model (or $HARNESS_MODEL): a .gguf file; `harness models env` prints the fixtures'")

    from harness.bench.stats import outlier_indices, ratio_interval
    from harness.runtime import Runtime
    from harness.runtime.state import header_of

    n_ctx = 1 << (args.tokens + 256).bit_length()
    with Runtime.load(args.model, variant=args.variant, n_ctx=n_ctx, max_num_seqs=1, threads=args.threads) as eng, \
            tempfile.TemporaryDirectory() as tmp:
        eng.model_sha256  # noqa: B018 - hashed once per loaded engine, before anything is timed
        first = long_chat(eng, args.tokens)
        r1 = eng.chat(first, sampling={**GREEDY, "max_tokens": 32})
        history = [*first, {"role": "assistant", "content": r1.content}]
        state = Path(tmp) / "chat.state"
        saved = eng.save_state_file(state, history)
        follow = [*history, {"role": "user", "content": "And which river flows through it?"}]
        stayed = eng.chat(follow, sampling={**GREEDY, "max_tokens": 48})
        switch_away(eng)
        eng.restore_state_file(state)
        back = eng.chat(follow, sampling={**GREEDY, "max_tokens": 48})
        if back.completion.text != stayed.completion.text:
            sys.exit(f"the restored chat answered {back.completion.text!r}, the chat that never left "
                     f"{stayed.completion.text!r}: not the same greedy tokens")
        n_state = len(header_of(state.read_bytes())["tokens"])
        for s in (None, state):  # warm-up, one of each
            run_once(eng, follow, s)
        runs: list[dict[str, Any]] = []
        for block in range(args.blocks):
            for arm in "ABBA":
                r = run_once(eng, follow, state if arm == "B" else None)
                runs.append({"block": block, "arm": arm, **r})
                print(f"block {block} {arm}: {r['seconds'] * 1e3:8.1f} ms (restore {r['restore_s'] * 1e3:6.1f} ms, "
                      f"{r['n_cached']} of {r['n_prompt']} prompt tokens cached, load {r['load_before']})",
                      file=sys.stderr)
        info = eng.info()

    a = [r["seconds"] for r in runs if r["arm"] == "A"]
    b = [r["seconds"] for r in runs if r["arm"] == "B"]
    ratios = []
    for block in range(args.blocks):
        ta = [r["seconds"] for r in runs if r["block"] == block and r["arm"] == "A"]
        tb = [r["seconds"] for r in runs if r["block"] == block and r["arm"] == "B"]
        ratios.append(statistics.fmean(ta) / statistics.fmean(tb))
    hull, _, _, method = ratio_interval(ratios)
    result = {
        "model": str(args.model), "desc": info["desc"], "variant": info["variant"], "cpu_variant": info["cpu_variant"],
        "cpu": _cpu(), "threads": args.threads, "n_ctx": n_ctx, "chat_tokens": n_state,
        "follow_prompt_tokens": runs[0]["n_prompt"], "state_bytes": saved.n_bytes, "save_s": saved.seconds,
        "greedy_identical": True, "blocks": args.blocks,
        "prefill_ms": {"median": statistics.median(a) * 1e3, "mean": statistics.fmean(a) * 1e3},
        "restore_ms": {"median": statistics.median(b) * 1e3, "mean": statistics.fmean(b) * 1e3},
        "restore_only_ms": statistics.median(r["restore_s"] for r in runs if r["arm"] == "B") * 1e3,
        "ratio": {"point": hull.point, "lo": hull.lo, "hi": hull.hi, "method": method},
        "outliers": {"A": outlier_indices(a), "B": outlier_indices(b)},
        "load": {"first": runs[0]["load_before"], "last": runs[-1]["load_after"]},
        "runs": runs,
        "command": " ".join(["python", "scripts/bench_session_restore.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or Path(__file__).resolve().parents[1] / "reports" / f"{stamp}-session-restore"
    out.mkdir(parents=True, exist_ok=True)
    (out / "session-restore.json").write_text(json.dumps(result, indent=1) + "\n")
    lo = f"{hull.lo:.2f}" if hull.lo is not None else "-"
    hi = f"{hull.hi:.2f}" if hull.hi is not None else "-"
    md = (f"# Session restore vs prefill: time to the first token\n\n"
          f"{info['desc']} ({info['variant']}, {info['cpu_variant']}), {_cpu()}, {args.threads} threads; "
          f"a chat of {n_state} tokens (state {saved.n_bytes / 1e6:.1f} MB), the next turn's prompt "
          f"{runs[0]['n_prompt']} tokens; {args.blocks} ABBA blocks.\n\n"
          f"| arm | median | mean |\n|---|---|---|\n"
          f"| A: prefill | {result['prefill_ms']['median']:.1f} ms | {result['prefill_ms']['mean']:.1f} ms |\n"
          f"| B: restore + first token | {result['restore_ms']['median']:.1f} ms | "
          f"{result['restore_ms']['mean']:.1f} ms |\n\n"
          f"The restore alone: {result['restore_only_ms']:.1f} ms (median). First token sooner by "
          f"**{hull.point:.2f}x** (A/B, geometric mean of the blocks' ratios, 95% interval {lo}-{hi}, {method}); "
          f"the restored chat's greedy answer is the one of the chat that never left. Load average "
          f"{result['load']['first']} before, {result['load']['last']} after.\n\n"
          f"    {result['command']}\n")
    (out / "session-restore.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
