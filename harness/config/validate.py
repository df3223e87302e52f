"""``harness validate``: schema and semantic checks of model configs, with exact locations.

Every problem is a :class:`~harness.config.loader.Diagnostic` printed as
``file:line:col: CODE error|warning|note: message``; the line and column are those of the
offending key or value in the YAML text. Each carries its rule's code, and its severity is
the rule's (:mod:`harness.config.refs`: a rule without a reference is a note); ``--ignore``
and ``# harness: ignore[CODE]`` silence one. Nothing a user can write raises.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pluggy
from jsonschema import _keywords
from jsonschema._utils import equal as _jsonschema_equal
from jsonschema.exceptions import ValidationError

from harness.config import refs
from harness.config import schema as schema_mod
from harness.config.gallery import body_documents, is_gallery_file
from harness.config.kinds import config_kind
from harness.config.lenient import best_effort
from harness.config.loader import Diagnostic, Document, Path_, dotted, load_text
from harness.config.localai import (
    backend_options,
    open_options,
    options_parsed,
    resolve_backend,
    usecase_name,
    vocabulary,
)
from harness.config.model import ModelConfig
from harness.config.options import ResolvedOptions, resolve_options
from harness.config.rules import (
    CheckContext,
    Context,
    check,
    non_finite,
    str_at,
)
from harness.core.errors import ConfigError, did_you_mean
from harness.core.inputs import read_bytes

__all__ = ["CheckContext", "Diagnostic", "Report", "Validated", "Validator", "iter_config_files"]

YAML_SUFFIXES = (".yaml", ".yml")
_TYPE_NAMES = {
    "string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
    "object": "a mapping", "array": "a list", "null": "nothing",
}


def described_engines() -> frozenset[str]:
    """Engines with a descriptor, whether or not a plugin implements them yet."""
    from harness.engine.descriptor import engine_names

    try:
        return frozenset(engine_names())
    except OSError:
        return frozenset()


def known_engines_from_plugins(pm: pluggy.PluginManager | None = None) -> frozenset[str]:
    """Registered engine names (:mod:`harness.engine.registry`)."""
    from harness.engine import registry

    return frozenset(registry.names(pm))


@functools.cache
def _validator() -> Any:
    """The compiled validator for the committed schema (generated when not committed yet), its
    ``$defs`` references inlined: resolving a ``$ref`` costs jsonschema more than checking what it
    points at, and every config goes through a few of them."""
    try:
        schema = schema_mod.committed()
    except (OSError, ValueError):
        schema = schema_mod.generate()
    return _FastValidator(_inline_refs(schema))


#: Keywords :func:`_passes` can decide (anything else: jsonschema decides).
_SIMPLE = frozenset({"type", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                     "minLength", "items", "properties", "additionalProperties", "required",
                     "$schema", "$id", "$defs"})  # the last three name the schema and check nothing


def _certainly(value: Any, type_name: str) -> bool:
    """``value`` is of JSON Schema type ``type_name`` (False also where jsonschema might say yes:
    a float that is an integer, an unknown type name; jsonschema then decides)."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        return type(value) is int
    if type_name == "number":
        return type(value) is int or type(value) is float
    if type_name == "boolean":
        return type(value) is bool
    if type_name == "object":
        return isinstance(value, dict)
    if type_name == "array":
        return isinstance(value, list)
    return type_name == "null" and value is None


def _passes(value: Any, sub: Any) -> bool:
    """True only when ``value`` certainly satisfies ``sub``, a schema of simple keywords (all of a
    config's schema: types, bounds, enums, lists, mappings of known keys). False means "not sure":
    the caller lets jsonschema check it, so every error still comes from jsonschema itself."""
    if sub is True:
        return True
    if type(sub) is not dict or not sub.keys() <= _SIMPLE:
        return False
    types = sub.get("type")
    if types is not None and not any(_certainly(value, t) for t in (types if isinstance(types, list) else (types,))):
        return False
    if "enum" in sub and not any(_jsonschema_equal(value, e) for e in sub["enum"]):
        return False
    if isinstance(value, dict):
        return _object_passes(value, sub)
    if isinstance(value, list):
        return "items" not in sub or all(_passes(v, sub["items"]) for v in value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, ok in (("minimum", value.__ge__), ("maximum", value.__le__),
                        ("exclusiveMinimum", value.__gt__), ("exclusiveMaximum", value.__lt__)):
            bound = sub.get(key)
            if bound is not None and ok(bound) is not True:
                return False
    return not ("minLength" in sub and isinstance(value, str) and len(value) < sub["minLength"])


def _object_passes(value: dict[str, Any], sub: dict[str, Any]) -> bool:
    required = sub.get("required")
    if required and not all(k in value for k in required):
        return False
    props = sub.get("properties") or {}
    extra = sub.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            if not _passes(item, props[key]):
                return False
        elif extra is not True and not (extra is not False and _passes(item, extra)):
            return False
    return True


def _checked(validator: Any, value: Any, sub: Any, path: str | int, schema_path: str | None) -> Iterator[Any]:
    """jsonschema's errors of ``value`` (at ``path``) against ``sub``, without its descend (an
    evolved validator per value, the cost this saves) where :func:`_passes` sees it is valid."""
    if _passes(value, sub):
        return
    yield from validator.descend(value, sub, path=path, schema_path=schema_path)


def _properties(validator: Any, properties: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``properties`` keyword, leaves checked by :func:`_checked`."""
    if not validator.is_type(instance, "object"):
        return
    for prop, sub in properties.items():
        if prop in instance:
            yield from _checked(validator, instance[prop], sub, prop, prop)


def _items(validator: Any, items: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``items`` keyword, leaves checked by :func:`_checked` (with ``prefixItems``
    or ``items: false``, jsonschema's own)."""
    if items is False or (isinstance(schema, dict) and schema.get("prefixItems")):
        yield from _keywords.items(validator, items, instance, schema)
        return
    if not validator.is_type(instance, "array"):
        return
    for index, value in enumerate(instance):
        yield from _checked(validator, value, items, index, None)


_FastValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"properties": _properties, "items": _items})


