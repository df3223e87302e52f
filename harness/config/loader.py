"""YAML loading that keeps where every key and value was written, and diagnostics.

LocalAI reads its model configs with gopkg.in/yaml.v3, so the text is read here the way
yaml.v3 reads it, with ruamel.yaml (YAML 1.2 scalars: ``yes``/``on`` stay strings, no
sexagesimal numbers; merge keys). Where yaml.v3 itself differs, it is followed:

- double-quoted strings take yaml.v3's escapes, which are YAML 1.2's plus ``\'``
  (its scanner's ``case '\''``); ruamel's table lacks only that one;
- a key given twice in one mapping is an error naming both lines (yaml.v3's
  "mapping key already defined" refusal: LocalAI does not load such a file).

The node tree comes from libyaml (PyYAML's C parser; yaml.v3 is a Go port of libyaml) when
it is installed, with every plain scalar resolved by ruamel's YAML 1.2 rules: the composer in
C is an order of magnitude faster than ruamel's pure-Python one. A text libyaml refuses (yaml.v3's
``\'`` escape among them) or one with a ``%YAML`` directive is read by ruamel's composer, which
also says what is wrong. The plain data is built here from the nodes so that each path
(``("parameters", "model")``) maps back to a line and column. Anything wrong with the text
becomes a located :class:`Diagnostic`, never an exception. The YAML libraries are imported on
first use: ``harness --version`` and ``--help`` never load them.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.core.inputs import limit

#: error: LocalAI refuses or misreads it; warning: LocalAI accepts it but it is probably wrong;
#: note: about this harness's coverage (never fails a run, not even with --strict).
Severity = Literal["error", "warning", "note"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "note")
Path_ = tuple[str | int, ...]
#: yaml.v3's escapes in double-quoted scalars beyond ruamel's (YAML 1.2) table.
YAML_V3_EXTRA_ESCAPES = {"'": "'"}
MERGE_TAG = "tag:yaml.org,2002:merge"
STR_TAG = "tag:yaml.org,2002:str"
#: Alias expansion is bounded: a few anchors must not blow up into millions of nodes. Only
#: nodes reached again through an alias count; a long plain document is bounded by its size.
MAX_ALIAS_NODES = 100_000
#: The deepest nesting read: a config is a few levels deep (LocalAI's deepest block, about 8).
MAX_DEPTH = 100
#: The largest model-config text read (a config is kilobytes; a long stop list, megabytes).
MAX_TEXT_BYTES = limit("config")
#: yaml.v3 reads a plain integer only within 64 bits (strconv.ParseInt, then ParseUint); see
#: :func:`_beyond_64_bits` for one outside. An integer written longer than this is outside (and
#: Python's int() would refuse it past 4300 digits, a traceback).
MAX_INT_CHARS = 100
INT_TAG = "tag:yaml.org,2002:int"
#: yaml.v3's ``yamlStyleFloat``: what its resolver tries as a float once ParseInt and ParseUint fail.
_YAML_STYLE_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")


def dotted(path: Iterable[Any]) -> str:
    """``parameters.top_p``, ``options[3]``; odd keys quoted (one line, whatever they hold)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{str(part)!r}]"
    return out or "the config"


@dataclass(frozen=True, kw_only=True)
class Diagnostic:
    """One finding, located: prints as ``file:line:col: error|warning: message``."""

    file: str
    line: int
    col: int
    severity: Severity
    message: str
    code: str = ""
    """The rule's code (``harness validate --explain CODE``), "" for a finding no coded rule makes."""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.severity}: {self.message}"

    def text(self) -> str:
        """The line ``harness validate`` prints, code first as ruff prints it:
        ``file:line:col: CODE severity: message``."""
        code = f"{self.code} " if self.code else ""
        return f"{self.file}:{self.line}:{self.col}: {code}{self.severity}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "line": self.line, "col": self.col,
                               "severity": self.severity, "message": self.message}
        if self.code:
            out["code"] = self.code
        return out


