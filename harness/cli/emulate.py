"""``harness emulate``: a cross-built row's CPU levels, each under the emulated CPU that isolates it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.cli import add_json_flag, print_json
from harness.core.errors import HarnessError, UsageError

DESCRIPTION = """\
Build a cross-built matrix row (target: in the matrix, e.g. cpu-aarch64) when its stamp is stale,
check its libraries' exports and shipped headers against the committed ABI surface, then run every
CPU level of the artifact forced, under the QEMU CPU model that has that level's features (what each
model offers is measured with the pinned engine's own feature detection): a greedy completion per
model, and with --bench a short run of the engine's benchmark tool. A level no model isolates is run under the closest one
and said so. A run that dies by a signal is reported as a crash with signal and level.

Needs: bash scripts/install-system-deps.sh --cross-aarch64

examples:
  harness emulate --variant cpu-aarch64 --model tiny
  harness emulate --variant cpu-aarch64 --model tiny --model smollm2 --bench smollm2 --json
  harness emulate --variant cpu-aarch64 --level armv8.2_2 --model smollm2
"""

#: --model NAME -> (the models env variable, the text its answer must hold; None: decoding is enough)
MODELS = {"tiny": ("probe", None), "smollm2": ("HARNESS_MODEL", "Paris")}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("emulate", help="run a cross-built row's CPU levels under emulation (qemu-user)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", nargs="?", default=None, help="engine name (default: the default text engine)")
    p.add_argument("--variant", default="cpu-aarch64", help="cross-built matrix row (default cpu-aarch64)")
    p.add_argument("--model", action="append", choices=sorted(MODELS), default=None,
                   help="tiny: the random Q4_1 probe model (decodes); smollm2: must answer Paris (repeatable; "
                   "default: tiny)")
    p.add_argument("--bench", choices=sorted(MODELS), default=None,
                   help="also run the engine's benchmark tool (pp16/tg8, one repetition) on this model per level")
    p.add_argument("--level", action="append", default=None, help="only these CPU levels (repeatable)")
    p.add_argument("--tokens", type=int, default=12, help="tokens to greedy-decode per run (default 12)")
    p.add_argument("--threads", type=int, help="threads per run (default: the host's physical cores)")
    p.add_argument("--markdown", action="store_true", help="print the level table as Markdown")
    add_json_flag(p)
    p.set_defaults(func=cmd_emulate, extras=('build',))


def resolve_models(names: list[str]) -> tuple[dict[str, Path], dict[str, str]]:
    from harness.engine import registry
    from harness.models.fixtures import env_vars

    models: dict[str, Path] = {}
    expect: dict[str, str] = {}
    env: dict[str, str] | None = None
    for name in names:
        var, want = MODELS[name]
        if var == "probe":
            impl = registry.default("text")
            if impl.probe_model is None:
                raise UsageError(f"engine {impl.name} has no tiny probe model")
            models[name] = impl.probe_model()
        else:
            env = env if env is not None else env_vars()
            if var not in env:
                raise UsageError(f"no {var}: run harness models fetch")
            models[name] = Path(env[var])
        if want:
            expect[name] = want
    return models, expect


def cmd_emulate(args: argparse.Namespace) -> int:
    from harness.build.matrix import get_variant
    from harness.engine import registry
    from harness.engine.descriptor import load_engine
    from harness.qualify.emulate import emulate, table_lines

    names = args.model or ["tiny"]
    if args.bench and args.bench not in names:
        names.append(args.bench)
    models, expect = resolve_models(names)
    engine = load_engine(args.engine or registry.default("text").name)
    r = emulate(engine, get_variant(args.variant), models=models, expect=expect, bench_model=args.bench,
                threads=args.threads, levels=args.level, n_tokens=args.tokens)
    if args.json:
        print_json(r)
    else:
        b = r["build"]
        print(f"{b['variant']} ({b['target']}): {'built' if b['built'] else 'cached'} in {b['seconds']} s; "
              f"ABI: {r['abi']['used_functions']} used functions exported ({r['abi']['machine']}), "
              f"{len(r['abi']['headers'])} shipped headers as checked; qemu {r['qemu']}; {r['seconds']} s of runs")
        print("\n".join(table_lines(r)) if args.markdown else json.dumps(
            {row["level"]: {"qemu_model": row["qemu_model"], "isolated": row["isolated"],
                            **{k: {"status": v["status"], "ok": v.get("ok"), "diverges_at": v.get("diverges_at"),
                                   "eval_tok_s": v.get("eval_tok_s")} for k, v in row["runs"].items()},
                            **({"bench": row["bench"]} if "bench" in row else {})}
             for row in r["levels"]}, indent=1))
    if not r["passed"]:
        msg = f"{len(r['failures'])} emulated runs failed: " + "; ".join(r["failures"])
        raise HarnessError(msg)
    return 0
