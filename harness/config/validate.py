"""``harness validate``: schema and semantic checks of model configs, with exact locations.

Every problem is a :class:`~harness.config.loader.Diagnostic` printed as
``file:line:col: error|warning: message``; the line and column are those of the
offending key or value in the YAML text. Nothing a user can write raises.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pluggy
from jsonschema.exceptions import ValidationError

from harness.config import schema as schema_mod
from harness.config.loader import Diagnostic, Document, load_text
from harness.config.model import model_config
from harness.config.options import ResolvedOptions, resolve_options
from harness.config.rules import CheckContext, Context, check, known_engines_from_plugins
from harness.errors import did_you_mean

__all__ = ["CheckContext", "Diagnostic", "Report", "Validated", "Validator", "iter_config_files"]

YAML_SUFFIXES = (".yaml", ".yml")
_TYPE_NAMES = {
    "string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
    "object": "a mapping", "array": "a list", "null": "nothing",
}


def described_engines() -> frozenset[str]:
    """Engines with a descriptor, whether or not a plugin implements them yet."""
    from harness.engines import engine_names

    try:
        return frozenset(engine_names())
    except OSError:
        return frozenset()


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    """The compiled validator for the committed schema (generated when not committed yet)."""
    try:
        schema = schema_mod.committed()
    except (OSError, ValueError):
        schema = schema_mod.generate()
    return jsonschema.Draft202012Validator(schema)


def _found(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    kind = {str: "string", int: "integer", float: "number"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text[:60]}{'...' if len(text) > 60 else ''}"


def _dotted(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the config"


def schema_diagnostics(doc: Document) -> list[Diagnostic]:
    """JSON Schema errors of one document, each mapped back to its YAML mark."""
    out: list[Diagnostic] = []
    errors = sorted(_validator().iter_errors(doc.data), key=lambda e: list(map(str, e.absolute_path)))
    for e in errors:
        out.extend(_schema_error(doc, e))
    return out


def _schema_error(doc: Document, e: ValidationError) -> list[Diagnostic]:
    path = tuple(e.absolute_path)
    where = _dotted(path)
    v = e.validator
    if v == "additionalProperties" and isinstance(e.instance, dict):
        props = e.schema.get("properties", {}) if isinstance(e.schema, dict) else {}
        extra = [k for k in e.instance if k not in props]
        inside = f" in {where}" if path else ""
        return [doc.diag((*path, k), "error", f"unknown key {k!r}{inside}{did_you_mean(str(k), props)}",
                         key=True) for k in extra]
    if v == "required" and isinstance(e.validator_value, list) and isinstance(e.instance, dict):
        missing = [k for k in e.validator_value if k not in e.instance]
        label = "the config" if not path else where
        return [doc.diag(path, "error", f"{label} is missing the required key {k!r}") for k in missing]
    if v == "type":
        wanted = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        names = " or ".join(_TYPE_NAMES.get(str(t), str(t)) for t in wanted if t != "null")
        msg = f"{where}: expected {names}, found {_found(e.instance)}"
    elif v == "enum":
        choices = [str(c) for c in e.validator_value if c is not None]
        msg = (f"{where}: expected one of {', '.join(choices)}, found {_found(e.instance)}"
               f"{did_you_mean(str(e.instance), choices)}")
    elif v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[v]
        msg = f"{where}: must be {op} {e.validator_value}, found {e.instance!r}"
    elif v == "minLength":
        msg = f"{where}: must not be empty"
    else:
        msg = f"{where}: {e.message}"
    return [doc.diag(path, "error", msg)]


@dataclass(frozen=True, kw_only=True)
class Validated:
    """One config document after validation."""

    document: Document
    options: ResolvedOptions
    diagnostics: tuple[Diagnostic, ...]

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)


@dataclass(kw_only=True)
class Report:
    """Everything one ``harness validate`` run found."""

    files: int = 0
    configs: int = 0
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(d.severity == "error" for d in self.diagnostics)

    @property
    def warnings(self) -> int:
        return sum(d.severity == "warning" for d in self.diagnostics)

    def exit_code(self, *, strict: bool = False) -> int:
        return 1 if self.errors or (strict and self.warnings) else 0

    def to_json(self, *, strict: bool = False) -> dict[str, Any]:
        return {"ok": self.exit_code(strict=strict) == 0, "files": self.files, "configs": self.configs,
                "errors": self.errors, "warnings": self.warnings,
                "diagnostics": [d.to_json() for d in self.diagnostics]}


def iter_config_files(paths: Iterable[str | Path]) -> Iterator[tuple[str, Path | None]]:
    """YAML files under ``paths`` (directories recursively, hidden ones skipped), sorted.

    Yields ``(display name, path)``; the path is None when the argument does not exist.
    """
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            found: list[Path] = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [Path(root, f) for f in files
                          if f.endswith(YAML_SUFFIXES) and not f.startswith(".")]
            for f in sorted(found):
                yield str(f), f
        elif p.exists():
            yield str(p), p
        else:
            yield str(p), None


class Validator:
    """Validates model configs; reusable across files (the schema is compiled once).

    :param engines: valid ``backend`` names; default: what the plugin manager registers plus every
        engine with a descriptor (``engines/<name>/engine.yaml``): an engine whose plugin is not
        written yet is known, and its configs get the shared schema's rules.
    :param models_dir: where model paths resolve; None checks paths by shape only.
    :param pm: plugin manager whose ``harness_config_check`` hooks add diagnostics to
        schema-valid configs; default: the process-wide one when ``engines`` is not given.
    """

    def __init__(self, *, engines: Collection[str] | None = None, models_dir: Path | None = None,
                 pm: pluggy.PluginManager | None = None) -> None:
        self._engines = frozenset(engines) if engines is not None else None
        self.models_dir = models_dir
        self._pm = pm
        self._use_default_pm = engines is None and pm is None

    @property
    def engines(self) -> frozenset[str]:
        if self._engines is None:
            try:
                plugins = known_engines_from_plugins()
            except Exception:  # a broken third-party plugin must not hide config errors
                plugins = frozenset()
            self._engines = plugins | described_engines()
        return self._engines

    def validate_document(self, doc: Document) -> Validated:
        if not isinstance(doc.data, dict):
            found = _found(doc.data)
            diag = doc.diag((), "error", f"a model config is a mapping (name:, backend:, parameters: ...), "
                                         f"found {found}")
            return Validated(document=doc, options=ResolvedOptions(), diagnostics=(diag,))
        diags = schema_diagnostics(doc)
        opts = resolve_options(doc)
        diags += opts.diagnostics
        ctx = Context(engines=self.engines, models_dir=self.models_dir)
        diags += check(doc, opts, ctx)
        if not any(d.severity == "error" for d in diags):
            diags += self._plugin_checks(doc, opts, ctx)
        diags.sort(key=lambda d: (d.line, d.col))
        return Validated(document=doc, options=opts, diagnostics=tuple(diags))

    def _plugin_checks(self, doc: Document, opts: ResolvedOptions, ctx: Context) -> list[Diagnostic]:
        pm = self._pm
        if pm is None and self._use_default_pm:
            try:
                from harness.plugin import get_manager

                pm = get_manager()
            except Exception:  # a broken plugin must not hide config errors
                self._use_default_pm = False
        if pm is None:
            return []
        check_ctx = CheckContext(document=doc, options=opts, engines=ctx.engines,
                                 models_dir=ctx.models_dir)
        try:
            answers = pm.hook.harness_config_check(config=model_config(doc.data), context=check_ctx)
        except Exception as e:  # report, do not crash: the config may still be fine
            return [doc.diag((), "warning", f"a plugin's config check failed: {type(e).__name__}: {e}")]
        out: list[Diagnostic] = []
        for group in answers:
            for item in group or ():
                if isinstance(item, Diagnostic):
                    out.append(item)
                elif isinstance(item, str):
                    out.append(doc.diag((), "error", item))
        return out

    def validate_text(self, text: str | bytes, file: str = "<string>") -> list[Validated | Diagnostic]:
        """Validate every document of a YAML text; text-level problems come back as diagnostics."""
        docs, problems = load_text(text, file)
        out: list[Validated | Diagnostic] = list(problems)
        if not docs and not problems:
            out.append(Diagnostic(file=file, line=1, col=1, severity="error",
                                  message="empty file: a model config needs name: and parameters:"))
        for doc in docs:
            if isinstance(doc.data, list):  # LocalAI's config-file form: a list of configs
                for i, item in enumerate(doc.data):
                    sub = _subdocument(doc, i, item)
                    out.append(self.validate_document(sub))
            else:
                out.append(self.validate_document(doc))
        return out

    def validate_paths(self, paths: Iterable[str | Path]) -> Report:
        report = Report()
        names: dict[str, Diagnostic] = {}
        for display, path in iter_config_files(paths):
            if path is None:
                report.diagnostics.append(Diagnostic(file=display, line=1, col=1, severity="error",
                                                     message="no such file or directory"))
                continue
            report.files += 1
            try:
                text = path.read_bytes()
            except OSError as e:
                report.diagnostics.append(Diagnostic(file=display, line=1, col=1, severity="error",
                                                     message=f"cannot read: {e.strerror or e}"))
                continue
            for item in self.validate_text(text, display):
                if isinstance(item, Diagnostic):
                    report.diagnostics.append(item)
                    continue
                report.configs += 1
                report.diagnostics.extend(item.diagnostics)
                self._unique_name(item.document, names, report)
        return report

    @staticmethod
    def _unique_name(doc: Document, names: dict[str, Diagnostic], report: Report) -> None:
        name = doc.data.get("name") if isinstance(doc.data, dict) else None
        if not isinstance(name, str):
            return
        here = doc.diag(("name",), "error", "")
        first = names.setdefault(name, here)
        if first is not here:
            report.diagnostics.append(doc.diag(
                ("name",), "error",
                f"model name {name!r} is already used at {first.file}:{first.line}:{first.col}"))


def _subdocument(doc: Document, index: int, data: Any) -> Document:
    """One item of a list-of-configs file, with its marks re-rooted."""
    n = len((index,))
    sub = Document(file=doc.file, data=data)
    sub.values = {p[n:]: m for p, m in doc.values.items() if p[:n] == (index,)}
    sub.keys = {p[n:]: m for p, m in doc.keys.items() if p[:n] == (index,)}
    return sub