@dataclass(kw_only=True)
class Document:
    """One YAML document: its data and where each path was written (1-based)."""

    file: str
    data: Any
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def where(self, path: Path_, *, key: bool = False) -> tuple[int, int]:
        """Line and column of ``path`` (its key with ``key=True``), else of its nearest ancestor."""
        p = tuple(path)
        if key and p in self.keys:
            return self.keys[p]
        while p:
            if p in self.values:
                return self.values[p]
            p = p[:-1]
        return self.values.get((), (1, 1))

    def diag(self, path: Path_, severity: Severity, message: str, *, key: bool = False,
             code: str = "") -> Diagnostic:
        line, col = self.where(path, key=key)
        return Diagnostic(file=self.file, line=line, col=col, severity=severity, message=message, code=code)


Node = Any  # a ruamel.yaml or PyYAML node (``.id`` says which kind): imported lazily


@functools.cache
def _yaml() -> Any:
    """A ruamel.yaml reader that scans like yaml.v3 (its extra escape), built once."""
    from ruamel.yaml import YAML
    from ruamel.yaml.scanner import Scanner

    class V3Scanner(Scanner):
        ESCAPE_REPLACEMENTS = {**Scanner.ESCAPE_REPLACEMENTS, **YAML_V3_EXTRA_ESCAPES}  # noqa: RUF012

    y = YAML(typ="safe", pure=True)
    y.Scanner = V3Scanner
    return y