_DEFS_REF = "#/$defs/"


#: Keywords that only annotate: a validator checks nothing with them.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated"})
#: Keywords whose value is a schema, a list of schemas, or a mapping of names to schemas.
_SUBSCHEMA = frozenset({"items", "additionalProperties", "not", "if", "then", "else", "contains",
                        "propertyNames", "unevaluatedItems", "unevaluatedProperties"})
_SUBSCHEMAS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_NAMED_SUBSCHEMAS = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as jsonschema checks it fastest, checking the same: each ``{"$ref": "#/$defs/X"}``
    (annotations beside it) replaced by X itself, and the annotations dropped. A reference back
    into a definition being inlined stays a reference (``$defs`` stays for it)."""
    defs = schema.get("$defs", {})

    def walk(node: Any, inside: frozenset[str]) -> Any:
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_DEFS_REF) and set(node) - {"$ref"} <= _ANNOTATIONS:
            name = ref[len(_DEFS_REF):]
            target = defs.get(name)
            if isinstance(target, dict) and name not in inside:
                return walk(target, inside | {name})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _ANNOTATIONS:
                continue
            if key in _SUBSCHEMA:
                value = walk(value, inside)
            elif key in _SUBSCHEMAS and isinstance(value, list):
                value = [walk(v, inside) for v in value]
            elif key in _NAMED_SUBSCHEMAS and isinstance(value, dict):
                value = {name: walk(v, inside) for name, v in value.items()}
            out[key] = value
        return out

    out: dict[str, Any] = walk(schema, frozenset())
    return out


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


#: Keys a gallery template leaves to its gallery entry.
TEMPLATE_KEYS: dict[Path_, tuple[str, ...]] = {(): ("name", "parameters"), ("parameters",): ("model",)}
#: Keys a config whose backend loads no model file may leave out.
MODEL_KEYS: dict[Path_, tuple[str, ...]] = {(): ("parameters",), ("parameters",): ("model",)}
_TEMPLATE_HINT = {
    "name": " (a gallery body gets it from its gallery entry; this mapping was checked as a full "
            "config because of --no-template or its other keys)",
    "parameters": " (parameters.model names the model file; a gallery body gets it from its gallery entry)",
    "model": " (the model file; a gallery body gets it from its gallery entry)",
}
#: Said once per file whose configs were checked as gallery bodies.
BODY_NOTE = "gallery body: checked as a template (name and parameters.model come from its gallery entry)"
#: Plain words yaml.v3 decodes into a typed bool field (YAML 1.1 bools; elsewhere they stay strings).
YAML11_BOOLS = {w: True for w in ("y", "Y", "yes", "Yes", "YES", "on", "On", "ON")} | {
    w: False for w in ("n", "N", "no", "No", "NO", "off", "Off", "OFF")}


def is_gallery_body(data: Any) -> bool:
    """A gallery body (the ``config_file`` a gallery entry installs): a mapping that names no model,
    neither ``name`` nor ``parameters.model`` (the entry supplies both)."""
    if not isinstance(data, dict) or "name" in data:
        return False
    params = data.get("parameters")
    return not (isinstance(params, dict) and "model" in params)


@dataclass(frozen=True)
class _SchemaResult:
    diagnostics: list[Diagnostic]
    bad: list[Path_]
    """Paths whose values the schema refuses: left out of the best-effort config."""


def schema_diagnostics(doc: Document, *, template: bool = False) -> list[Diagnostic]:
    """JSON Schema errors of one document, each mapped back to its YAML mark."""
    return _schema(doc, template=template).diagnostics


def _model_keys_optional(data: Any) -> bool:
    """The config loads no model file (:func:`~harness.config.kinds.config_kind`): an alias, a
    pipeline, a cloud proxy, a router, a pattern detector, a store, or a backend that loads none."""
    return not config_kind(data).loads_model


def _schema(doc: Document, *, template: bool) -> _SchemaResult:
    out: list[Diagnostic] = []
    bad: list[Path_] = []
    validator = _validator()
    # A config that certainly passes (most do) is not walked again by jsonschema; any other is
    # walked by it, and every error reported is jsonschema's.
    errors = [] if _passes(doc.data, validator.schema) else sorted(
        validator.iter_errors(doc.data), key=lambda e: list(map(str, e.absolute_path)))
    optional = any(e.validator == "required" for e in errors) and _model_keys_optional(doc.data)
    for e in errors:
        path = tuple(e.absolute_path)
        if _yaml11_bool(doc, e):
            continue  # yaml.v3 reads yes/no/on/off into a bool field: LocalAI takes it
        truncated = _truncated_int(doc, e)
        if truncated is not None:
            out.append(truncated)  # yaml.v3 decodes 0.9 into an int field as 0: LocalAI loads it
            continue
        if isinstance(e.instance, float) and not math.isfinite(e.instance):
            bad.append(path)  # the finite-number rule says what is wrong with it
            continue
        if e.validator == "additionalProperties" and isinstance(e.instance, dict):
            props = e.schema.get("properties", {}) if isinstance(e.schema, dict) else {}
            bad += [(*path, k) for k in e.instance if k not in props]
        elif e.validator not in ("required", *_BOUNDS) or _out_of_go_range(e):
            bad.append(path)  # a value out of a bound is this harness's limit: LocalAI passes it on, kept
        out.extend(_schema_error(doc, e, template=template, model_optional=optional))
    return _SchemaResult(diagnostics=out, bad=bad)


def _yaml11_bool(doc: Document, e: ValidationError) -> bool:
    """A YAML 1.1 bool word where the schema wants a boolean: set it (as yaml.v3 decodes it)."""
    wanted = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
    if e.validator != "type" or "boolean" not in wanted or not isinstance(e.instance, str):
        return False
    if e.instance not in YAML11_BOOLS:
        return False
    path = list(e.absolute_path)
    cur: Any = doc.data
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = YAML11_BOOLS[e.instance]
    return True


def _truncated_int(doc: Document, e: ValidationError) -> Diagnostic | None:
    """A finite fractional number where the schema wants an integer: yaml.v3 decodes it into
    LocalAI's int field truncated toward zero (its decoder's float case of an int kind), so LocalAI
    loads it with another value. Set it as LocalAI reads it and say so (a warning)."""
    wanted = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
    value = e.instance
    if (e.validator != "type" or "integer" not in wanted or type(value) is not float
            or not math.isfinite(value) or not e.absolute_path):
        return None
    path = list(e.absolute_path)
    cur: Any = doc.data
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = int(value)
    where = dotted(tuple(path))
    return doc.diag(tuple(path), refs.severity("LAI007"),
                    f"{where}: {value!r} is not an integer; LocalAI's field is one and yaml.v3 truncates "
                    f"the value to {int(value)}, which LocalAI then uses", code="LAI007")


@functools.lru_cache(maxsize=64)
def _letter_counts(candidates: tuple[str, ...]) -> tuple[tuple[str, int, Counter[str]], ...]:
    return tuple((c, len(c), Counter(c)) for c in candidates)


def _did_you_mean(word: str, candidates: tuple[str, ...]) -> str:
    """:func:`~harness.core.errors.did_you_mean`'s answer, sooner: difflib only looks at the
    candidates whose ``quick_ratio`` (the letters two words share, an upper bound of their
    similarity) reaches its 0.6 cutoff, computed here from letter counts made once per vocabulary.
    difflib drops every other candidate on that same test, so the answer is the same."""
    counts = Counter(word)
    n = len(word)
    close = [c for c, length, letters in _letter_counts(candidates)
             if n + length and 2.0 * sum(min(k, letters[ch]) for ch, k in counts.items()) / (n + length) >= 0.6]
    return did_you_mean(word, close)


def _misplaced(section: str, key: str) -> str | None:
    """Where an unknown ``key`` of ``section`` belongs, when LocalAI reads it elsewhere."""
    vocab = vocabulary()
    if section == "parameters" and key in vocab.keys["config"]:
        return "at the top level"
    if section == "config" and key in vocab.keys["parameters"]:
        return "under parameters:"
    return None


def _schema_error(doc: Document, e: ValidationError, *, template: bool = False,
                  model_optional: bool = False) -> list[Diagnostic]:
    path = tuple(e.absolute_path)
    where = dotted(path)
    v = e.validator
    if v == "additionalProperties" and isinstance(e.instance, dict):
        props = e.schema.get("properties", {}) if isinstance(e.schema, dict) else {}
        extra = [k for k in e.instance if k not in props]
        inside = f" in {where}" if path else ""
        section = "config" if not path else str(path[-1])
        out = []
        for k in extra:
            # yaml.v3 drops a key no field takes (LocalAI decodes leniently): accepted, probably wrong.
            home = _misplaced(section, str(k)) if len(path) <= 1 else None
            if not path and k in vocabulary().gallery_metadata:
                out.append(doc.diag((k,), "note", f"{k!r} describes a gallery entry (LocalAI's GalleryModel); "
                                                  "a model config has no such field and LocalAI ignores it",
                                    key=True, code="HRN010"))
                continue
            if home is not None:
                msg = (f"{k!r} under {where}: is silently ignored by LocalAI there; it belongs {home}")
            else:
                msg = f"unknown key {k!r}{inside}: LocalAI ignores it{_did_you_mean(str(k), tuple(props))}"
            out.append(doc.diag((*path, k), refs.severity("LAI009"), msg, key=True, code="LAI009"))
        return out
    if v == "required" and isinstance(e.validator_value, list) and isinstance(e.instance, dict):
        # jsonschema reports one error per missing key, each carrying the whole list.
        missing = [k for k in e.validator_value if k not in e.instance and repr(k) in e.message]
        if template:
            missing = [k for k in missing if k not in TEMPLATE_KEYS.get(path, ())]
        if model_optional:  # the backend loads no model file: parameters.model (and parameters:) may go
            missing = [k for k in missing if k not in MODEL_KEYS.get(path, ())]
        label = "the config" if not path else where
        hints = _TEMPLATE_HINT if path in TEMPLATE_KEYS else {}
        return [_missing(doc, path, label, k, hints.get(k, "")) for k in missing]
    code = "HRN002"  # this harness's bounds and choices: LocalAI passes the value on
    if v == "type":
        wanted = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        names = " or ".join(_TYPE_NAMES.get(str(t), str(t)) for t in wanted if t != "null")
        msg = (f"{where}: expected {names}, found {_found(e.instance)}: yaml.v3 cannot decode it into "
               "LocalAI's field, so LocalAI refuses the file")
        if path == ("gpu_layers",) and isinstance(e.instance, str):
            msg += f"; {GPU_LAYERS_HINT}"
        code = "LAI013"
    elif _out_of_go_range(e):
        msg = (f"{where}: {e.instance!r} does not fit a 64-bit integer: yaml.v3 cannot decode it, so LocalAI "
               "refuses the file")
        code = "LAI013"
    elif v == "enum":
        choices = [str(c).lower() if isinstance(c, bool) else str(c) for c in e.validator_value if c is not None]
        msg = (f"{where}: expected one of {', '.join(choices)}, found {_found(e.instance)}"
               f"{did_you_mean(str(e.instance), choices)}")
    elif v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[v]
        msg = f"{where}: must be {op} {e.validator_value}, found {e.instance!r}"
    elif v == "minLength":
        msg = f"{where}: must not be empty"
    elif v == "pattern" and (words := _pattern_words(e)):
        names = " or ".join(_TYPE_NAMES.get(str(t), str(t)) for t in _types(e.schema) if t not in ("null", "string"))
        msg = (f"{where}: expected {names + ' or ' if names else ''}{' or '.join(words)}, found "
               f"{_found(e.instance)}{did_you_mean(str(e.instance).lower(), words)}")
    else:
        msg = f"{where}: {e.message}"
    if path[:1] == ("engine_args",) and code == "HRN002":
        code = "HRN006"  # an option of this harness's engines: its engine refuses the value at load
    elif code == "HRN002" and v in _BOUNDS:
        msg += " (this harness's bound: LocalAI passes the value on)"
    return [doc.diag(path, "error", msg, code=code)]


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_GO_INT = range(-(2**63), 2**63)
#: Said with LocalAI's refusal of a word in gpu_layers (its field is an integer).
GPU_LAYERS_HINT = "for layers fitted to memory write options: [gpu_layers:auto] (LocalAI passes options through)"
#: The pattern the schema gives a field that takes a number or one of some words (``^(auto)$``).
_WORDS_PATTERN = re.compile(r"\^\(([\w|-]+)\)\$")


def _types(schema: Any) -> list[str]:
    kinds = schema.get("type", []) if isinstance(schema, dict) else []
    return [kinds] if isinstance(kinds, str) else list(kinds)


def _pattern_words(e: ValidationError) -> list[str]:
    """The words a number-or-word field takes (its ``^(a|b)$`` pattern), [] for another pattern."""
    found = _WORDS_PATTERN.fullmatch(str(e.validator_value))
    return found.group(1).split("|") if found else []


def _out_of_go_range(e: ValidationError) -> bool:
    """An integer no Go integer field holds: yaml.v3 refuses to decode it."""
    return e.validator in _BOUNDS and type(e.instance) is int and e.instance not in _GO_INT


def _missing(doc: Document, path: Path_, label: str, key: str, hint: str) -> Diagnostic:
    """A required key the config lacks, as LocalAI takes it: no name is loaded under the empty name
    (a warning); no model is a backend given nothing to load (an error)."""
    message = f"{label} is missing the required key {key!r}{hint}"
    if not path and key == "name":
        message = f"{label} is missing the required key {key!r}"
        message += ("; LocalAI loads it under the empty name, where no request can name it and the next "
                    "nameless config replaces it")
        return doc.diag(path, "warning", message, code="LAI010")
    if key in MODEL_KEYS.get(path, ()):
        message += ": the backend is handed no model and fails at load"
        return doc.diag(path, "error", message, code="LAI008")
    return doc.diag(path, "error", message, code="HRN002")


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Validated:
    """One config document after validation, with everything that could still be determined."""

    document: Document
    options: ResolvedOptions
    diagnostics: tuple[Diagnostic, ...]
    config: ModelConfig | None = None
    """The typed config, refused values left out (None when the document is not a mapping)."""
    engine: str | None = None
    """The registered engine the backend resolves to."""
    template: bool = False
    unused: tuple[tuple[str, Path_], ...] = ()
    """LocalAI keys given that this harness does not use (dotted name, where)."""

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

    @property
    def notes(self) -> int:
        return sum(d.severity == "note" for d in self.diagnostics)

    def exit_code(self, *, strict: bool = False) -> int:
        """1 on an error, or with ``strict`` on a warning; notes (this harness's coverage) never fail."""
        return 1 if self.errors or (strict and self.warnings) else 0

    def to_json(self, *, strict: bool = False) -> dict[str, Any]:
        return {"ok": self.exit_code(strict=strict) == 0, "files": self.files, "configs": self.configs,
                "errors": self.errors, "warnings": self.warnings, "notes": self.notes,
                "diagnostics": [d.to_json() for d in self.diagnostics]}


def _as_localai_reads(config: ModelConfig) -> ModelConfig:
    """known_usecases as LocalAI's GetUsecasesFromYAML reads them: FLAG_* names and any case taken
    (as the lower-case names this harness uses), unknown ones dropped."""
    names = [n for n in map(usecase_name, config.known_usecases) if n is not None]
    if names == list(config.known_usecases):
        return config
    return dataclasses.replace(config, known_usecases=tuple(dict.fromkeys(names)))


def _config_files(directory: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(root, f) for f in files if f.endswith(YAML_SUFFIXES) and not f.startswith(".")]
    return sorted(found)


def iter_config_files(paths: Iterable[str | Path]) -> Iterator[tuple[str, Path | None]]:
    """YAML files under ``paths`` (directories recursively, hidden ones skipped), sorted.

    Yields ``(display name, path)``; the path is None when the argument does not exist.
    """
    for arg in paths:
        p = Path(arg)
        if os.path.isdir(p):  # os.path's tests: a name too long for the file system is absent, not an OSError
            for f in _config_files(p):
                yield str(f), f
        elif os.path.lexists(p):
            yield str(p), p
        else:
            yield str(p), None


def _unused_keys(doc: Document) -> list[tuple[str, Path_]]:
    """LocalAI keys of the document that this harness accepts without using."""
    data = doc.data if isinstance(doc.data, dict) else {}
    vocab = vocabulary()
    out: list[tuple[str, Path_]] = [(k, (k,)) for k in data if k in vocab.unused("config")]
    for section in ("parameters", "template"):
        sub = data.get(section)
        if isinstance(sub, dict):
            out += [(f"{section}.{k}", (section, k)) for k in sub if k in vocab.unused(section)]
    return out


def _as_rules(diags: Iterable[Diagnostic]) -> tuple[Diagnostic, ...]:
    """Each finding with its rule's severity (:mod:`harness.config.refs`): the table is the one place
    a severity is decided, and a rule without a reference is a note."""
    out = []
    for d in diags:
        severity = refs.severity(d.code)
        out.append(d if severity == d.severity else dataclasses.replace(d, severity=severity))
    return tuple(out)


#: ``# harness: ignore[CODE]`` or ``# harness: ignore[CODE, CODE]`` at the end of a line.
_IGNORE_COMMENT = re.compile(r"#\s*harness:\s*ignore\[([A-Za-z0-9_,\s]*)\]")
_IGNORE_MARK = "ignore["  # what every such comment holds: the costly scan runs only then


def suppressions(text: str | bytes) -> dict[int, frozenset[str]]:
    """Line -> the codes a ``# harness: ignore[...]`` comment on that line silences."""
    if isinstance(text, bytes):
        if _IGNORE_MARK.encode() not in text:
            return {}
        text = text.decode("utf-8-sig", "replace")
    elif _IGNORE_MARK not in text:
        return {}
    out: dict[int, frozenset[str]] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        m = _IGNORE_COMMENT.search(line)
        if m is not None:
            out[n] = frozenset(c.strip().upper() for c in m.group(1).split(",") if c.strip())
    return out


def _dedupe(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[int, int, str, str]] = set()
    out = []
    for d in diags:
        key = (d.line, d.col, d.severity, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


class Validator:
    """Validates model configs; reusable across files (the schema is compiled once).

    :param engines: valid ``backend`` names; default: what the plugin manager registers plus every
        engine with a descriptor (``engines/<name>/engine.yaml``): an engine whose plugin is not
        written yet is known, and its configs get the shared schema's rules.
    :param models_dir: where model paths resolve; None checks paths by shape only.
    :param pm: plugin manager whose registered engines add their own rules (``config_check``)
        for the configs whose backend resolves to them; default: the process-wide one when
        ``engines`` is not given.
    :param template: True: every config is a gallery body (``name`` and ``parameters.model`` are
        the gallery entry's, not required here); False: none is; None (default): each mapping
        is recognised on its own (:func:`is_gallery_body`).
    :param ignore: rule codes silenced everywhere (``--ignore``); a ``# harness: ignore[CODE]``
        comment silences one on its own line.
    :param localai: judge backend names by this LocalAI release (a tag of the generated history,
        :meth:`~harness.config.localai.History.release`); None: the pinned commit's.
    """

    def __init__(self, *, engines: Collection[str] | None = None, models_dir: Path | None = None,
                 pm: pluggy.PluginManager | None = None, template: bool | None = None,
                 ignore: Collection[str] = (), localai: str | None = None) -> None:
        self.localai = localai
        self._engines = frozenset(engines) if engines is not None else None
        self.ignore = frozenset(c.upper() for c in ignore)
        self.models_dir = models_dir
        self.template = template
        self._pm = pm
        self._use_default_pm = engines is None and pm is None
        self._impls: tuple[frozenset[int] | None, dict[str, Any]] | None = None

    @property
    def engines(self) -> frozenset[str]:
        if self._engines is None:
            try:
                plugins = (known_engines_from_plugins() if self._pm is None
                           else known_engines_from_plugins(self._pm))
            except Exception:  # a broken third-party plugin must not hide config errors
                plugins = frozenset()
            self._engines = plugins | described_engines()
        return self._engines

    def validate_document(self, doc: Document, *, template: bool | None = None) -> Validated:
        if template is None:
            template = self.template if self.template is not None else is_gallery_body(doc.data)
        if not isinstance(doc.data, dict):
            found = _found(doc.data)
            diag = doc.diag((), "error", f"a model config is a mapping (name:, backend:, parameters: ...), "
                                         f"found {found}: yaml.v3 cannot decode it, so LocalAI refuses the file",
                            code="LAI013")
            return Validated(document=doc, options=ResolvedOptions(), diagnostics=_as_rules((diag,)),
                             template=template)
        schema = _schema(doc, template=template)
        diags = list(schema.diagnostics)
        backend = str_at(doc.data, "backend")
        verdict = resolve_backend(backend, self.engines, release=self.localai) if backend else None
        engine = verdict.engine if verdict is not None else None
        # A backend no engine here serves gets only the shared schema: its options are its own; so
        # does one that passes any option key through (diffusers).
        opts = (ResolvedOptions() if (verdict is not None and engine is None) or open_options(backend)
                else resolve_options(doc, localai=backend_options(backend or engine),
                                     parsed=options_parsed(backend)))
        diags += opts.diagnostics
        numbers = tuple(non_finite(doc.data))
        ctx = Context(engines=self.engines, models_dir=self.models_dir, template=template, non_finite=numbers,
                      localai=self.localai)
        diags += check(doc, opts, ctx)
        if engine is not None:
            diags += self._render_refusal(doc, opts, engine)
        bad = schema.bad + [p for p, _ in numbers]
        config = _as_localai_reads(best_effort(doc.data, bad))
        check_ctx = CheckContext(document=doc, options=opts, engines=self.engines,
                                 models_dir=self.models_dir, engine=engine, template=template)
        diags += self._plugin_checks(doc, config, check_ctx)
        coded = _as_rules(_dedupe(sorted(diags, key=lambda d: (d.line, d.col))))
        unused = _unused_keys(doc) + [(f"options {k}", p) for k, p in opts.localai.items()]
        return Validated(document=doc, options=opts, diagnostics=coded, config=config,
                         engine=engine, template=template, unused=tuple(unused))

    def _render_refusal(self, doc: Document, opts: ResolvedOptions, engine: str) -> list[Diagnostic]:
        """What ``video check``, ``select`` and ``serve`` refuse about a video config itself: an engine
        that cannot render its family, in their words."""
        from harness.config.video_rules import family_refusal

        if not opts.video_engaged:
            return []
        if self._pm is None and not self._use_default_pm:
            return []  # a caller's own engine list and no plugins: no engine to ask
        declared = opts.get("video_family")
        try:
            why = family_refusal(engine, declared if isinstance(declared, str) else None, self._pm)
        except Exception:  # a broken plugin must not hide config errors
            return []
        if why is None:
            return []
        given = opts.values.get("video_family")
        path = given.path if given is not None and given.path is not None else ("backend",)
        return [doc.diag(path, "warning", why, code="HRN019")]

    def _plugin_checks(self, doc: Document, config: ModelConfig, context: CheckContext) -> list[Diagnostic]:
        if context.engine is None or (self._pm is None and not self._use_default_pm):
            return []
        from harness.engine import registry

        try:
            # Registering runs every plugin's hook: asked again only when the plugins change.
            key = frozenset(map(id, self._pm.get_plugins())) if self._pm is not None else None
            if self._impls is None or self._impls[0] != key:
                self._impls = (key, dict(registry.engines(self._pm)))
            impl = self._impls[1].get(context.engine)
        except Exception:  # a broken plugin must not hide config errors
            self._use_default_pm = False
            return []
        if impl is None or impl.config_check is None:
            return []
        try:
            answers = impl.config_check(config, context)
        except Exception as e:  # report, do not crash; but a check that could not run has not passed
            return [doc.diag((), "error", f"the {context.engine} plugin's config check failed with "
                                          f"{type(e).__name__}: {e}; the config was not checked by it. Fix "
                                          "what the error names (a model file it could not read) or report the plugin bug",
                             code="HRN015")]
        out: list[Diagnostic] = []
        for item in answers or ():
            if isinstance(item, Diagnostic):
                out.append(item)
            elif isinstance(item, str):
                out.append(doc.diag((), "error", item, code="HRN017"))
        return out

    def validate_text(self, text: str | bytes, file: str = "<string>") -> list[Validated | Diagnostic]:
        """Validate every document of a YAML text; text-level problems come back as diagnostics.

        A list of configs (LocalAI's config-file form) gives one result per item; a gallery
        file (``config_file:`` body) gives its body's configs, checked as templates.
        """
        docs, problems = load_text(text, file)
        out: list[Validated | Diagnostic] = list(problems)
        forced = self.template
        if not docs and not problems:
            out.append(Diagnostic(file=file, line=1, col=1, severity="warning", code="LAI010",
                                  message="empty file: LocalAI loads it as an empty config under the empty "
                                          "name; a model config needs name: and parameters:"))
        for n, doc in enumerate(docs):
            if n:
                # yaml.v3's Unmarshal, which LocalAI reads every config and gallery file with,
                # decodes the first document and stops: this one is never loaded
                out.append(doc.diag((), "warning", LATER_DOCUMENT.format(n=n + 1), code="LAI014"))
            if isinstance(doc.data, list):  # LocalAI's config-file form: a list of configs
                for i, item in enumerate(doc.data):
                    out.append(self.validate_document(_subdocument(doc, i, item)))
            elif is_gallery_file(doc.data):
                body_docs, body_problems = body_documents(doc, text if isinstance(text, str)
                                                          else text.decode("utf-8-sig", "replace"))
                out += body_problems
                out += [self.validate_document(d, template=forced is not False) for d in body_docs]
            else:
                out.append(self.validate_document(doc))
        return self._silenced(_body_note(_one_unused_note(out, file)), suppressions(text))

    def _kept(self, d: Diagnostic, inline: dict[int, frozenset[str]]) -> bool:
        return d.code not in self.ignore and d.code not in inline.get(d.line, ())

    def _silenced(self, items: list[Validated | Diagnostic],
                  inline: dict[int, frozenset[str]]) -> list[Validated | Diagnostic]:
        """``items`` with their severities the rules' and without what ``--ignore`` or a
        ``# harness: ignore[CODE]`` comment on the line silences."""
        out: list[Validated | Diagnostic] = []
        for item in items:
            if isinstance(item, Diagnostic):
                item = _as_rules((item,))[0]
                if self._kept(item, inline):
                    out.append(item)
            elif (self.ignore or inline) and item.diagnostics:
                kept = tuple(d for d in item.diagnostics if self._kept(d, inline))
                out.append(item if len(kept) == len(item.diagnostics)
                           else dataclasses.replace(item, diagnostics=kept))
            else:
                out.append(item)
        return out

    def validate_paths(self, paths: Iterable[str | Path]) -> Report:
        report = Report()
        # LocalAI loads the configs of one models directory (not its subdirectories) into one
        # map by name: a name is unique per directory, not across the directories checked
        names: dict[tuple[str, str], Diagnostic] = {}
        for arg in paths:
            p = Path(arg)
            files: list[tuple[str, Path | None]]
            if os.path.isdir(p):  # a name too long for the file system is absent, not an OSError
                files = [(str(f), f) for f in _config_files(p)]
                if not files:
                    report.diagnostics.append(Diagnostic(
                        file=str(p), line=1, col=1, severity="error", code="HRN016",
                        message="no model configs here: the directory holds no *.yaml or *.yml file"))
            else:
                # a dangling link or a loop is read (and refused) like any other non-file
                files = [(str(p), p if os.path.lexists(p) else None)]
            for display, path in files:
                self._validate_file(display, path, report, names)
        return report

    def _validate_file(self, display: str, path: Path | None, report: Report,
                       names: dict[tuple[str, str], Diagnostic]) -> None:
        if path is None:
            report.diagnostics.append(Diagnostic(file=display, line=1, col=1, severity="error",
                                                 message="no such file or directory", code="HRN016"))
            return
        report.files += 1
        try:
            # each file on its own: a FIFO or a link to /dev/zero among the configs is refused
            # unread and the others are still checked
            text = read_bytes(path, kind="config", error=ConfigError)
        except ConfigError as e:
            report.diagnostics.append(Diagnostic(file=display, line=1, col=1, severity="error",
                                                 message=f"cannot read: {e}", code="HRN016"))
            return
        inline = suppressions(text)
        for item in self.validate_text(text, display):
            if isinstance(item, Diagnostic):
                report.diagnostics.append(item)
                continue
            report.configs += 1
            report.diagnostics.extend(item.diagnostics)
            self._unique_name(item.document, names, report, inline)

    def _unique_name(self, doc: Document, names: dict[tuple[str, str], Diagnostic], report: Report,
                     inline: dict[int, frozenset[str]]) -> None:
        name = doc.data.get("name") if isinstance(doc.data, dict) else None
        if not isinstance(name, str) or not name:
            return
        here = doc.diag(("name",), "warning", "")
        first = names.setdefault((os.path.dirname(os.path.abspath(doc.file)), name), here)
        if first is not here and self._kept(dataclasses.replace(here, code="LAI015"), inline):
            report.diagnostics.append(doc.diag(
                ("name",), "warning", code="LAI015", message=
                f"model name {name!r} is already used at {first.file}:{first.line}:{first.col}: LocalAI "
                "loads both and keeps the one it reads last (files in name order), dropping the other "
                "without a word"))


LATER_DOCUMENT = ("YAML document {n} of this file is never loaded: LocalAI reads a config file with "
                  "yaml.v3's Unmarshal, which decodes the first document only; give it a file of its "
                  "own, or make the file a list of configs")


def _body_note(items: list[Validated | Diagnostic]) -> list[Validated | Diagnostic]:
    """Say once per file that its configs were checked as gallery bodies."""
    first = next((i for i in items if isinstance(i, Validated) and i.template), None)
    if first is None:
        return items
    note = first.document.diag((), "note", BODY_NOTE, code="HRN008")
    merged = dataclasses.replace(
        first, diagnostics=tuple(sorted((note, *first.diagnostics), key=lambda d: (d.line, d.col))))
    return [merged if i is first else i for i in items]


def _one_unused_note(items: list[Validated | Diagnostic], file: str) -> list[Validated | Diagnostic]:
    """One note per file naming every LocalAI key it gives that the harness does not use."""
    validated = [i for i in items if isinstance(i, Validated) and i.unused]
    if not validated:
        return items
    names: list[str] = []
    for v in validated:
        names += [n for n, _ in v.unused if n not in names]
    first = validated[0]
    where = first.document.diag(first.unused[0][1], "note",
                                f"LocalAI keys this harness does not use: {', '.join(names)}",
                                key=True, code="HRN009")
    merged = dataclasses.replace(
        first, diagnostics=tuple(sorted((*first.diagnostics, where), key=lambda d: (d.line, d.col))))
    return [merged if i is first else i for i in items]


def _subdocument(doc: Document, index: int, data: Any) -> Document:
    """One item of a list-of-configs file, with its marks re-rooted."""
    sub = Document(file=doc.file, data=data)
    sub.values = {p[1:]: m for p, m in doc.values.items() if p[:1] == (index,)}
    sub.keys = {p[1:]: m for p, m in doc.keys.items() if p[:1] == (index,)}
    return sub
