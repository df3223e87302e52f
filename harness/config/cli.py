"""Subcommands for model configs: ``validate``, ``config show``, ``select``.

Wire with ``harness.config.cli.register(subparsers)``. Diagnostics go to stdout
one per line (``file:line:col: error|warning: message``), like a linter's;
summaries go to stderr; ``--json`` prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness import progress
from harness.cli import add_json_flag, print_json
from harness.config.effective import TRISTATE_MEANING, Effective, cpu_count, effective
from harness.config.loader import Diagnostic
from harness.config.model import model_config, option_specs
from harness.config.select import cuda_wheel_index, select_engine
from harness.config.validate import Validated, Validator
from harness.errors import ConfigError, UsageError
from harness.types import HostInfo

MODELS_DIR_ENV = "HARNESS_MODELS_DIR"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate", help="check model config YAML files (schema and semantics)",
        description="Check model configs: files or directories (recursively, *.yaml/*.yml). "
                    "Exit 1 on any error, or on warnings with --strict.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="config file or directory")
    p.add_argument("--strict", action="store_true", help="warnings fail too")
    _models_dir_flag(p, "model paths are checked for existence only when it is given")
    add_json_flag(p)
    p.set_defaults(func=cmd_validate)

    cfg = subparsers.add_parser("config", help="model config tools")
    csub = cfg.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = csub.add_parser(
        "show", help="effective engine parameters of a config, and where each comes from",
        description="Resolve every precedence rule and default; each value names its source "
                    "(default, model header, context_size, parameters, options, engine_args).")
    show.add_argument("file", metavar="FILE", type=Path)
    show.add_argument("--name", help="which config, when FILE holds several")
    _models_dir_flag(show, "default: the config file's directory (files not required there)")
    add_json_flag(show)
    show.set_defaults(func=cmd_config_show)

    sel = subparsers.add_parser(
        "select", help="which engine and variant serve a config here, and why the others do not")
    sel.add_argument("file", metavar="FILE", type=Path)
    sel.add_argument("--name", help="which config, when FILE holds several")
    _models_dir_flag(sel, "default: the config file's directory (files not required there)")
    add_json_flag(sel)
    sel.set_defaults(func=cmd_select)


def _models_dir_flag(p: argparse.ArgumentParser, note: str) -> None:
    p.add_argument("--models-dir", type=Path, metavar="DIR",
                   help=f"where model paths resolve (or ${MODELS_DIR_ENV}); {note}")


def _models_dir(arg: Path | None, fallback: Path | None = None) -> Path | None:
    chosen = arg or (Path(os.environ[MODELS_DIR_ENV]) if os.environ.get(MODELS_DIR_ENV) else fallback)
    if chosen is not None and not chosen.is_dir():
        msg = f"models directory {chosen} does not exist or is not a directory"
        raise UsageError(msg)
    return chosen


def _print_diagnostics(diags: list[Diagnostic]) -> None:
    for d in diags:
        print(str(d))


# ---------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    report = Validator(models_dir=_models_dir(args.models_dir)).validate_paths(args.paths)
    code = report.exit_code(strict=args.strict)
    if args.json:
        print_json(report.to_json(strict=args.strict))
        return code
    _print_diagnostics(report.diagnostics)
    verdict = "ok" if code == 0 else "failed"
    progress.info(f"{report.files} files, {report.configs} configs: {report.errors} errors, "
                  f"{report.warnings} warnings ({verdict})")
    return code


def _load_one(args: argparse.Namespace) -> tuple[Validated | None, Path | None]:
    """The one config of FILE (or --name), validated; prints diagnostics on errors."""
    file: Path = args.file
    explicit = _models_dir(args.models_dir)
    # Existence is enforced only for a models dir the user named (as in validate); the
    # config's own directory (LocalAI's layout) is still where facts are looked up.
    models_dir = explicit or (file.parent if file.parent.is_dir() else None)
    if not file.is_file():
        msg = f"{file}: no such config file"
        raise UsageError(msg)
    try:
        text = file.read_bytes()
    except OSError as e:
        msg = f"{file}: cannot read: {e.strerror or e}"
        raise UsageError(msg) from e
    items = Validator(models_dir=explicit).validate_text(text, str(file))
    problems = [i for i in items if isinstance(i, Diagnostic)]
    configs = [i for i in items if isinstance(i, Validated)]
    if args.name:
        configs = [c for c in configs if isinstance(c.document.data, dict)
                   and c.document.data.get("name") == args.name]
    if len(configs) > 1:
        names = [str(c.document.data.get("name")) for c in configs if isinstance(c.document.data, dict)]
        msg = f"{file} holds {len(configs)} configs ({', '.join(names)}); pick one with --name"
        raise UsageError(msg)
    diags = problems + [d for c in configs for d in c.diagnostics]
    errors = [d for d in diags if d.severity == "error"]
    if errors or not configs:
        if args.json:
            print_json({"ok": False, "diagnostics": [d.to_json() for d in diags]})
        else:
            _print_diagnostics(diags)
            if not diags:
                print(f"{file}:1:1: error: no config named {args.name!r}")
        return None, models_dir
    if not args.json:
        _print_diagnostics(diags)  # warnings
    return configs[0], models_dir


# ---------------------------------------------------------------------------
# config show
# ---------------------------------------------------------------------------


def _show_value(key: str, value: Any) -> str:
    spec = option_specs().get(key)
    if spec is not None and spec.tristate and isinstance(value, int):
        return f"{value} ({TRISTATE_MEANING.get(value, '?')})"
    return "-" if value is None else str(value)


def cmd_config_show(args: argparse.Namespace) -> int:
    validated, models_dir = _load_one(args)
    if validated is None:
        return 1
    eff: Effective = effective(validated.document.data, validated.options, models_dir=models_dir,
                               cpus=cpu_count())
    if args.json:
        print_json(eff.to_json())
        return 0
    t = Table(title=f"{eff.name} ({eff.backend or 'backend chosen by harness select'})")
    for col in ("parameter", "value", "source"):
        t.add_column(col)
    for key, s in eff.params.items():
        t.add_row(key, _show_value(key, s.value), s.source)
    for key, s in eff.ignored.items():
        t.add_row(key, str(s.value), f"{s.source} (ignored: unknown key)", style="dim")
    Console(soft_wrap=False, width=140).print(t)
    for note in eff.notes:
        progress.info(f"note: {note}")
    return 0


# ---------------------------------------------------------------------------
# select
# ---------------------------------------------------------------------------


def probe_host() -> HostInfo:
    """The host probe of ``harness host``; a minimal description when it is unavailable."""
    try:
        from harness.host import probe

        return probe()
    except Exception:  # selection still explains itself on a host we cannot fully probe
        return HostInfo(os=platform.system().lower(), arch=platform.machine(), cpu_model="",
                        microarch="", simd=(), cores=cpu_count(), memory_bytes=0)


def cmd_select(args: argparse.Namespace) -> int:
    validated, models_dir = _load_one(args)
    if validated is None:
        return 1
    try:
        config = model_config(validated.document.data)
    except (TypeError, ValueError) as e:
        msg = f"{args.file}: cannot build the config: {e}"
        raise ConfigError(msg) from e
    host = probe_host()
    sel = select_engine(config, host, models_dir=models_dir)
    wheel = cuda_wheel_index(host.cuda_version)
    if args.json:
        print_json({**sel.to_json(), "wheel_index": wheel or "cpu"})
        return 0 if sel.chosen else 1
    t = Table(title=f"engines for {config.name} ({sel.facts.get('format')}, "
                    f"{sel.facts.get('architecture') or 'architecture unknown'})")
    for col in ("engine", "verdict", "variant", "reason"):
        t.add_column(col)
    for r in sel.results:
        t.add_row(r.engine, "ok" if r.ok else "rejected", r.variant or "-", r.reason or "-")
    Console(soft_wrap=False, width=140).print(t)
    if sel.chosen is None:
        print(f"no engine selected: {sel.reason}")
        return 1
    print(f"selected {sel.chosen.engine}" + (f" variant {sel.chosen.variant}" if sel.chosen.variant else "")
          + f" (GPU wheel index: {wheel or 'none, CPU index'})")
    return 0