class _Builder:
    def __init__(self, constructor: Any, doc: Document, problems: list[Diagnostic], *,
                 aliases: bool = True) -> None:
        from ruamel.yaml import nodes

        self.constructor, self.doc, self.problems = constructor, doc, problems
        self.scalar_node = nodes.ScalarNode
        self.tag = _ruamel_tag
        self.count = 0
        self.distinct: set[int] = set()
        self.stack: set[int] = set()
        if not aliases:  # no node is reached twice: nothing to count or to find recursive
            self.build = self._build_tree  # type: ignore[method-assign]

    def _problem(self, node: Node, message: str) -> None:
        self.problems.append(Diagnostic(
            file=self.doc.file, line=node.start_mark.line + 1, col=node.start_mark.column + 1,
            severity="error", message=message, code="LAI013"))

    def build(self, node: Node, path: Path_) -> Any:
        self.count += 1
        if len(path) > MAX_DEPTH:
            msg = f"nested deeper than {MAX_DEPTH} levels (the depth limit for a model config)"
            raise _TooLarge(msg, node.start_mark.line + 1, node.start_mark.column + 1)
        self.distinct.add(id(node))
        if self.count - len(self.distinct) > MAX_ALIAS_NODES:
            msg = (f"YAML aliases expand this document by more than {MAX_ALIAS_NODES} nodes (the alias "
                   "expansion limit); write the repeated parts out or use fewer nested aliases")
            raise _TooLarge(msg)
        self.doc.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if id(node) in self.stack:
            self._problem(node, "recursive alias: a node contains itself")
            return None
        kind = node.id
        if kind == "scalar":
            return self._scalar(node)
        self.stack.add(id(node))
        try:
            if kind == "sequence":
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            if kind == "mapping":
                return self._mapping(node, path)
        finally:
            self.stack.discard(id(node))
        return None

    def _build_tree(self, node: Node, path: Path_) -> Any:
        """:meth:`build` for a text without aliases (each node reached once): same values, marks
        and depth limit, without the alias bookkeeping."""
        mark = node.start_mark
        if len(path) > MAX_DEPTH:
            msg = f"nested deeper than {MAX_DEPTH} levels (the depth limit for a model config)"
            raise _TooLarge(msg, mark.line + 1, mark.column + 1)
        self.doc.values[path] = (mark.line + 1, mark.column + 1)
        kind = node.id
        if kind == "scalar":
            return node.value if node.tag == STR_TAG else self._scalar(node)
        if kind == "sequence":
            return [self._build_tree(item, (*path, i)) for i, item in enumerate(node.value)]
        if kind == "mapping":
            return self._mapping(node, path)
        return None

    def _scalar(self, node: Any) -> Any:
        from ruamel.yaml.error import YAMLError

        if node.tag == STR_TAG:  # what ruamel's constructor makes of it, without the detour
            return node.value
        if node.tag == INT_TAG and len(node.value) > MAX_INT_CHARS:
            return _beyond_64_bits(node.value)
        if not isinstance(node, self.scalar_node):  # libyaml's: ruamel's constructor takes its own nodes
            node = self.scalar_node(self.tag(node.tag), node.value, node.start_mark, node.end_mark,
                                    style=node.style)
        try:
            value = self.constructor.construct_object(node, deep=True)
        except (YAMLError, ValueError, TypeError) as e:
            shown = repr(node.value) if len(node.value) <= 80 else f"{node.value[:60]!r}... ({len(node.value)} characters)"
            self._problem(node, f"cannot read value {shown}: {getattr(e, 'problem', e)}")
            return node.value
        # an integer outside 64 bits but short enough to hold stays one: the validator names the field it
        # does not fit (LAI013), as yaml.v3 refuses to decode it into LocalAI's int field
        # yaml.v3 decodes timestamps into a string field as written; no config field is a date.
        return value if isinstance(value, str | int | float | bool | type(None) | bytes) else node.value

    def _merged(self, node: Any) -> list[Any]:
        """The (key, value) node pairs of a ``<<:`` value (a mapping or a list of them), for
        keys the mapping does not give itself; anything else is an error, as in yaml.v3."""
        sources = node.value if node.id == "sequence" else [node]
        pairs: list[Any] = []
        for src in sources:
            if src.id == "mapping":
                pairs += [p for p in src.value if not self._is_merge(p[0])]
                pairs += [p for m in src.value if self._is_merge(m[0]) for p in self._merged(m[1])]
            else:
                self._problem(src, "bad merge key: <<: takes a mapping or a list of mappings")
        return pairs

    def _is_merge(self, key_node: Any) -> bool:
        return key_node.id == "scalar" and (
            key_node.tag == MERGE_TAG or (key_node.value == "<<" and key_node.style is None))

    def _mapping(self, node: Any, path: Path_) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first: dict[str, Any] = {}
        merged: list[Any] = []
        for key_node, value_node in node.value:
            if self._is_merge(key_node):  # YAML merge keys (<<: *base): yaml.v3 takes them
                merged += self._merged(value_node)
                continue
            if key_node.id != "scalar":
                self._problem(key_node, "a key must be a plain scalar, not a list or a mapping")
                continue
            # The key as written (a config's keys are names).
            key = str(key_node.value)
            if key in first:
                line = first[key].start_mark.line + 1
                here = key_node.start_mark.line + 1
                self._problem(key_node, f"duplicate key {key!r} on lines {line} and {here}: LocalAI's YAML "
                                        "parser (yaml.v3) refuses a mapping that gives a key twice")
            first[key] = key_node
            self.doc.keys[(*path, key)] = (key_node.start_mark.line + 1,
                                           key_node.start_mark.column + 1)
            out[key] = self.build(value_node, (*path, key))
        for key_node, value_node in merged:
            key = str(getattr(key_node, "value", ""))
            if key and key not in out and key_node.id == "scalar":
                self.doc.keys.setdefault((*path, key), (key_node.start_mark.line + 1,
                                                        key_node.start_mark.column + 1))
                out[key] = self.build(value_node, (*path, key))
        return out


def _beyond_64_bits(text: str) -> float | str:
    """An integer outside 64 bits as yaml.v3 resolves it: the float ``strconv.ParseFloat`` makes of
    it where its float pattern matches and the value is finite, else the string as written."""
    plain = text.replace("_", "")
    if _YAML_STYLE_FLOAT.match(plain):
        value = float(plain)
        if math.isfinite(value):
            return value
    return text


@functools.lru_cache(maxsize=256)
def _ruamel_tag(tag: str) -> Any:
    """ruamel's Tag for a tag string, made once: it decodes its URI on first use and keeps that."""
    from ruamel.yaml.tag import Tag

    return Tag(suffix=tag)


class _TooLarge(Exception):
    def __init__(self, message: str, line: int = 1, col: int = 1) -> None:
        super().__init__(message)
        self.line, self.col = line, col


