"""``options:`` and ``engine_args:``: parse, type, and merge them with provenance.

The one parser of these surfaces: ``harness validate``, ``config show``, the video path
and the engine plugins all read options through it.

``options:`` items are ``key:value`` strings split on the *first* colon, so JSON
values (``speculative_config:{"method":"mtp"}``) survive; an item without a colon is
a flag (some backends take those; whether this one does is its engine plugin's rule).
``engine_args:`` is a typed map applied afterwards, so it wins. Dotted keys
(``sampling.top_k``) set nested parameters. Unknown keys are kept but warned about:
they may belong to another engine; the keys LocalAI's backend of the config takes are
only collected (accepted, not used by this harness).

Tri-state booleans (``enable_prefix_caching``, ``flash_attn``, ...) are defined here
once: unset, true, explicit false, encoded for engines as 0, 1, 2 (:func:`tristate`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.loader import Diagnostic, Document, Path_
from harness.config.localai import anchor, vocabulary
from harness.config.model import (
    NESTED_OPTIONS,
    OPTION_ALIASES,
    OptionSpec,
    nested_specs,
    option_specs,
)
from harness.core.errors import did_you_mean

TRUE = frozenset({"1", "t", "true", "yes", "y", "on"})
FALSE = frozenset({"0", "f", "false", "no", "n", "off"})
#: Words a tri-state boolean takes for "unset" (the engine decides).
UNSET = frozenset({"", "auto", "default"})
#: The tri-state encoding engines receive, and what each value means.
TRISTATE_MEANING = {0: "engine default", 1: "on", 2: "force off"}


def tristate_value(value: Any) -> bool | None:
    """A tri-state boolean: True, False or None (unset), never collapsing False into unset.

    Takes a bool or None, a word (``true``/``on``/``yes``..., ``false``/``off``/``no``...,
    ``auto``/``default``/empty for unset) or a value already encoded (the integers 0, 1, 2).

    :raises ValueError: for anything else.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in TRISTATE_MEANING:
        return None if value == 0 else value == 1
    if isinstance(value, str):
        word = value.strip().lower()
        if word in UNSET:
            return None
        if word in TRUE or word in FALSE:
            return word in TRUE
    msg = f"a tri-state boolean is true, false or unset (or its encoding 1, 2, 0), not {value!r}"
    raise ValueError(msg)


def tristate(value: Any) -> int:
    """The engines' encoding of a tri-state boolean: unset 0, true 1, explicit false 2.

    :raises ValueError: for a value :func:`tristate_value` does not take.
    """
    v = tristate_value(value)
    return 0 if v is None else (1 if v else 2)


@dataclass(frozen=True, kw_only=True)
class Setting:
    """A value and where it came from (default, options, engine_args, context_size, ...)."""

    value: Any
    source: str
    path: Path_ | None = None


