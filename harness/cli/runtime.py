"""Runtime subcommands: build-binding, engine info, devices, inspect memory, complete."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

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

    p = sub.add_parser("devices", help="the devices each installed variant can use: name, platform, free and total memory",
                       description="Every installed binding variant and the ggml devices it can use (one process per "
                       "variant: it loads the variant's ggml backends): name, platform (CPU, Vulkan, CUDA), type, free "
                       "and total memory. A config chooses one with device: (options/engine_args; LocalAI's main_gpu) "
                       "by name or by its index among the GPU devices (the gpu column); none keeps every layer on the "
                       "CPU. A forced-only vulkan variant (a CPU-type device such as lavapipe) lists that device.",
                       epilog="examples:\n  harness devices\n  harness devices --json | jq '.[].devices[].name'",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", nargs="?", default=None, help="engine name (default: every engine that can say)")
    add_json_flag(p)
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("inspect", help="what a model or config needs before it loads (memory)")
    isub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = isub.add_parser(
        "memory", help="the engine's estimate of a load: weights, KV cache and compute per device and the host",
        description="The memory a model config (or a model file) needs before it loads, from the engine's own "
        "estimate (a metadata-only dry run of the load, the engine's common/fit.h): per device the layers go "
        "to and the host, its weights, KV cache (n_ctx, cache_type_k/v, parallel sequences) and compute "
        "buffers, against the memory there is. With --gpu-layers auto (a config's n_gpu_layers: auto) the "
        "layers upstream's fit puts on the device, leaving --margin free. Exit 0 when it fits, 10 when it "
        "does not (the numbers say why); harness validate warns the same and Runtime.load refuses it.",
        epilog="examples:\n"
               "  harness inspect memory examples/models/smollm2-chat.yaml --models-dir ~/.cache/harness/models\n"
               "  harness inspect memory model.gguf --ctx 8192 --json\n"
               "  harness inspect memory model.gguf --variant vulkan --device Vulkan0 --gpu-layers auto --budget 512",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("target", metavar="CONFIG|MODEL", help="a model config (.yaml) or a model file")
    q.add_argument("--ctx", type=int, default=None, metavar="N", help="context size (default: the config's, else the "
                   "model's own capped at 4096)")
    q.add_argument("--device", default=None, help="a device name (harness devices), its GPU index, or none")
    q.add_argument("--gpu-layers", default=None, metavar="N|auto", help="layers offloaded (-1: all), or auto: fitted")
    q.add_argument("--budget", type=int, default=None, metavar="MIB",
                   help="treat a device as having at most this much free memory (MiB)")
    q.add_argument("--margin", type=int, default=None, metavar="MIB",
                   help="memory a fit leaves free per device (default the config's fit_target, 1024: the engine's default)")
    q.add_argument("--parallel", type=int, default=None, metavar="N", help="parallel sequences (n_parallel)")
    q.add_argument("--variant", default=None, help="installed variant (default: the best one this host runs)")
    q.add_argument("--models-dir", type=Path, default=None, help="where a config's model paths resolve")
    q.add_argument("--name", default=None, help="which config, when the file holds several")
    add_json_flag(q)
    q.set_defaults(func=cmd_inspect_memory)

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


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 20):,.1f}"


def cmd_devices(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.cli.inspect import _stdout_table
    from harness.runtime import Runtime

    rows = Runtime.devices(args.engine)
    if args.json:
        print_json(rows)
        return 0
    t = Table("engine", "variant", "device", "platform", "type", "gpu", "free MiB", "total MiB", "description")
    for r in rows:
        if r.get("error") or not r["devices"]:
            t.add_row(r["engine"], r.get("variant") or "-", "-", "-", "-", "-", "-", "-",
                      r.get("error") or "no device")
            continue
        for d in r["devices"]:
            gpu = "-" if d.get("gpu_index") is None else str(d["gpu_index"])
            t.add_row(r["engine"], r["variant"] + (" (forced only)" if r.get("forced_only") else ""), d["name"],
                      d["platform"], d["type"], gpu, _mib(d["free"]), _mib(d["total"]), d["description"])
    _stdout_table(t)
    return 0


def cmd_inspect_memory(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.cli.inspect import _stdout_table
    from harness.runtime import Runtime

    engine_args: dict[str, Any] = {}
    if args.ctx is not None:
        engine_args["n_ctx"] = args.ctx
    if args.device is not None:
        engine_args["device"] = args.device
    if args.gpu_layers is not None:
        g = args.gpu_layers.strip().lower()
        try:
            engine_args["n_gpu_layers"] = "auto" if g == "auto" else int(g)
        except ValueError:
            raise UsageError(f"--gpu-layers takes a number of layers (-1: all) or auto, not {args.gpu_layers!r}") from None
    if args.budget is not None:
        engine_args["device_budget_mib"] = args.budget
    if args.margin is not None:
        engine_args["fit_margin_mib"] = args.margin
    if args.parallel is not None:
        engine_args["n_parallel"] = args.parallel
    plan = Runtime.estimate_memory(args.target, variant=args.variant, models_dir=args.models_dir, name=args.name,
                                   **engine_args)
    if args.json:
        print_json(plan)
        return 0 if plan["fits"] else 10
    t = Table("where", "weights MiB", "repacked MiB", "KV cache MiB", "compute MiB", "outputs MiB", "vocab MiB", "need MiB", "free MiB", "budget MiB",
              "margin MiB", "usable MiB", "fits")
    for r in plan["rows"]:
        t.add_row(r["device"] + ("" if r["host"] else f" ({r['platform']})"), _mib(r["weights"]),
                  _mib(r.get("repacked", 0)), _mib(r["kv_cache"]),
                  _mib(r["compute"]), _mib(r.get("outputs", 0)), _mib(r.get("vocabulary", 0)), _mib(r["need"]), _mib(r["free"] if not r["host"] else None),
                  _mib(r["budget"]), _mib(r["margin"]) if not r["host"] else "-", _mib(r["available"]),
                  "yes" if r["fits"] else "NO")
    _stdout_table(t)
    fit = {"fitted": ", fitted to the memory there is", "failed": ", the fit found no placement",
           "no device": ", no device to fit layers to"}.get(plan.get("fit") or "", "")
    print(f"{plan['model']} on {plan['variant']}: n_ctx {plan['n_ctx']}, {plan['n_gpu_layers']} of "
          f"{plan['n_layer'] + 1} layers offloaded{fit}")
    if plan["fits"]:
        print("fits")
        return 0
    print(f"does not fit: {plan['verdict']}")
    return 10