def _yaml_problem(file: str, e: Exception) -> Diagnostic:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
    context = getattr(e, "context", None)
    text = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    return Diagnostic(file=file, line=line, col=col, severity="error", message=text, code="LAI013")


def load_text(text: str | bytes, file: str) -> tuple[list[Document], list[Diagnostic]]:
    """Parse every document of a YAML text; problems come back as diagnostics."""
    problems: list[Diagnostic] = []
    if len(text) > MAX_TEXT_BYTES:
        msg = (f"file is {len(text)} bytes, above the size limit for a model config "
               f"({MAX_TEXT_BYTES} bytes, 64 MiB)")
        return [], [Diagnostic(file=file, line=1, col=1, severity="error", message=msg, code="HRN016")]
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            msg = f"not UTF-8 text (byte {e.start}): a model config is a YAML text file"
            return [], [Diagnostic(file=file, line=1, col=1, severity="error", message=msg, code="LAI013")]
    import warnings

    from ruamel.yaml.error import ReusedAnchorWarning, YAMLError

    docs: list[Document] = []
    y = _yaml()
    try:
        with warnings.catch_warnings():
            # YAML 1.2 (and yaml.v3, which LocalAI reads with) lets an anchor be defined again: the later wins
            warnings.simplefilter("ignore", ReusedAnchorWarning)
            composed = _compose_libyaml(text)
            for node in composed if composed is not None else y.compose_all(text):
                if node is None:
                    continue
                doc = Document(file=file, data=None)
                # an alias is written with '*': a text without one has none to expand
                builder = _Builder(y.constructor, doc, problems, aliases="*" in text)
                doc.data = builder.build(node, ())
                docs.append(doc)
    except YAMLError as e:
        problems.append(_yaml_problem(file, e))
    except _TooLarge as e:
        problems.append(Diagnostic(file=file, line=e.line, col=e.col, severity="error", message=str(e),
                                   code="LAI013"))
    except (RecursionError, ValueError) as e:
        msg = f"cannot read YAML: {type(e).__name__}: {e}"
        problems.append(Diagnostic(file=file, line=1, col=1, severity="error", message=msg, code="LAI013"))
    finally:
        # The constructor is shared by every load: keep no values (nor their nodes) alive.
        y.constructor.constructed_objects.clear()
        y.constructor.recursive_objects.clear()
    return docs, problems


@functools.cache
def _libyaml_parser() -> Any:
    """PyYAML's libyaml parser resolving plain scalars by ruamel's YAML 1.2 rules, or None
    when PyYAML has no libyaml."""
    try:
        import yaml
        from yaml._yaml import CParser
        from yaml.resolver import BaseResolver
    except ImportError:  # PyYAML without libyaml
        return None
    if not getattr(yaml, "__with_libyaml__", False):
        return None
    from ruamel.yaml import nodes

    resolver = _yaml().resolver
    collections = {yaml.SequenceNode: str(resolver.resolve(nodes.SequenceNode, None, (True, False))),
                   yaml.MappingNode: str(resolver.resolve(nodes.MappingNode, None, (True, False)))}

    @functools.lru_cache(maxsize=4096)  # keys and common values repeat from file to file
    def scalar_tag(value: str, implicit: tuple[bool, bool]) -> str:
        return str(resolver.resolve(nodes.ScalarNode, value, implicit))

    class V3CParser(CParser, BaseResolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            BaseResolver.__init__(self)

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            tag = collections.get(kind)
            return tag if tag is not None else scalar_tag(value, implicit)

    return V3CParser


def _compose_libyaml(text: str) -> list[Node] | None:
    """The document nodes of ``text`` composed by libyaml, or None: no libyaml, a ``%YAML``
    directive (ruamel switches its rules by version), or a text libyaml refuses (then ruamel's
    composer reads it and says where and why, with yaml.v3's extra escape)."""
    parser_class = _libyaml_parser()
    if parser_class is None or "%YAML" in text:
        return None
    import yaml

    parser = parser_class(text)
    try:
        out = []
        while parser.check_node():
            out.append(parser.get_node())
        return out
    except yaml.YAMLError:
        return None
    finally:
        parser.dispose()