@dataclass(kw_only=True)
class ResolvedOptions:
    """The merged options surfaces of one config."""

    values: dict[str, Setting] = field(default_factory=dict)
    """Known keys (canonical spelling) -> the winning setting."""

    nested: dict[str, dict[str, Setting]] = field(default_factory=dict)
    """Dotted keys: prefix -> sub-key -> setting."""

    unknown: dict[str, Setting] = field(default_factory=dict)
    """Keys no engine option of ours knows; passed through, ignored by our engines."""

    localai: dict[str, Path_] = field(default_factory=dict)
    """Keys of LocalAI's backend of this config (accepted, not used here) -> where given."""

    items: list[tuple[int, str, str | None]] = field(default_factory=list)
    """``options:`` as written: (index, key, value; None for a flag without a colon)."""

    given: set[str] = field(default_factory=set)
    """Canonical keys that appeared at all, valid or not."""

    invalid: dict[str, str] = field(default_factory=dict)
    """Canonical keys whose value could not be typed -> the problem (the last one given)."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def video_engaged(self) -> bool:
        """True when any video option is set: the config describes a video checkpoint set."""
        specs = option_specs()
        return any(specs[k].video and k != "ffmpeg" for k in self.values)

    def get(self, key: str, default: Any = None) -> Any:
        s = self.values.get(key)
        return default if s is None else s.value


def canonical(key: str) -> str:
    """The canonical spelling of an option key (dashes as underscores, aliases resolved)."""
    key = key.strip().replace("-", "_")
    return OPTION_ALIASES.get(key, key)


def parameter(key: str) -> str:
    """The parameter ``harness config show`` lists for a key that sets it.

    Option and engine_args keys by their canonical spelling (``max_num_seqs`` -> ``n_parallel``),
    LocalAI's top-level keys by the parameter they feed (``localai.yaml``: ``context_size`` and
    ``max_model_len`` -> ``n_ctx``, ``gpu_layers`` -> ``n_gpu_layers``). Engine runtimes map
    their own arguments from these names.
    """
    name = canonical(key)
    return vocabulary().used("config").get(name, name)


def localai_spec_type(value: str) -> str:
    """A spec_type as LocalAI's llama-cpp gRPC server reads it: '_' as '-', ``draft`` as
    ``draft-simple``, ``eagle3`` as ``draft-eagle3`` (each of a comma-separated list)."""
    names = []
    for item in value.strip().split(","):
        name = item.strip().replace("_", "-")
        names.append({"draft": "draft-simple", "eagle3": "draft-eagle3"}.get(name, name))
    return ",".join(n for n in names if n)


def split_option(item: str) -> tuple[str, str | None]:
    """One ``options:`` item as (key, value): split on the first colon, the key stripped;
    the value is None for a flag (an item without a colon)."""
    key, colon, value = item.partition(":")
    return key.strip(), (value if colon else None)


@functools.cache
def _known_names() -> list[str]:
    names = [*option_specs(), *OPTION_ALIASES]
    for prefix in NESTED_OPTIONS:
        names += [f"{prefix}.{k}" for k in nested_specs(prefix)]
    return names


def _bounds(label: str, spec: OptionSpec, value: float) -> str | None:
    if spec.minimum == 1 and spec.kind == "int" and value < 1:
        return f"{label} must be a positive integer, found {value!r}"
    if spec.minimum is not None and value < spec.minimum:
        return f"{label} must be >= {spec.minimum:g}, found {value!r}"
    if spec.exclusive_minimum is not None and value <= spec.exclusive_minimum:
        return f"{label} must be > {spec.exclusive_minimum:g}, found {value!r}"
    if spec.maximum is not None and value > spec.maximum:
        return f"{label} must be <= {spec.maximum:g}, found {value!r}"
    if spec.exclusive_maximum is not None and value >= spec.exclusive_maximum:
        return f"{label} must be < {spec.exclusive_maximum:g}, found {value!r}"
    return None


def convert(label: str, spec: OptionSpec, value: Any) -> tuple[Any, str | None]:
    """Type ``value`` (a string from ``options:`` or a YAML value) as ``spec`` says.

    Returns ``(value, None)`` or ``(None, message)``. A tri-state boolean returns
    None for "unset", which stays distinct from an explicit False.
    """
    text = value.strip() if isinstance(value, str) else None
    if spec.kind == "bool":
        if isinstance(value, bool):
            return value, None
        if text is not None and text.lower() in TRUE:
            return True, None
        if text is not None and text.lower() in FALSE:
            return False, None
        if spec.tristate and (value is None or (text is not None and text.lower() in UNSET)):
            return None, None
        return None, f"{label} expects true or false, found {value!r}"
    if spec.kind in ("int", "float"):
        if text is not None and spec.choices and text.lower() in spec.choices:
            return text.lower(), None  # a word the number's place takes (n_gpu_layers auto)
        number: Any = value
        if text is not None:
            try:
                number = int(text) if spec.kind == "int" else float(text)
            except ValueError:
                number = None
        words = "".join(f" or {w}" for w in spec.choices)
        if isinstance(number, bool) or not isinstance(number, int | float):
            kind = "an integer" if spec.kind == "int" else "a number"
            hint = did_you_mean(text.lower(), spec.choices) if text and spec.choices else ""
            return None, f"{label} expects {kind}{words}, found {value!r}{hint}"
        if spec.kind == "int" and not isinstance(number, int):
            return None, f"{label} expects an integer{words}, found {value!r}"
        if isinstance(number, float) and not math.isfinite(number):
            return None, f"{label} expects a finite number, found {value!r}"
        problem = _bounds(label, spec, number)
        return (None, problem) if problem else (number, None)
    if spec.kind == "json":
        doc = value
        if text is not None:
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as e:
                return None, f"{label} is not valid JSON: {e.msg} at column {e.colno}"
        if not isinstance(doc, dict):
            return None, f"{label} must be a JSON object, found {type(doc).__name__}"
        return doc, None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return None, f"{label} expects a string, found {value!r}"
    s = str(value).strip()
    if spec.choices and s.lower() not in spec.choices:
        extra = "; there is no automatic choice" if spec.key == "video_device" else ""
        return None, (f"{label} must be one of {', '.join(spec.choices)}, found {s!r}"
                      f"{did_you_mean(s.lower(), spec.choices)}{extra}")
    return (s.lower() if spec.choices else s), None


class _Resolver:
    def __init__(self, doc: Document, localai: frozenset[str] = frozenset(), *, parsed: bool = False) -> None:
        self.doc = doc
        self.localai = localai
        # the backend's own options parser was read: a key it does not compare with is ignored by it
        self.unknown_code = "LAI018" if parsed else "HRN005"
        self.out = ResolvedOptions()
        self.specs = option_specs()
        # engine_args keys the JSON Schema types itself: do not report their types twice.
        self.schema_typed = set(self.specs) | set(OPTION_ALIASES)

    def warn(self, path: Path_, message: str, *, key: bool = False, code: str = "HRN007") -> None:
        self.out.diagnostics.append(self.doc.diag(path, "warning", message, key=key, code=code))

    def error(self, path: Path_, message: str) -> None:
        self.out.diagnostics.append(self.doc.diag(path, "error", message, code="HRN006"))

    def _unknown(self, source: str) -> str:
        return self.unknown_code if source == "options" else "HRN005"

    def set(self, key: str, value: Any, source: str, path: Path_, *, report: bool = True) -> None:
        label = f"option {key}" if source == "options" else f"engine_args.{key}"
        noun = "option" if source == "options" else source
        seen = self.out.values
        name = canonical(key)
        prefix, dot, sub = name.partition(".")
        if dot and prefix in NESTED_OPTIONS:
            subs = nested_specs(prefix)
            if sub not in subs:
                self.warn(path, f"unknown {noun} key {key!r}: ignored"
                                f"{did_you_mean(name, _known_names())}", key=True, code=self._unknown(source))
                self.out.unknown[name] = Setting(value=value, source=source, path=path)
                return
            typed, problem = convert(label, subs[sub], value)
            if problem:
                self.error(path, problem)
                return
            self.out.nested.setdefault(prefix, {})[sub] = Setting(value=typed, source=source, path=path)
            return
        spec = self.specs.get(name)
        self.out.given.add(name)
        if spec is None and (key in self.localai or name in self.localai):
            self.out.localai.setdefault(key, path)
            self.out.unknown[name] = Setting(value=value, source=source, path=path)
            return
        if spec is None:
            self.warn(path, f"unknown {noun} key {key!r}: ignored (it may belong to another engine)"
                            f"{did_you_mean(name, _known_names())}", key=True, code=self._unknown(source))
            self.out.unknown[name] = Setting(value=value, source=source, path=path)
            return
        if name == "spec_type" and isinstance(value, str):
            value = localai_spec_type(value)
            if spec.choices and value not in spec.choices:
                # LocalAI's backend passes any kind through to its engine (which ignores a name it
                # does not know): not a refusal, only outside what this harness's engine runs.
                where = anchor("spec_type_passthrough")
                self.out.diagnostics.append(self.doc.diag(
                    path, "note", f"{label} {value!r}: LocalAI passes it through to the backend's engine "
                                  f"({where}); this harness's engine runs {', '.join(spec.choices)}",
                    code="HRN011"))
                self.out.localai.setdefault(key, path)
                self.out.unknown[name] = Setting(value=value, source=source, path=path)
                return
        typed, problem = convert(label, spec, value)
        if problem:
            self.out.invalid[name] = problem
            if report:
                self.error(path, problem)
            return
        before = seen.get(name)
        if before is not None and before.source == source == "options":
            self.warn(path, f"option {name} is given twice; this later value wins")
        if typed is None and spec.tristate:
            seen.pop(name, None)  # explicit "auto": back to unset
            return
        seen[name] = Setting(value=typed, source=source, path=path)

    def options(self, items: Any) -> None:
        if not isinstance(items, list):
            return
        for i, item in enumerate(items):
            if not isinstance(item, str):
                continue  # the schema reports it
            key, raw = split_option(item)
            self.out.items.append((i, key, raw))
            if not key:
                continue  # the engine plugin says whether that is wrong
            if raw is not None:
                self.set(key, raw, "options", ("options", i))
            elif key in self.localai:
                self.out.localai.setdefault(key, ("options", i))

    def mapping(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            if value is not None:  # None: not given
                self.set(str(key), value, "options", ("options", str(key)))

    def engine_args(self, args: Any) -> None:
        if not isinstance(args, dict):
            return
        for key, value in args.items():
            path = ("engine_args", key)
            if key in NESTED_OPTIONS and isinstance(value, dict):
                for sub, v in value.items():
                    self.set(f"{key}.{sub}", v, "engine_args", (*path, sub))
            else:
                self.set(key, value, "engine_args", path, report=key not in self.schema_typed)


def resolve_options(doc: Document, *, localai: frozenset[str] = frozenset(),
                    parsed: bool = False) -> ResolvedOptions:
    """Merge ``options:`` then ``engine_args:`` (which wins) of a config document.

    :param localai: option keys of the config's LocalAI backend: collected, not warned about.
    :param parsed: the backend's own ``options:`` parser is in the generated index (an unknown
        ``options:`` key is one it ignores: a warning; otherwise a note).
    """
    r = _Resolver(doc, localai, parsed=parsed)
    data = doc.data if isinstance(doc.data, dict) else {}
    r.options(data.get("options"))
    r.engine_args(data.get("engine_args"))
    return r.out


def config_options(data: Mapping[str, Any], *, file: str = "<config>") -> ResolvedOptions:
    """The options surfaces of a config as a plain mapping (not validated, so nothing is located)."""
    return resolve_options(Document(file=file, data=dict(data)))


def parse_options(values: Mapping[str, Any], *, file: str = "<options>") -> ResolvedOptions:
    """Option keys -> values, typed as ``options:`` items are (strings as a list gives them, or
    typed values); a None value is not given."""
    r = _Resolver(Document(file=file, data={}))
    r.mapping(values)
    return r.out
