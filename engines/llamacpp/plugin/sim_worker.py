"""One request of the binding, for the simulation instrument: load, one greedy completion, exit.

    python -m harness_plugins.llamacpp.sim_worker --model M --pn PN --gn GN [--variant cpu]

One thread, the synthetic prompt every bench arm uses (``pn`` ids), ``gn`` generated tokens with
end-of-generation ignored, no prefix cache. The CPU level is the environment's
(``$HARNESS_CPU_LEVEL``, which the target sets). It prints one JSON line: what it ran.
"""

from __future__ import annotations

import argparse
import json


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness_plugins.llamacpp.sim_worker",
                                description="one greedy request of the binding (the simulation instrument's unit)")
    p.add_argument("--model", required=True, help="GGUF model file")
    p.add_argument("--variant", default="cpu", help="installed binding variant (default: cpu)")
    p.add_argument("--pn", type=int, required=True, help="prompt tokens")
    p.add_argument("--gn", type=int, required=True, help="generated tokens")
    args = p.parse_args(argv)

    from harness.runtime import Runtime
    from harness_plugins.llamacpp.bench import synthetic_prompt

    engine = Runtime.load(args.model, variant=args.variant, n_ctx=args.pn + args.gn + 16, threads=1,
                          max_num_seqs=1, prefix_caching=False)
    try:
        info = engine.info()
        # the engine's own vocabulary size (reading it from the GGUF in Python costs ~4 s natively,
        # minutes under Valgrind)
        done = engine.complete(synthetic_prompt(args.pn, int(info["n_vocab"])), temperature=0.0,
                               max_tokens=args.gn, ignore_eos=True)
    finally:
        engine.close()
    if done.n_generated != args.gn:
        msg = f"sim_worker: generated {done.n_generated} tokens, expected {args.gn}"
        raise SystemExit(msg)
    print(json.dumps({"pn": args.pn, "gn": done.n_generated, "cpu_variant": info.get("cpu_variant"),
                      "pin": info.get("pin")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
