"""Subcommands for model configs: ``validate``, ``config show``, ``config migrate``, ``config schema``, ``select``.

Wire with ``harness.cli.config.register(subparsers)``. Diagnostics go to stdout
one per line (``file:line:col: CODE error|warning|note: message``), like ruff's, or as
GitHub annotations (``--format github``); summaries go to stderr; ``--json``
prints one JSON document on stdout. ``config show`` and ``select`` answer for an
imperfect config too: its diagnostics first, then everything still determined,
and an exit code that says the config is invalid.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli import add_json_flag, print_json
from harness.core.errors import ConfigError

if TYPE_CHECKING:
    from harness.config.effective import Effective
    from harness.config.loader import Diagnostic
    from harness.config.validate import Report, Validator
    from harness.core.types import HostInfo


FORMATS = ("text", "json", "github")
#: The PATH that means standard input, and the file name its diagnostics carry.
STDIN, STDIN_NAME = "-", "<stdin>"
#: Longest value shown in a `config show` table cell (templates are long); --json has all of it.
CELL_CHARS = 80
#: The exit code of a config with errors (or, with --strict, warnings): ConfigError's, as the README's table says.
INVALID = ConfigError.exit_code


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate", help="check model config YAML files (schema and semantics)",
        description="Check model configs: files or directories (recursively, *.yaml/*.yml). "
                    "Exit 3 (ConfigError) on any error, or on warnings with --strict.")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help=f"config file or directory; {STDIN} reads one config file from standard input")
    p.add_argument("--strict", action="store_true", help="warnings fail too (notes never do)")
    p.add_argument("--ignore", metavar="CODE[,CODE]", action="append", default=[],
                   help="silence these rule codes everywhere (repeatable); '# harness: ignore[CODE]' on a "
                        "line silences one there")
    p.add_argument("--explain", metavar="CODE", nargs="?", const="ALL",
                   help="print a rule's meaning and the source line that makes it true (no CODE, or ALL: "
                        "every rule), and exit")
    p.add_argument("--localai", metavar="REF",
                   help="judge LocalAI backend names as this LocalAI release had them (a release tag, or a commit of "
                        "one, that the generated history covers); default: the pinned LocalAI commit")
    _template_flags(p)
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="text (file:line:col, default), json, or github (workflow annotations)")
    _models_dir_flag(p, "model paths are checked for existence only when it is given")
    add_json_flag(p)
    p.set_defaults(func=cmd_validate)

    cfg = subparsers.add_parser("config", help="model config tools")
    csub = cfg.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = csub.add_parser(
        "show", help="effective engine parameters of a config, and where each comes from",
        description="Resolve every precedence rule and default; each value names its source "
                    "(default, model header, context_size, parameters, options, engine_args). "
                    "A config with errors gets its diagnostics, then what can still be resolved.")
    show.add_argument("file", metavar="FILE", type=Path, help="model config YAML file")
    show.add_argument("--name", help="which config, when FILE holds several")
    _template_flags(show)
    _models_dir_flag(show, "default: the config file's directory (files not required there)")
    add_json_flag(show)
    show.set_defaults(func=cmd_config_show)

    mig = csub.add_parser(
        "migrate", help="rewrite configs written for an older LocalAI for the pinned one (a diff by default)",
        description="Mechanical changes only: a legacy LocalAI backend alias to its current name, keys moved to where "
                    "LocalAI reads them (parameters: or the top level), download_files URLs into {filename, uri}. "
                    "Comments and layout are kept. What has no mechanical successor (a removed LocalAI backend, a "
                    "conflicting value) is left for a person and listed on stderr with the reason. Prints a "
                    "unified diff; --write rewrites the files. Exit 1 when something is left for a person.")
    mig.add_argument("files", nargs="+", metavar="FILE", type=Path, help="model config YAML file")
    mig.add_argument("--write", action="store_true", help="rewrite the files in place instead of printing the diff")
    mig.set_defaults(func=cmd_config_migrate)

    schema = csub.add_parser("schema", help="the model-config JSON Schema, for editors",
                             description="Print the JSON Schema (draft 2020-12) model configs are "
                                         "checked against, or with --path where it is installed "
                                         "(for yaml-language-server: # yaml-language-server: "
                                         "$schema=PATH).")
    schema.add_argument("--path", action="store_true", help="print the installed schema file's path")
    schema.set_defaults(func=cmd_config_schema)

    sel = subparsers.add_parser(
        "select", help="which engine and variant serve a config here, and why the others do not")
    sel.add_argument("file", metavar="FILE", type=Path, help="model config YAML file")
    sel.add_argument("--name", help="which config, when FILE holds several")
    _template_flags(sel)
    _models_dir_flag(sel, "default: the config file's directory (files not required there)")
    add_json_flag(sel)
    sel.set_defaults(func=cmd_select)


def _template_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--template", dest="template", action="store_const", const=True, default=None,
                   help="check every config as a LocalAI gallery body (name and parameters.model come "
                        "from the gallery entry); default: recognised per config (no name and no "
                        "parameters.model)")
    g.add_argument("--no-template", dest="template", action="store_const", const=False,
                   help="check every config as a full config (name and parameters.model required)")


def _models_dir_flag(p: argparse.ArgumentParser, note: str) -> None:
    from harness.config import MODELS_DIR_ENV
    p.add_argument("--models-dir", type=Path, metavar="DIR",
                   help=f"where model paths resolve (or ${MODELS_DIR_ENV}); {note}")


def _github_escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def github_annotation(d: Diagnostic) -> str:
    """A GitHub Actions workflow command that annotates the file at the finding."""
    level = "notice" if d.severity == "note" else d.severity
    title = f"harness validate {d.code}" if d.code else "harness validate"
    return (f"::{level} file={_github_escape(d.file, prop=True)},line={d.line},col={d.col},"
            f"title={_github_escape(title, prop=True)}::{_github_escape(d.message)}")


def _print_diagnostics(diags: list[Diagnostic] | tuple[Diagnostic, ...], fmt: str = "text") -> None:
    for d in diags:
        print(github_annotation(d) if fmt == "github" else d.text())


# ---------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    from harness.config.effective import named_models_dir
    from harness.config.validate import Validator
    from harness.core import progress
    if args.explain:
        return _explain(args.explain)
    if not args.paths:
        progress.info("harness validate: give a config file or directory (or --explain CODE)")
        return 2
    fmt = args.format or ("json" if args.json else "text")
    ignore = [c.strip() for item in args.ignore for c in item.split(",") if c.strip()]
    release = _localai_release(args.localai) if args.localai else None
    validator = Validator(models_dir=named_models_dir(args.models_dir), template=args.template, ignore=ignore,
                          localai=release)
    report = validator.validate_paths([p for p in args.paths if p != STDIN])
    if STDIN in args.paths:
        _validate_stdin(validator, report)
    code = INVALID if report.exit_code(strict=args.strict) else 0
    if fmt == "json":
        print_json(report.to_json(strict=args.strict))
        return code
    _print_diagnostics(report.diagnostics, fmt)
    verdict = "ok" if code == 0 else "failed"
    progress.info(f"{report.files} files, {report.configs} configs: {report.errors} errors, "
                  f"{report.warnings} warnings, {report.notes} notes ({verdict})")
    return code


def _localai_release(ref: str) -> str:
    """The release tag of the generated history ``ref`` names (said on stderr), else a usage error."""
    from harness.config.localai import vocabulary
    from harness.core import progress
    from harness.core.errors import UsageError

    history = vocabulary().history
    tag = history.release(ref)
    if tag is None:
        tags = list(history.releases)
        span = f"{tags[0]} .. {tags[-1]}" if tags else "none"
        msg = (f"--localai {ref}: not a LocalAI release the generated history covers (releases {span}; "
               "refresh it with nox -s refresh_localai_index for a newer one)")
        raise UsageError(msg)
    progress.info(f"LocalAI backend names as LocalAI {tag} ({history.releases[tag][:12]}) had them; keys and "
                  "Validate()'s refusals are the pinned LocalAI commit's")
    return tag


def _validate_stdin(validator: Validator, report: Report) -> None:
    """Add what standard input holds (one config file's text, within the config size limit) to ``report``."""
    import sys

    from harness.config.loader import Diagnostic
    from harness.core import inputs
    from harness.core.errors import UsageError

    cap = inputs.limit("config")
    data = sys.stdin.buffer.read(cap + 1)
    if len(data) > cap:
        msg = f"standard input holds more than {cap} bytes, the limit for a model config; pass the file by name"
        raise UsageError(msg)
    report.files += 1
    for item in validator.validate_text(data, STDIN_NAME):
        if isinstance(item, Diagnostic):
            report.diagnostics.append(item)
        else:
            report.configs += 1
            report.diagnostics.extend(item.diagnostics)


def _explain(code: str) -> int:
    from harness.config import refs
    from harness.core.errors import did_you_mean

    rules = refs.all_rules()
    codes = list(rules) if code.upper() == "ALL" else [code.upper()]
    unknown = [c for c in codes if c not in rules]
    if unknown:
        print(f"no rule {code!r}{did_you_mean(code.upper(), list(rules))}; rules: {', '.join(rules)}")
        return 2
    print("\n".join(refs.explain(c) for c in codes))
    return 0


def _report(diags: list[Diagnostic], *, as_json: bool) -> bool:
    """Print the diagnostics (text); True when any is an error."""
    if not as_json:
        _print_diagnostics(diags)
    return any(d.severity == "error" for d in diags)


# ---------------------------------------------------------------------------
# config show / schema
# ---------------------------------------------------------------------------


def _show_value(key: str, value: Any) -> str:
    from harness.config.model import option_specs
    from harness.config.options import TRISTATE_MEANING
    spec = option_specs().get(key)
    if spec is not None and spec.tristate and isinstance(value, int):
        return f"{value} ({TRISTATE_MEANING.get(value, '?')})"
    text = "-" if value is None else str(value)
    line = text.splitlines()[0] if text.strip() else text
    if line != text or len(line) > CELL_CHARS:
        return line[:CELL_CHARS] + " ..."
    return text


def cmd_config_show(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from harness.config.effective import load_config_file
    from harness.core import progress
    loaded = load_config_file(args.file, name=args.name, models_dir=args.models_dir, template=args.template)
    diags = list(loaded.diagnostics)
    failed = _report(diags, as_json=args.json)
    eff: Effective | None = loaded.resolve()
    validated = loaded.validated
    if eff is None or validated is None:
        if args.json:
            print_json({"ok": False, "diagnostics": [d.to_json() for d in diags]})
        return INVALID
    if args.json:
        print_json({"ok": not failed, **eff.to_json(), "diagnostics": [d.to_json() for d in diags]})
        return INVALID if failed else 0
    title = eff.name or ("(gallery template: named by its entry)" if validated.template else "(no name)")
    label = eff.backend or "backend: unset, engine chosen by harness select"
    if eff.backend and validated.engine and validated.engine != eff.backend:
        label = f"{eff.backend}: engine {validated.engine}"
    t = Table(title=f"{title} ({label})" + (" -- INVALID, values as far as they resolve" if failed else ""))
    for col in ("parameter", "value", "source"):
        t.add_column(col)
    for key, s in eff.params.items():
        t.add_row(key, _show_value(key, s.value), s.source)
    for key, s in eff.ignored.items():
        t.add_row(key, _show_value(key, s.value), s.source, style="dim")
    Console(soft_wrap=False, width=140).print(t)
    for note in eff.notes:
        progress.info(f"note: {note}")
    return INVALID if failed else 0


def cmd_config_migrate(args: argparse.Namespace) -> int:
    from harness.config.migrate import migrate_text
    from harness.core import progress
    from harness.core.inputs import read_bytes

    left = 0
    for path in args.files:
        text = read_bytes(path, kind="config", error=ConfigError).decode("utf-8-sig")
        m = migrate_text(text, str(path))
        if args.write and m.changed:
            path.write_text(m.after, encoding="utf-8")
        elif not args.write:
            print(m.diff(), end="")
        for item in m.left:
            progress.info(f"{path}:{item.line}: left for a person: {item.what}: {item.why}")
        left += len(m.left)
        done = "rewritten" if args.write and m.changed else "would change" if m.changed else "unchanged"
        progress.info(f"{path}: {len(m.changes)} change(s) {done}, {len(m.left)} left for a person")
    return 1 if left else 0


def cmd_config_schema(args: argparse.Namespace) -> int:
    from harness.config.schema import SCHEMA_PATH, dumps, generate
    if args.path:
        print(SCHEMA_PATH)
        return 0
    text = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.is_file() else dumps(generate())
    print(text, end="")
    return 0


# ---------------------------------------------------------------------------
# select
# ---------------------------------------------------------------------------


def probe_host() -> HostInfo:
    """The host probe of ``harness host``; a minimal description when it is unavailable."""
    from harness.config.effective import cpu_count
    from harness.core.types import HostInfo
    try:
        from harness.core.host import probe

        return probe()
    except Exception:  # selection still explains itself on a host we cannot fully probe
        return HostInfo(os=platform.system().lower(), arch=platform.machine(), cpu_model="",
                        microarch="", simd=(), cores=cpu_count(), memory_bytes=0)


def wheel_index(host: HostInfo) -> tuple[str | None, str]:
    """The GPU wheel index for this host and why: a CUDA toolkit without a CUDA device gets none."""
    from harness.config.select import cuda_wheel_index
    if not host.has_gpu("cuda"):
        toolkit = f" (CUDA toolkit {host.cuda_version} found)" if host.cuda_version else ""
        return None, f"none, CPU index: no CUDA device{toolkit}"
    index = cuda_wheel_index(host.cuda_version)
    return index, index or f"none, CPU index (CUDA {host.cuda_version or 'version unknown'})"


def cmd_select(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from harness.config.effective import load_config_file
    from harness.config.select import select_engine
    loaded = load_config_file(args.file, name=args.name, models_dir=args.models_dir, template=args.template)
    validated, diags, models_dir = loaded.validated, list(loaded.diagnostics), loaded.models_dir
    # what validate reports that this harness's engines refuse at load is select's refusal too
    failed = _report(diags, as_json=args.json) or loaded.failed
    if validated is None or validated.config is None:
        if args.json:
            print_json({"ok": False, "diagnostics": [d.to_json() for d in diags]})
        return INVALID
    config = validated.config
    host = probe_host()
    sel = select_engine(config, host, models_dir=models_dir)
    wheel, wheel_text = wheel_index(host)
    # an invalid config says so first; a valid one no engine here can serve is a failed selection (1)
    code = INVALID if failed else 1 if sel.chosen is None else 0
    if args.json:
        print_json({"ok": code == 0, **sel.to_json(), "wheel_index": wheel or "cpu",
                    "diagnostics": [d.to_json() for d in diags]})
        return code
    t = Table(title=f"engines for {config.name or '(no name)'} ({sel.facts.get('format')}, "
                    f"{sel.facts.get('architecture') or 'architecture unknown'})")
    for col in ("engine", "verdict", "variant", "reason"):
        t.add_column(col)
    for r in sel.results:
        t.add_row(r.engine, "ok" if r.ok else "rejected", r.variant or "-", r.reason or "-")
    Console(soft_wrap=False, width=140).print(t)
    if sel.chosen is None:
        print(f"no engine selected: {sel.reason}")
        return code
    print(f"selected {sel.chosen.engine}" + (f" variant {sel.chosen.variant}" if sel.chosen.variant else "")
          + f" (GPU wheel index: {wheel_text})" + (" -- but the config is invalid" if failed else ""))
    return code
