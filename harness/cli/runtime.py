"""Runtime subcommands: build-binding, engine info, complete."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.cli import add_engine_arg, add_json_flag, print_json
from harness.core.errors import UsageError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    what = "build + install the binding (the engine's pybind11 module) against a variant's artifact"
    p = sub.add_parser("build-binding", help=what, description=(
        f"{what}. Every wheel is checked before it is installed (its package and .dist-info only: no .pth, "
        "no command, every file in its RECORD); an untrusted recipe's is never installed into this Python, "
        "only unpacked for $HARNESS_BINDING_PATH."))
    add_engine_arg(p)
    p.add_argument("--variant", default="cpu", help="matrix row whose artifact to build against (default: cpu)")
    p.add_argument("--no-install", action="store_true", help="only build the wheel")
    p.add_argument("--force", action="store_true", help="rebuild even when the installed module matches")
    add_json_flag(p)
    p.set_defaults(func=cmd_build_binding, extras=('build',))

    p = sub.add_parser("engine", help="inspect installed binding variants")
    esub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = esub.add_parser("info", help="installed variants in priority order, and why any is rejected")
    q.add_argument("engine", nargs="?", default=None, help="engine name (default: the default text engine)")
    add_json_flag(q)
    q.set_defaults(func=cmd_engine_info)

    p = sub.add_parser("complete", help="load a model and complete a prompt (a smoke test of the runtime)")
    p.add_argument("model", type=Path, metavar="MODEL", help="GGUF model file")
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--max-tokens", type=int, default=64, help="most tokens to generate (default: 64)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default: 0, greedy)")
    p.add_argument("--variant", help="installed variant to load (default: the best one this host runs)")
    p.add_argument("--stream", action="store_true", help="print deltas as they arrive")
    add_json_flag(p)
    p.set_defaults(func=cmd_complete)


def cmd_build_binding(args: argparse.Namespace) -> int:
    from harness.binding.wheel import build_binding
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant
    from harness.engine.descriptor import load_engine

    engine = load_engine(args.engine)
    artifact = artifact_dir(engine, get_variant(args.variant))
    if not artifact.is_dir():
        msg = f"no artifact at {artifact}: run harness build {engine.name} --variant {args.variant} first"
        raise UsageError(msg)
    r = build_binding(engine, artifact, install=not args.no_install, force=args.force)
    if args.json:
        print_json({"wheel": str(r.wheel), "package": r.package, "built": r.built, "installed": r.installed,
                    "site": str(r.site) if r.site else None, "seconds": round(r.seconds, 2)})
    elif r.site is not None:
        from harness.engine.trust import origin, untrusted_hint

        what = "built" if r.built else "wheel up to date"
        print(f"{engine.name} {args.variant} binding: {what}, not installed into this Python ({r.seconds:.1f} s)\n"
              f"{r.wheel}\n{origin(engine)} is not trusted: its binding is unpacked in {r.site}, which a run "
              f"imports only when named: HARNESS_BINDING_PATH={r.site}. To install it, "
              f"{untrusted_hint(engine.name)}")
    else:
        what = "built" if r.built else "wheel up to date"
        what += ", installed" if r.installed else (", already installed" if not args.no_install else "")
        print(f"{engine.name} {args.variant} binding: {what} ({r.seconds:.1f} s)\n{r.wheel}")
    return 0


def cmd_engine_info(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.cli.inspect import _stdout_table
    from harness.engine import registry
    from harness.engine.descriptor import load_engine
    from harness.runtime import discovery, levels

    engine = load_engine(args.engine or registry.default("text").name)
    fingerprint = discovery.committed_fingerprint(engine.name)
    cands = discovery.discover(engine.name, engine.pin, fingerprint)
    forced = discovery.choose_or_none(engine.name, engine.pin, fingerprint)
    rows = [{"name": c.name, "variant": c.variant, "package": c.package, "location": str(c.location),
             "accepted": c.accepted, "reason": c.reason, "forced_only": c.forced_only, "note": c.note,
             "pin": c.identity.get("pin"),
             "abi_fingerprint": c.identity.get("abi_fingerprint"), "selected": forced is not None and c.name == forced.name}
            for c in cands]
    level_lines: list[str] = []
    if forced is not None and levels.cpu_levels(forced.location / "lib"):
        # The level the selected variant loads here: forced, or what passed the smoke probe.
        sel = levels.select(forced.location / "lib", probe=registry.get(engine.name).probe_model is not None)
        level_lines = sel.describe()
        for r in rows:
            if r["selected"]:
                r["cpu_level"] = {"level": sel.level, "forced": sel.forced, "lines": level_lines,
                                  "verdict": sel.verdict.as_dict() if sel.verdict else None}
    if args.json:
        print_json(rows)
        return 0
    t = Table("variant", "status", "pin", "abi", "where / why")
    for r in rows:
        status = "[green]selected[/]" if r["selected"] else (
            ("accepted (when forced)" if r["forced_only"] else "accepted") if r["accepted"] else "[red]rejected[/]")
        where = r["location"] if r["accepted"] else r["reason"]
        t.add_row(str(r["variant"]), status, str(r["pin"]), str(r["abi_fingerprint"] or "")[:12],
                  f"{where}\n{r['note']}" if r["note"] else str(where))
    _stdout_table(t)
    for line in level_lines:
        print(line)
    if not rows:
        print(f"no {engine.name} binding installed: harness build-binding {engine.name} --variant cpu")
    return 0 if forced else 1


def cmd_complete(args: argparse.Namespace) -> int:
    from harness.core import crash
    from harness.runtime import Runtime

    code = crash.supervise(getattr(args, "argv", None), "harness complete")
    if code is not None:
        return code

    with Runtime.load(args.model, variant=args.variant) as eng:
        if args.stream and not args.json:
            s = eng.stream(args.prompt, max_tokens=args.max_tokens, temperature=args.temperature)
            for delta in s:
                sys.stdout.write(delta)
                sys.stdout.flush()
            sys.stdout.write("\n")
            return 0
        c = eng.complete(args.prompt, max_tokens=args.max_tokens, temperature=args.temperature)
        if args.json:
            print_json({"text": c.text, "finish_reason": c.finish_reason, "n_prompt": c.n_prompt,
                        "n_generated": c.n_generated, "ttft_s": c.ttft_s, "total_s": c.total_s,
                        "info": eng.info()})
        else:
            print(c.text)
            print(json.dumps({"finish_reason": c.finish_reason, "tokens": c.n_generated,
                              "decode_tok_s": round(c.decode_tokens_per_s, 1)}), file=sys.stderr)
    return 0
