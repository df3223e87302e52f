"""Run the jobs of a GitHub Actions workflow on this host, the way GitHub runs them.

Per job, in ``needs`` order (one fresh "runner" each: workspace, temp and tool directories):

- the job's ``if:`` decides (``success()`` over its ancestors when it names no status
  function), then ``strategy.matrix`` is expanded (axes, ``exclude``, ``include``, or an
  expression such as ``fromJSON(needs.matrix.outputs.matrix)``); a caller may pick and adjust
  the entries to run (``entries=``);
- ``run:`` steps run as ``bash --noprofile --norc -eo pipefail {0}`` (GitHub's default shell) in
  the workspace, with the workflow's, job's and step's ``env`` over GitHub's default variables;
  ``$GITHUB_OUTPUT``, ``$GITHUB_ENV`` and ``$GITHUB_PATH`` are fresh files per step, read back
  after it (``key=value`` lines and ``key<<DELIMITER`` heredocs) into ``steps.<id>.outputs``, the
  environment and ``PATH`` of later steps; a step's ``if:`` defaults to ``success()``;
- ``${{ }}`` is parsed (tokenizer + recursive descent over GitHub's expression grammar) and
  evaluated with GitHub's loose equality, truthiness and functions (:func:`evaluate`), from
  the given event, ``vars``, the needed jobs' outputs and results, the matrix entry and the
  earlier steps; the job's ``outputs:`` are evaluated after its steps;
- ``uses:`` steps are stood in for by what the action does (:data:`ACTIONS`): checkout is a
  clone of the source repository with the working tree's uncommitted and untracked (not
  ignored) files laid over it; setup-python a fresh venv of a matching host interpreter put
  first on ``PATH``; upload/download-artifact a directory per artifact name under the run.

Refused loudly, before any job runs (:class:`WorkflowError`): an action without a stand-in (or
a version or input it does not implement), a key the runner does not implement
(``container:``, ``services:``, a reusable workflow), an expression that does not parse or
names an unknown function or context. While running, an expression that cannot be evaluated
(``fromJSON`` of an empty output, an array where a string is needed, a matrix field no entry
has) fails its step or job with the reason, as on GitHub. :meth:`WorkflowRun.check` turns
failures into one error naming each job and step with the tail of the step's log.

Not GitHub: everything runs on this host, one job after another; ``runs-on`` is recorded, not
honoured; nothing is cancelled (``cancelled()`` is false) except the rest of a matrix after a
failure under ``fail-fast``.
"""

from __future__ import annotations

import glob
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from itertools import product
from pathlib import Path
from typing import IO, Any, NoReturn, TypeAlias

import yaml


class WorkflowError(Exception):
    """The workflow asks for something this runner does not do, or is not a valid workflow."""


class ExpressionError(WorkflowError):
    """An expression that does not parse, or a value it cannot take."""


class StepFailed(Exception):
    """A step failed for a reason of its own (a stand-in action, a file command): the step's error."""


class WorkflowFailed(AssertionError):
    """Jobs failed; the message names each job and step with the tail of the step's log."""


# ====================================================================== expressions

#: Contexts an expression may name (the runner supplies those that apply where it is evaluated).
CONTEXTS = frozenset({"github", "env", "vars", "job", "jobs", "steps", "runner", "secrets", "strategy",
                      "matrix", "needs", "inputs"})
STATUS_FUNCTIONS = frozenset({"success", "failure", "cancelled", "always"})

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>-?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?![\w]))
  | (?P<string>'(?:[^']|'')*')
  | (?P<name>[A-Za-z_][A-Za-z0-9_-]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[<>!()\[\].,*])
""", re.VERBOSE)
_KEYWORDS: dict[str, Any] = {"true": True, "false": False, "null": None, "NaN": math.nan, "Infinity": math.inf}


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    pos: int


@dataclass(frozen=True)
class Literal:
    value: Any


@dataclass(frozen=True)
class ContextRef:
    name: str


@dataclass(frozen=True)
class Member:
    """``obj.name``; ``obj.*`` is the object filter (``name == "*"``)."""

    obj: Node
    name: str


@dataclass(frozen=True)
class Index:
    obj: Node
    key: Node


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Call:
    name: str
    """Lower case: function names are case-insensitive."""
    args: tuple[Node, ...]


Node: TypeAlias = Literal | ContextRef | Member | Index | Not | Binary | Call
StatusFn: TypeAlias = Callable[[str], bool]


def _tokenize(src: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None:
            hint = " (strings take single quotes)" if src[pos] == '"' else ""
            msg = f"unexpected {src[pos]!r} at position {pos} of {src!r}{hint}"
            raise ExpressionError(msg)
        if m.lastgroup != "space":
            tokens.append(_Token(str(m.lastgroup), m.group(), pos))
        pos = m.end()
    tokens.append(_Token("end", "", pos))
    return tokens


def _number_literal(text: str) -> float:
    body = text.lstrip("-")
    sign = -1.0 if text.startswith("-") else 1.0
    if body[:2].lower() in ("0x", "0o"):
        return sign * int(body, 0)
    return float(text)


class _Parser:
    """Recursive descent, loosest first: ``||``, ``&&``, ``== !=``, ``< <= > >=``, ``!``, then
    ``.name``, ``.*`` and ``[index]`` after a literal, context, call or parenthesized expression."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.tokens = _tokenize(src)
        self.i = 0

    def fail(self, what: str, token: _Token) -> NoReturn:
        found = repr(token.text) if token.kind != "end" else "the end"
        msg = f"{what}, found {found} at position {token.pos} of {self.src!r}"
        raise ExpressionError(msg)

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self, text: str | None = None) -> _Token:
        token = self.tokens[self.i]
        if text is not None and (token.kind not in ("op",) or token.text != text):
            self.fail(f"expected {text!r}", token)
        self.i += 1
        return token

    def at(self, *ops: str) -> bool:
        return self.peek().kind == "op" and self.peek().text in ops

    def parse(self) -> Node:
        if self.peek().kind == "end":
            self.fail("expected an expression", self.peek())
        node = self.binary(0)
        if self.peek().kind != "end":
            self.fail("expected an operator or the end", self.peek())
        return node

    _LEVELS: tuple[tuple[str, ...], ...] = (("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="))

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.at(*self._LEVELS[level]):
            op = self.take().text
            node = Binary(op, node, self.binary(level + 1))
        return node

    def unary(self) -> Node:
        if self.at("!"):
            self.take()
            return Not(self.unary())
        return self.postfix(self.primary())

    def postfix(self, node: Node) -> Node:
        while True:
            if self.at("."):
                self.take()
                name = self.take()
                if name.kind != "name" and not (name.kind == "op" and name.text == "*"):
                    self.fail("expected a property name or '*' after '.'", name)
                node = Member(node, name.text)
            elif self.at("["):
                self.take()
                key = self.binary(0)
                self.take("]")
                node = Index(node, key)
            else:
                return node

    def primary(self) -> Node:
        token = self.take()
        if token.kind == "number":
            return Literal(_number_literal(token.text))
        if token.kind == "string":
            return Literal(token.text[1:-1].replace("''", "'"))
        if token.kind == "name":
            if token.text in _KEYWORDS:
                return Literal(_KEYWORDS[token.text])
            if self.at("("):
                return self.call(token)
            if token.text.lower() not in CONTEXTS:
                self.fail(f"unknown context (known: {', '.join(sorted(CONTEXTS))})", token)
            return ContextRef(token.text.lower())
        if token.kind == "op" and token.text == "(":
            node = self.binary(0)
            self.take(")")
            return node
        self.fail("expected a literal, context, function call or '('", token)

    def call(self, token: _Token) -> Node:
        name = token.text.lower()
        arity = _ARITY.get(name)
        if arity is None:
            self.fail(f"unknown function (this runner evaluates: {', '.join(FUNCTION_NAMES)})", token)
        self.take("(")
        args: list[Node] = []
        if not self.at(")"):
            args.append(self.binary(0))
            while self.at(","):
                self.take()
                args.append(self.binary(0))
        self.take(")")
        low, high = arity
        if not low <= len(args) <= high:
            self.fail(f"{token.text}() takes {low}{'' if low == high else f' to {high}'} argument(s), "
                      f"got {len(args)}", token)
        return Call(name, tuple(args))


def parse(expression: str) -> Node:
    """The syntax tree of a bare expression (no ``${{ }}``)."""
    return _Parser(expression).parse()


# ---------------------------------------------------------------- values


class Strict(dict[str, Any]):
    """A context object whose missing key is a mistake in the workflow, not an unset value
    (a matrix field the entry lacks, an output the job does not declare, a step not run yet):
    looking one up fails instead of yielding null."""

    def __init__(self, what: str, items: Mapping[str, Any] | None = None) -> None:
        super().__init__(items or {})
        self.what = what


class _Filtered(list[Any]):
    """What an object filter (``a.*``) yields: a property of it is that property of each element."""


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list | tuple):
        return "array"
    if isinstance(v, Mapping):
        return "object"
    msg = f"not an expression value: {type(v).__name__} {v!r}"
    raise ExpressionError(msg)


def truthy(v: Any) -> bool:
    """GitHub's truthiness: false, 0, -0, NaN, '' and null are false; everything else (an empty
    array or object too) is true."""
    kind = _kind(v)
    if kind == "null":
        return False
    if kind == "number":
        return not (v == 0 or math.isnan(v))
    if kind in ("boolean", "string"):
        return bool(v)
    return True


_NUMERIC = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_PREFIXED = re.compile(r"[+-]?0(?:[xX][0-9a-fA-F]+|[oO][0-7]+)")


def to_number(v: Any) -> float:
    """null 0, booleans 1/0, strings parsed (blank 0; JSON numbers, 0x.., 0o.., Infinity), else NaN."""
    kind = _kind(v)
    if kind in ("null", "boolean", "number"):
        return float(v or 0)
    if kind != "string":
        return math.nan
    s = v.strip()
    if not s:
        return 0.0
    if _NUMERIC.fullmatch(s):
        return float(s)
    if _PREFIXED.fullmatch(s):
        return float(int(s, 0))
    if s.lstrip("+-") == "Infinity":
        return -math.inf if s.startswith("-") else math.inf
    return math.nan


def _format_number(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


def to_string(v: Any) -> str:
    """What ``${{ }}`` writes into a string: null '', booleans 'true'/'false', numbers in
    shortest form. Arrays and objects have no string form here (toJSON() makes one)."""
    kind = _kind(v)
    if kind == "null":
        return ""
    if kind == "boolean":
        return "true" if v else "false"
    if kind == "number":
        return _format_number(v)
    if kind == "string":
        return str(v)
    msg = f"an {kind} cannot be used as a string ({_dumps(v)[:120]}); use toJSON() or a property of it"
    raise ExpressionError(msg)


def loose_equal(a: Any, b: Any) -> bool:
    """``==``: same types compare as such (strings ignoring case; arrays and objects only as the
    same instance); different types are both coerced to numbers (NaN equals nothing)."""
    ka, kb = _kind(a), _kind(b)
    if ka != kb:
        return to_number(a) == to_number(b)
    if ka == "string":
        return bool(a.casefold() == b.casefold())
    if ka == "number":
        return float(a) == float(b)
    if ka in ("array", "object"):
        return a is b
    return bool(a == b)


def _compare(op: str, a: Any, b: Any) -> bool:
    ka, kb = _kind(a), _kind(b)
    x: Any
    y: Any
    if ka == kb == "string":
        x, y = a.upper(), b.upper()
    else:
        x, y = to_number(a), to_number(b)
        if math.isnan(x) or math.isnan(y):
            return False
    return bool({"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op])


def _lookup(obj: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    if name in obj:
        return True, obj[name]
    folded = name.casefold()
    for key, value in obj.items():
        if isinstance(key, str) and key.casefold() == folded:
            return True, value
    return False, None


def _member(v: Any, name: str) -> Any:
    if isinstance(v, _Filtered):
        return _Filtered(value for e in v if isinstance(e, Mapping) for found, value in [_lookup(e, name)] if found)
    if isinstance(v, Mapping):
        found, value = _lookup(v, name)
        if not found and isinstance(v, Strict):
            msg = f"{v.what} has no {name!r} (it has: {', '.join(sorted(v)) or 'nothing'})"
            raise ExpressionError(msg)
        return value
    return None  # a property of a string, number, null or array is null


def _children(v: Any) -> list[Any]:
    if isinstance(v, Mapping):
        return list(v.values())
    if isinstance(v, list | tuple):
        return list(v)
    return []


def _filter(v: Any) -> _Filtered:
    if isinstance(v, _Filtered):
        return _Filtered(c for e in v for c in _children(e))
    return _Filtered(_children(v))


def _index(v: Any, key: Any) -> Any:
    if isinstance(v, list | tuple):
        if _kind(key) != "number":
            return None
        i = to_number(key)
        return v[int(i)] if i.is_integer() and 0 <= i < len(v) else None
    if isinstance(v, Mapping):
        return _member(v, to_string(key))
    return None


def _plain(v: Any) -> Any:
    """JSON-ready: integral floats as ints (``toJSON(1)`` is ``1``), tuples and filters as lists."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return int(v)
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def _dumps(v: Any) -> str:
    return json.dumps(_plain(v), indent=2)


# ---------------------------------------------------------------- functions


def _contains(search: Any, item: Any) -> bool:
    if isinstance(search, list | tuple):
        return any(loose_equal(x, item) for x in search)
    return to_string(item).casefold() in to_string(search).casefold()


def _starts_with(s: Any, prefix: Any) -> bool:
    return to_string(s).casefold().startswith(to_string(prefix).casefold())


def _ends_with(s: Any, suffix: Any) -> bool:
    return to_string(s).casefold().endswith(to_string(suffix).casefold())


_PLACEHOLDER = re.compile(r"\{(\d+)\}")


def _format(template: Any, *args: Any) -> str:
    text = to_string(template)
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("{{", i) or text.startswith("}}", i):
            out.append(text[i])
            i += 2
        elif text[i] == "{":
            m = _PLACEHOLDER.match(text, i)
            if m is None or int(m.group(1)) >= len(args):
                msg = f"format({text!r}): {'no argument for' if m else 'invalid placeholder at'} {text[i:i + 8]!r}"
                raise ExpressionError(msg)
            out.append(to_string(args[int(m.group(1))]))
            i = m.end()
        elif text[i] == "}":
            msg = f"format({text!r}): a lone '}}' at position {i} (write '}}}}')"
            raise ExpressionError(msg)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _join(v: Any, separator: Any = ",") -> str:
    if isinstance(v, list | tuple):
        return to_string(separator).join(to_string(x) for x in v)
    return to_string(v)


def _to_json(v: Any) -> str:
    return _dumps(v)


def _from_json(v: Any) -> Any:
    text = to_string(v)
    try:
        return json.loads(text)
    except ValueError as e:
        msg = f"fromJSON: {e} in {text[:200]!r}"
        raise ExpressionError(msg) from e


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "contains": _contains, "startswith": _starts_with, "endswith": _ends_with, "format": _format,
    "join": _join, "tojson": _to_json, "fromjson": _from_json}
#: How the functions this runner evaluates are spelled (names are case-insensitive).
FUNCTION_NAMES = ("contains", "startsWith", "endsWith", "format", "join", "toJSON", "fromJSON", "success", "always",
                  "cancelled", "failure")
_ARITY: dict[str, tuple[int, int]] = {
    "contains": (2, 2), "startswith": (2, 2), "endswith": (2, 2), "format": (1, 64), "join": (1, 2),
    "tojson": (1, 1), "fromjson": (1, 1), **{name: (0, 0) for name in STATUS_FUNCTIONS}}


# ---------------------------------------------------------------- evaluation


def _evaluate(node: Node, contexts: Mapping[str, Any], status: StatusFn | None) -> Any:
    def ev(n: Node) -> Any:
        return _evaluate(n, contexts, status)

    match node:
        case Literal(value=value):
            return value
        case ContextRef(name=name):
            if name not in contexts:
                msg = f"the {name} context is not available here (available: {', '.join(sorted(contexts))})"
                raise ExpressionError(msg)
            return contexts[name]
        case Member(obj=obj, name="*"):
            return _filter(ev(obj))
        case Member(obj=obj, name=name):
            return _member(ev(obj), name)
        case Index(obj=obj, key=key):
            return _index(ev(obj), ev(key))
        case Not(operand=operand):
            return not truthy(ev(operand))
        case Binary(op="&&", left=left, right=right):
            value = ev(left)
            return ev(right) if truthy(value) else value
        case Binary(op="||", left=left, right=right):
            value = ev(left)
            return value if truthy(value) else ev(right)
        case Binary(op="==", left=left, right=right):
            return loose_equal(ev(left), ev(right))
        case Binary(op="!=", left=left, right=right):
            return not loose_equal(ev(left), ev(right))
        case Binary(op=op, left=left, right=right):
            return _compare(op, ev(left), ev(right))
        case Call(name=name, args=args):
            if name in STATUS_FUNCTIONS:
                if status is None:
                    msg = f"{name}() is only allowed in an if: condition"
                    raise ExpressionError(msg)
                return status(name)
            return _FUNCTIONS[name](*(ev(a) for a in args))
    msg = f"not an expression node: {node!r}"
    raise ExpressionError(msg)


def evaluate(expression: str, contexts: Mapping[str, Any], status: StatusFn | None = None) -> Any:
    """The value of a bare expression (what goes between ``${{`` and ``}}``)."""
    return _evaluate(parse(expression), contexts, status)


@dataclass(frozen=True)
class Template:
    """A workflow value with ``${{ }}`` in it: literal text and expressions, in order."""

    parts: tuple[str | Node, ...]

    @property
    def single(self) -> Node | None:
        """The expression when the value is one ``${{ }}`` alone: its value keeps its type."""
        nodes = [p for p in self.parts if not isinstance(p, str)]
        texts = [p for p in self.parts if isinstance(p, str)]
        return nodes[0] if len(nodes) == 1 and not "".join(texts).strip() else None


def _expression_end(text: str, start: int) -> int:
    i = start
    while i < len(text):
        if text[i] == "'":
            close = text.find("'", i + 1)
            while close != -1 and text.startswith("''", close):
                close = text.find("'", close + 2)
            if close == -1:
                break
            i = close + 1
        elif text.startswith("}}", i):
            return i
        else:
            i += 1
    msg = f"unterminated ${{{{ in {text!r}"
    raise ExpressionError(msg)


def parse_template(text: str) -> Template:
    parts: list[str | Node] = []
    i = 0
    while (j := text.find("${{", i)) != -1:
        if j > i:
            parts.append(text[i:j])
        end = _expression_end(text, j + 3)
        parts.append(parse(text[j + 3:end]))
        i = end + 2
    if i < len(text):
        parts.append(text[i:])
    return Template(tuple(parts))


def evaluate_template(text: Any, contexts: Mapping[str, Any], status: StatusFn | None = None) -> Any:
    """A workflow value: a string with ``${{ }}`` becomes a string, or the expression's own value
    when it is the whole value (``strategy.matrix: ${{ fromJSON(...) }}`` yields an object)."""
    if not isinstance(text, str) or "${{" not in text:
        return text
    template = parse_template(text)
    single = template.single
    if single is not None:
        return _evaluate(single, contexts, status)
    return "".join(p if isinstance(p, str) else to_string(_evaluate(p, contexts, status)) for p in template.parts)


def _calls_status(node: Node) -> bool:
    match node:
        case Call(name=name, args=args):
            return name in STATUS_FUNCTIONS or any(_calls_status(a) for a in args)
        case Member(obj=obj):
            return _calls_status(obj)
        case Index(obj=obj, key=key):
            return _calls_status(obj) or _calls_status(key)
        case Not(operand=operand):
            return _calls_status(operand)
        case Binary(left=left, right=right):
            return _calls_status(left) or _calls_status(right)
    return False


def parse_condition(condition: str | bool | float | None) -> Node:
    """An ``if:``: a bare expression or one ``${{ }}``; ``success() && (...)`` unless it names a
    status function. Text around a ``${{ }}`` is refused (GitHub takes such a value as a non-empty
    string: always true)."""
    if condition is None or condition == "":
        return Call("success", ())
    if isinstance(condition, bool | int | float):
        node: Node = Literal(condition)
    else:
        text = condition.strip()
        if "${{" in text:
            single = parse_template(text).single
            if single is None:
                msg = f"if: {condition!r} mixes text and ${{{{ }}}}: GitHub reads it as a string, always true"
                raise ExpressionError(msg)
            node = single
        else:
            node = parse(text)
    return node if _calls_status(node) else Binary("&&", Call("success", ()), node)


def evaluate_condition(condition: str | bool | float | None, contexts: Mapping[str, Any], status: StatusFn) -> bool:
    return truthy(_evaluate(parse_condition(condition), contexts, status))


# ====================================================================== workflow files


def parse_file_commands(path: Path) -> dict[str, str]:
    """``$GITHUB_OUTPUT`` / ``$GITHUB_ENV`` as a step left them: ``key=value`` lines and
    ``key<<DELIMITER`` ... ``DELIMITER`` blocks (multi-line values)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    values: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            continue
        eq, heredoc = line.find("="), line.find("<<")
        if eq != -1 and (heredoc == -1 or eq < heredoc):
            key, value = line[:eq], line[eq + 1:]
        elif heredoc != -1:
            key, delimiter = line[:heredoc], line[heredoc + 2:]
            body: list[str] = []
            while i < len(lines) and lines[i] != delimiter:
                body.append(lines[i])
                i += 1
            if i == len(lines):
                msg = f"{path.name}: no closing delimiter {delimiter!r} for {key!r}"
                raise StepFailed(msg)
            i += 1
            value = "\n".join(body)
        else:
            msg = f"{path.name}: line {i} is neither key=value nor key<<DELIMITER: {line!r}"
            raise StepFailed(msg)
        if not key:
            msg = f"{path.name}: line {i} has no name: {line!r}"
            raise StepFailed(msg)
        values[key] = value
    return values


def _inside(base: Path, rel: str) -> Path:
    return Path(os.path.normpath(base / os.path.expanduser(rel)))


# ---------------------------------------------------------------- stand-ins for actions


@dataclass(frozen=True)
class _Action:
    """A stand-in: the refs it follows (the action's major versions) and the inputs it implements."""

    refs: frozenset[str]
    inputs: frozenset[str]
    run: Callable[[_Job, Mapping[str, str], IO[str]], dict[str, str]]
    inert: frozenset[str] = frozenset()
    """Inputs accepted and ignored on a local run (credentials, caches of GitHub's)."""


def _git(*argv: str, cwd: Path) -> str:
    r = subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        msg = f"git {' '.join(argv)} (in {cwd}) exited {r.returncode}: {r.stderr.strip()[-2000:]}"
        raise StepFailed(msg)
    return r.stdout


def _checkout(job: _Job, inputs: Mapping[str, str], log: IO[str]) -> dict[str, str]:
    """A clone of the source repository (``fetch-depth``, default 1, as actions/checkout), with
    the working tree's tracked and untracked-not-ignored files laid over it: what the run sees is
    the working tree, uncommitted changes included, never ignored build or venv state."""
    source = job.runner.source
    dest = _inside(job.workspace, inputs.get("path", ""))
    if not dest.is_relative_to(job.workspace):
        msg = f"path {inputs['path']!r} leaves the workspace"
        raise StepFailed(msg)
    if dest.exists():
        shutil.rmtree(dest)
    depth = int(inputs.get("fetch-depth") or "1")
    _git("clone", "--quiet", "--no-hardlinks", *(["--depth", str(depth)] if depth > 0 else []),
         source.as_uri(), str(dest), cwd=job.dir)
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=source).split("\0")
    copied = removed = 0
    for rel in sorted({r for r in listed if r}):
        src, dst = source / rel, dest / rel
        if src.is_dir() and not src.is_symlink():
            msg = f"{rel} is a nested repository or submodule: this stand-in copies files only"
            raise StepFailed(msg)
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        if src.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), dst)
            copied += 1
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            copied += 1
        else:  # tracked, deleted in the working tree
            removed += 1
    changes = _git("status", "--porcelain", "--untracked-files=all", cwd=source).splitlines()
    commit = _git("rev-parse", "HEAD", cwd=dest).strip()
    log.write(f"checkout: clone of {source} at {commit} (depth {depth or 'full'}), then {copied} files of its "
              f"working tree laid over it, {removed} deleted; {len(changes)} uncommitted changes:\n")
    log.writelines(f"  {c}\n" for c in changes[:200])
    return {"commit": commit, "ref": job.runner.github_base["ref"]}


def find_python(version: str) -> str:
    """A host interpreter whose version starts with ``version`` (``3.11``, ``3.11.7``, ``3.x``):
    this process's, else ``pythonX.Y`` on PATH."""
    want = version.split(".")
    tried: list[str] = []
    names = [sys.executable, f"python{version}", f"python{'.'.join(want[:2])}", f"python{want[0]}"]
    for name in dict.fromkeys(names):
        exe = shutil.which(name)
        if exe is None:
            tried.append(f"{name}: not found")
            continue
        r = subprocess.run([exe, "-c", "import platform; print(platform.python_version())"],
                           capture_output=True, text=True, check=False)
        found = r.stdout.strip().split(".")
        if r.returncode == 0 and all(w in ("x", "*") or w == f for w, f in zip(want, found, strict=False)):
            return exe
        tried.append(f"{exe}: {'.'.join(found) or r.stderr.strip()}")
    msg = f"no Python {version} on this host ({'; '.join(tried)})"
    raise StepFailed(msg)


def _setup_python(job: _Job, inputs: Mapping[str, str], log: IO[str]) -> dict[str, str]:
    """A fresh venv of the host's matching interpreter, its bin/ first on PATH for later steps
    (``python``, ``pip`` and what they install resolve there)."""
    version = inputs.get("python-version", "").strip()
    if not version:
        msg = "python-version is required (this stand-in does not read python-version-file)"
        raise StepFailed(msg)
    exe = find_python(version)
    venv = job.tool / "Python" / version
    r = subprocess.run([exe, "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
    log.write(r.stdout + r.stderr)
    if r.returncode != 0:
        msg = f"{exe} -m venv {venv} exited {r.returncode}"
        raise StepFailed(msg)
    python = venv / "bin" / "python"
    full = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    job.path_prefix.insert(0, str(venv / "bin"))
    job.exported["pythonLocation"] = str(venv)
    log.write(f"setup-python: venv {venv} of {exe} (Python {full}), {venv / 'bin'} first on PATH\n")
    return {"python-version": full, "python-path": str(python)}


def _collect(workspace: Path, spec: str, *, hidden: bool) -> tuple[Path, list[Path]]:
    """upload-artifact's ``path``: lines of files, directories or globs (``!`` excludes); files are
    stored relative to the common ancestor of the paths searched. Hidden files (a component
    starting with '.') are left out unless ``include-hidden-files``."""
    def expand(pattern: str) -> tuple[Path, set[Path]]:
        full = _inside(workspace, pattern)
        if glob.has_magic(str(full)):
            parts = full.parts
            cut = next(i for i, p in enumerate(parts) if glob.has_magic(p))
            root = Path(*parts[:cut])
            matches = [Path(m) for m in glob.glob(str(full), recursive=True, include_hidden=True)]
        else:
            root = full if full.is_dir() else full.parent
            matches = [full] if full.exists() else []
        files = {f for m in matches for f in ([m] if m.is_file() else m.rglob("*")) if f.is_file()}
        return root, files

    lines = [line.strip() for line in spec.splitlines() if line.strip()]
    roots: list[Path] = []
    files: set[Path] = set()
    for line in (x for x in lines if not x.startswith("!")):
        root, found = expand(line)
        roots.append(root)
        files |= found
    for line in (x for x in lines if x.startswith("!")):
        files -= expand(line[1:])[1]
    base = Path(os.path.commonpath(roots)) if roots else workspace
    if not hidden:
        files = {f for f in files if not any(p.startswith(".") for p in f.relative_to(base).parts)}
    return base, sorted(files)


def _upload_artifact(job: _Job, inputs: Mapping[str, str], log: IO[str]) -> dict[str, str]:
    name = inputs.get("name") or "artifact"
    mode = inputs.get("if-no-files-found") or "warn"
    if mode not in ("warn", "error", "ignore"):
        msg = f"if-no-files-found: {mode!r} (expected warn, error or ignore)"
        raise StepFailed(msg)
    if "path" not in inputs:
        msg = "path is required"
        raise StepFailed(msg)
    base, files = _collect(job.workspace, inputs["path"], hidden=inputs.get("include-hidden-files") == "true")
    if not files:
        text = f"No files were found with the provided path: {inputs['path']}. No artifacts will be uploaded."
        if mode == "error":
            raise StepFailed(text)
        log.write(("warning: " if mode == "warn" else "") + text + "\n")
        return {}
    dest = job.runner.artifacts / name
    if dest.exists():
        if inputs.get("overwrite") != "true":
            msg = f"an artifact named {name!r} already exists in this run (artifacts are immutable; overwrite: true)"
            raise StepFailed(msg)
        shutil.rmtree(dest)
    for f in files:
        target = dest / f.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    log.write(f"upload-artifact: {name}: {len(files)} files from {base}\n")
    log.writelines(f"  {f.relative_to(base)}\n" for f in files[:200])
    return {"artifact-id": name, "artifact-url": dest.as_uri()}


def _download_artifact(job: _Job, inputs: Mapping[str, str], log: IO[str]) -> dict[str, str]:
    """One artifact (``name``) into ``path``; else every artifact (matching ``pattern``) into
    ``path/<name>/``, or all into ``path`` with ``merge-multiple``. A pattern matching nothing
    downloads nothing, as download-artifact v4 does."""
    store = job.runner.artifacts
    dest = _inside(job.workspace, inputs.get("path") or ".")
    if inputs.get("name"):
        if inputs.get("pattern"):
            msg = "give name or pattern, not both"
            raise StepFailed(msg)
        source = store / inputs["name"]
        if not source.is_dir():
            have = sorted(p.name for p in store.iterdir()) if store.is_dir() else []
            msg = f"Artifact not found: {inputs['name']!r} (this run has: {', '.join(have) or 'none'})"
            raise StepFailed(msg)
        shutil.copytree(source, dest, dirs_exist_ok=True)
        log.write(f"download-artifact: {inputs['name']} -> {dest}\n")
        return {"download-path": str(dest)}
    pattern = inputs.get("pattern") or "*"
    names = sorted(p.name for p in store.iterdir() if fnmatchcase(p.name, pattern)) if store.is_dir() else []
    merge = inputs.get("merge-multiple") == "true"
    for name in names:
        shutil.copytree(store / name, dest if merge else dest / name, dirs_exist_ok=True)
    log.write(f"download-artifact: {len(names)} artifacts matching {pattern!r} -> {dest}: {', '.join(names)}\n")
    return {"download-path": str(dest)}


#: The actions this runner stands in for, by ``owner/name``.
ACTIONS: dict[str, _Action] = {
    "actions/checkout": _Action(frozenset({"v4", "v5"}), frozenset({"path", "fetch-depth"}), _checkout,
                                inert=frozenset({"persist-credentials", "clean", "show-progress"})),
    "actions/setup-python": _Action(frozenset({"v5", "v6"}), frozenset({"python-version"}), _setup_python,
                                    inert=frozenset({"cache", "cache-dependency-path", "check-latest"})),
    "actions/upload-artifact": _Action(
        frozenset({"v4"}), frozenset({"name", "path", "if-no-files-found", "overwrite", "include-hidden-files"}),
        _upload_artifact, inert=frozenset({"retention-days", "compression-level"})),
    "actions/download-artifact": _Action(frozenset({"v4"}), frozenset({"name", "pattern", "path", "merge-multiple"}),
                                         _download_artifact),
}


def _action(uses: str, where: str) -> _Action:
    name, _, ref = uses.partition("@")
    action = ACTIONS.get(name)
    if action is None:
        msg = (f"{where}: uses: {uses!r}: no local stand-in for this action (this runner has: "
               f"{', '.join(sorted(ACTIONS))}); add one to {Path(__file__).name} or replace the step")
        raise WorkflowError(msg)
    if ref not in action.refs:
        msg = f"{where}: uses: {uses!r}: the stand-in follows {name}@{'/'.join(sorted(action.refs))}, not @{ref or '(none)'}"
        raise WorkflowError(msg)
    return action


# ---------------------------------------------------------------- validation

_WORKFLOW_KEYS = frozenset({"name", "run-name", "on", "permissions", "env", "defaults", "concurrency", "jobs"})
_JOB_KEYS = frozenset({"name", "needs", "if", "runs-on", "timeout-minutes", "strategy", "env", "outputs", "steps",
                       "permissions", "defaults", "concurrency"})
_STEP_KEYS = frozenset({"id", "name", "if", "uses", "with", "run", "env", "shell", "working-directory",
                        "continue-on-error", "timeout-minutes"})
_STRATEGY_KEYS = frozenset({"matrix", "fail-fast", "max-parallel"})
#: ``shell:`` -> argv before the script file (GitHub's templates for these shells).
SHELLS: dict[str, tuple[str, ...]] = {
    "bash": ("bash", "--noprofile", "--norc", "-eo", "pipefail"), "sh": ("sh", "-e"), "python": ("python",)}


def _walk_strings(value: Any, where: str) -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk_strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk_strings(v, f"{where}[{i}]")


def _needs(job: Mapping[str, Any]) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _unknown(keys: Iterable[Any], known: frozenset[str], where: str) -> None:
    extra = sorted(str(k) for k in keys if k not in known)
    if extra:
        msg = f"{where}: {', '.join(extra)} not implemented by this runner (it knows: {', '.join(sorted(known))})"
        raise WorkflowError(msg)


def validate(doc: Mapping[Any, Any]) -> list[str]:
    """Check that this runner can run every job as written; return the job ids in ``needs`` order.

    Raises :class:`WorkflowError` for anything it would otherwise have to guess at."""
    _unknown((k for k in doc if k is not True), _WORKFLOW_KEYS, "workflow")  # YAML 1.1 reads `on:` as True
    jobs = doc.get("jobs")
    if not isinstance(jobs, Mapping) or not jobs:
        msg = "workflow: no jobs"
        raise WorkflowError(msg)
    for where, text in _walk_strings(doc.get("env") or {}, "env"):
        _check_expressions(where, text)
    for job_id, job in jobs.items():
        where = f"jobs.{job_id}"
        if not isinstance(job, Mapping):
            msg = f"{where}: not a mapping"
            raise WorkflowError(msg)
        _unknown(job, _JOB_KEYS, where)
        if "runs-on" not in job or not job.get("steps"):
            msg = f"{where}: runs-on and steps are required"
            raise WorkflowError(msg)
        _unknown(job.get("strategy") or {}, _STRATEGY_KEYS, f"{where}.strategy")
        for dep in _needs(job):
            if dep not in jobs:
                msg = f"{where}.needs: no job {dep!r}"
                raise WorkflowError(msg)
        _check_condition(f"{where}.if", job.get("if"))
        for w, text in _walk_strings({k: v for k, v in job.items() if k not in ("if", "steps")}, where):
            _check_expressions(w, text)
        for i, step in enumerate(job["steps"]):
            _validate_step(step, f"{where}.steps[{i}]", job.get("defaults") or doc.get("defaults") or {})
    return _order(jobs)


def _validate_step(step: Any, where: str, defaults: Mapping[str, Any]) -> None:
    if not isinstance(step, Mapping):
        msg = f"{where}: not a mapping"
        raise WorkflowError(msg)
    _unknown(step, _STEP_KEYS, where)
    if ("run" in step) == ("uses" in step):
        msg = f"{where}: a step has exactly one of run: and uses:"
        raise WorkflowError(msg)
    if "uses" in step:
        action = _action(str(step["uses"]), where)
        _unknown(step.get("with") or {}, action.inputs | action.inert, f"{where}.with ({step['uses']})")
    shell = step.get("shell") or (defaults.get("run") or {}).get("shell") or "bash"
    if shell not in SHELLS:
        msg = f"{where}: shell {shell!r} not implemented (this runner has: {', '.join(SHELLS)})"
        raise WorkflowError(msg)
    _check_condition(f"{where}.if", step.get("if"))
    for w, text in _walk_strings({k: v for k, v in step.items() if k != "if"}, where):
        _check_expressions(w, text)


def _check_expressions(where: str, text: str) -> None:
    try:
        parse_template(text)
    except ExpressionError as e:
        msg = f"{where}: {e}"
        raise ExpressionError(msg) from e


def _check_condition(where: str, condition: Any) -> None:
    try:
        parse_condition(condition)
    except ExpressionError as e:
        msg = f"{where}: {e}"
        raise ExpressionError(msg) from e


def _order(jobs: Mapping[str, Any]) -> list[str]:
    done: list[str] = []
    pending = list(jobs)
    while pending:
        ready = [j for j in pending if all(d in done for d in _needs(jobs[j]))]
        if not ready:
            msg = f"jobs: a needs: cycle among {', '.join(pending)}"
            raise WorkflowError(msg)
        done += ready
        pending = [j for j in pending if j not in ready]
    return done


def expand_matrix(matrix: Any) -> list[dict[str, Any]]:
    """Entries of a ``strategy.matrix``: the product of its axes less ``exclude``; each ``include``
    entry extends the combinations whose axis values it does not change, or is added as its own."""
    if not isinstance(matrix, Mapping):
        msg = f"strategy.matrix must be an object, got {_kind(matrix)}: {str(matrix)[:200]!r}"
        raise ExpressionError(msg)
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    for k, v in axes.items():
        if not isinstance(v, list) or not v:
            msg = f"strategy.matrix.{k} must be a non-empty list"
            raise ExpressionError(msg)
    combos = [dict(zip(axes, values, strict=True)) for values in product(*axes.values())] if axes else []
    excludes = matrix.get("exclude") or []
    combos = [c for c in combos if not any(all(c.get(k) == v for k, v in x.items()) for x in excludes)]
    originals = [dict(c) for c in combos]  # an include matches these only, never an entry another include added
    added: list[dict[str, Any]] = []
    for extra in matrix.get("include") or []:
        matched = False
        for combo, original in zip(combos, originals, strict=True):
            if all(k not in original or original[k] == v for k, v in extra.items()):
                combo.update(extra)
                matched = True
        if not matched:
            added.append(dict(extra))
    combos += added
    if not combos:
        msg = "strategy.matrix has no entries"
        raise ExpressionError(msg)
    return combos


# ====================================================================== results


@dataclass(frozen=True)
class StepResult:
    number: int
    name: str
    id: str | None
    outcome: str
    """success, failure or skipped (before continue-on-error)."""
    conclusion: str
    seconds: float
    log: Path | None
    outputs: Mapping[str, str]
    error: str = ""

    def tail(self, lines: int = 40) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


@dataclass(frozen=True)
class JobResult:
    job: str
    name: str
    result: str
    """success, failure, skipped or cancelled."""
    matrix: Mapping[str, Any] | None
    runs_on: Any
    steps: tuple[StepResult, ...]
    outputs: Mapping[str, str]
    workspace: Path | None
    seconds: float
    error: str = ""
    """A failure outside the steps (strategy or outputs evaluation, a timeout)."""

    def step(self, key: str) -> StepResult:
        """The step with this id, or the first whose name starts with ``key``."""
        found = [s for s in self.steps if s.id == key] or [s for s in self.steps if s.name.startswith(key)]
        if not found:
            msg = f"job {self.job}: no step {key!r} (steps: {', '.join(s.name for s in self.steps)})"
            raise KeyError(msg)
        return found[0]

    @property
    def failed_steps(self) -> list[StepResult]:
        return [s for s in self.steps if s.conclusion == "failure"]


def _aggregate(results: Sequence[JobResult]) -> str:
    """``needs.<job>.result`` of a (matrix) job."""
    kinds = {r.result for r in results}
    for kind in ("failure", "cancelled"):
        if kind in kinds:
            return kind
    return "success" if "success" in kinds else "skipped"


@dataclass(frozen=True)
class WorkflowRun:
    jobs: Mapping[str, tuple[JobResult, ...]]
    """Per job id, one result per matrix entry run (one for a job without a matrix)."""
    artifacts: Path
    seconds: float

    def job(self, job_id: str, entry: int = 0) -> JobResult:
        return self.jobs[job_id][entry]

    def result(self, job_id: str) -> str:
        return _aggregate(self.jobs[job_id])

    def check(self, expect_failure: Mapping[str, str] | None = None) -> None:
        """Raise :class:`WorkflowFailed` naming every failed job and step. ``expect_failure``: job
        id -> the step (id or name prefix) expected to be that job's only failure; it must fail."""
        expected = dict(expect_failure or {})
        problems: list[str] = []
        for job_id, results in self.jobs.items():
            step_key = expected.pop(job_id, None)
            for r in results:
                if r.result in ("success", "skipped"):
                    if step_key is not None:
                        problems.append(f"job {job_id!r} ({r.name}): expected step {step_key!r} to fail, "
                                        f"the job ended {r.result}")
                    continue
                bad = r.failed_steps
                if step_key is not None and not r.error and len(bad) == 1 and step_key in (bad[0].id, bad[0].name[:len(step_key)]):
                    continue
                problems.append(describe_failure(r))
        problems += [f"job {j!r} was expected to fail at {s!r} but did not run" for j, s in expected.items()]
        if problems:
            raise WorkflowFailed("\n\n".join(problems))


def describe_failure(r: JobResult) -> str:
    lines = [f"job {r.job!r}" + (f" ({r.name})" if r.name != r.job else "") + f": {r.result}"
             + (f": {r.error}" if r.error else "")]
    for s in r.failed_steps:
        lines.append(f"  step {s.number} {s.name!r}" + (f" (id {s.id})" if s.id else "") + f" failed: {s.error}")
        if s.tail():
            lines += [f"    | {line}" for line in s.tail().splitlines()]
            lines.append(f"    (log: {s.log})")
    return "\n".join(lines)


# ====================================================================== running


@dataclass(frozen=True, kw_only=True)
class Event:
    """What triggered the run: ``github.event_name``, a workflow_dispatch's ``inputs`` (defaults
    from the workflow fill the rest) and more of the event payload."""

    name: str = "workflow_dispatch"
    inputs: Mapping[str, Any] = field(default_factory=dict)
    payload: Mapping[str, Any] = field(default_factory=dict)


EntryPicker: TypeAlias = Callable[[str, list[dict[str, Any]]], list[dict[str, Any]]]

#: Variables of the calling process a fresh runner does not have (its Python, its harness settings).
_NOT_INHERITED = re.compile(r"(VIRTUAL_ENV|PYTHONHOME|PYTHONPATH|PYTHONSTARTUP|PYTEST_.*|GITHUB_.*|RUNNER_.*|"
                            r"ACTIONS_.*|NOX_.*|CONDA_.*|HARNESS_.*|_)")


def host_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment less what belongs to it rather than to the host (its venv on
    PATH, ``HARNESS_*``, ``GITHUB_*``), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not _NOT_INHERITED.fullmatch(k)}
    own = {str(Path(sys.prefix) / "bin")} if sys.prefix != sys.base_prefix else set()
    if os.environ.get("VIRTUAL_ENV"):
        own.add(str(Path(os.environ["VIRTUAL_ENV"]) / "bin"))
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p not in own)
    env.update(extra or {})
    return env


def _triggers(doc: Mapping[Any, Any]) -> dict[str, Any]:
    on = doc.get("on", doc.get(True))
    if isinstance(on, str):
        return {on: {}}
    if isinstance(on, list):
        return {str(t): {} for t in on}
    return {str(k): v or {} for k, v in (on or {}).items()}


def _inputs(doc: Mapping[Any, Any], event: Event) -> dict[str, Any]:
    """The ``inputs`` context: the event's workflow_dispatch inputs over the declared defaults, typed."""
    triggers = _triggers(doc)
    if event.name not in triggers:
        msg = f"the workflow is not triggered by {event.name} (on: {', '.join(triggers)})"
        raise WorkflowError(msg)
    declared = ((triggers[event.name] or {}).get("inputs") or {}) if event.name == "workflow_dispatch" else {}
    unknown = sorted(set(event.inputs) - set(declared))
    if unknown:
        msg = f"inputs {', '.join(unknown)} are not declared by the workflow's {event.name} (it has: {', '.join(declared) or 'none'})"
        raise WorkflowError(msg)
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        spec = spec or {}
        kind = spec.get("type", "string")
        if name in event.inputs:
            raw = event.inputs[name]
        elif "default" in spec:
            raw = spec["default"]
        elif spec.get("required"):
            msg = f"input {name!r} is required"
            raise WorkflowError(msg)
        else:
            raw = False if kind == "boolean" else ""
        if kind == "boolean":
            values[name] = raw if isinstance(raw, bool) else str(raw).lower() == "true"
        elif kind == "number":
            values[name] = to_number(raw)
        else:
            values[name] = "" if raw is None else str(raw)
            if kind == "choice" and values[name] not in (spec.get("options") or []):
                msg = f"input {name!r}: {values[name]!r} is not one of {spec.get('options')}"
                raise WorkflowError(msg)
    return values


class _Runner:
    """One run of one workflow."""

    def __init__(self, workflow: Path, *, source: Path, root: Path, event: Event, variables: Mapping[str, str],
                 env: Mapping[str, str], entries: EntryPicker | None, log: Callable[[str], None]) -> None:
        self.path = workflow
        self.doc: dict[Any, Any] = yaml.safe_load(workflow.read_text(encoding="utf-8"))
        self.order = validate(self.doc)
        self.inputs = _inputs(self.doc, event)
        self.source = source.resolve()
        self.root = root
        self.artifacts = root / "artifacts"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.event = event
        self.vars = dict(variables)
        self.host_env = host_environment(env)
        self.entries = entries
        self.log = log
        self.repo = source.resolve().name
        self.results: dict[str, tuple[JobResult, ...]] = {}
        branch = subprocess.run(["git", "symbolic-ref", "-q", "--short", "HEAD"], cwd=source, capture_output=True,
                                text=True, check=False).stdout.strip() or "main"
        sha = _git("rev-parse", "HEAD", cwd=source).strip()
        payload: dict[str, Any] = {"repository": {"full_name": f"local/{self.repo}", "name": self.repo},
                                   "ref": f"refs/heads/{branch}", **event.payload}
        if event.name == "workflow_dispatch":
            payload["inputs"] = {k: to_string(v) for k, v in self.inputs.items()}
        self.event_path = root / "event.json"
        self.event_path.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        self.run_id = str(int(time.time()))
        self.github_base: dict[str, Any] = {
            "event_name": event.name, "event": payload, "event_path": str(self.event_path), "sha": sha,
            "ref": f"refs/heads/{branch}", "ref_name": branch, "ref_type": "branch", "head_ref": "", "base_ref": "",
            "repository": f"local/{self.repo}", "repository_owner": "local", "actor": "gha-local",
            "triggering_actor": "gha-local", "workflow": str(self.doc.get("name") or workflow.name),
            "run_id": self.run_id, "run_number": "1", "run_attempt": "1", "server_url": "https://github.com",
            "api_url": "https://api.github.com", "graphql_url": "https://api.github.com/graphql", "token": "",
            "action": "", "retention_days": "90"}
        self.workflow_env = {str(k): v for k, v in (self.doc.get("env") or {}).items()}

    # ------------------------------------------------------------ jobs

    def ancestors(self, job_id: str) -> set[str]:
        found: set[str] = set()
        todo = _needs(self.doc["jobs"][job_id])
        while todo:
            dep = todo.pop()
            if dep not in found:
                found.add(dep)
                todo += _needs(self.doc["jobs"][dep])
        return found

    def needs_context(self, job_id: str) -> Strict:
        needs = Strict(f"needs (jobs.{job_id}.needs)")
        for dep in _needs(self.doc["jobs"][job_id]):
            declared = self.doc["jobs"][dep].get("outputs") or {}
            outputs: dict[str, str] = dict.fromkeys(declared, "")
            for r in self.results[dep]:  # a matrix job's outputs: the last entry that set one wins
                outputs.update({k: v for k, v in r.outputs.items() if v})
            needs[dep] = {"result": _aggregate(self.results[dep]),
                          "outputs": Strict(f"needs.{dep}.outputs (declared in jobs.{dep}.outputs)", outputs)}
        return needs

    def job_status(self, job_id: str) -> StatusFn:
        results = [_aggregate(self.results[a]) for a in self.ancestors(job_id)]

        def status(name: str) -> bool:
            return {"success": all(r == "success" for r in results), "failure": "failure" in results,
                    "cancelled": "cancelled" in results, "always": True}[name]

        return status

    def run(self, only: Sequence[str] | None) -> WorkflowRun:
        start = time.monotonic()
        chosen = [j for j in self.order if only is None or j in only]
        for job_id in chosen:
            missing = sorted(self.ancestors(job_id) - set(chosen))
            if missing:
                msg = f"job {job_id} needs {', '.join(missing)}, which this run leaves out"
                raise WorkflowError(msg)
        for job_id in chosen:
            self.results[job_id] = self.run_job(job_id)
        return WorkflowRun(jobs=dict(self.results), artifacts=self.artifacts, seconds=round(time.monotonic() - start, 1))

    def run_job(self, job_id: str) -> tuple[JobResult, ...]:
        spec = self.doc["jobs"][job_id]
        needs = self.needs_context(job_id)
        contexts: dict[str, Any] = {"github": {**self.github_base, "job": job_id}, "needs": needs, "vars": self.vars,
                                    "inputs": self.inputs}

        def skipped(result: str = "skipped", error: str = "", name: str = job_id) -> JobResult:
            return JobResult(job=job_id, name=name, result=result, matrix=None, runs_on=spec.get("runs-on"), steps=(),
                             outputs={}, workspace=None, seconds=0.0, error=error)

        try:
            if not evaluate_condition(spec.get("if"), contexts, self.job_status(job_id)):
                self.log(f"{job_id}: skipped (if: {spec.get('if', 'success()')})")
                return (skipped(),)
            strategy = spec.get("strategy") or {}
            if "matrix" in strategy:
                m = strategy["matrix"]
                matrix = evaluate_template(m, contexts) if isinstance(m, str) else _evaluate_deep(m, contexts)
                entries = expand_matrix(matrix)
            else:
                entries = []
        except ExpressionError as e:
            self.log(f"{job_id}: failed before its steps: {e}")
            return (skipped("failure", str(e)),)
        if entries and self.entries is not None:
            entries = self.entries(job_id, entries)
            if not entries:
                msg = f"the entry picker chose no entry of {job_id}'s matrix"
                raise WorkflowError(msg)
        fail_fast = truthy(evaluate_template(strategy.get("fail-fast", True), contexts))
        results: list[JobResult] = []
        runs: list[dict[str, Any] | None] = [*entries] or [None]
        for i, entry in enumerate(runs):
            if fail_fast and any(r.result == "failure" for r in results):
                results.append(skipped("cancelled", "fail-fast: an earlier entry failed"))
                continue
            job = _Job(self, job_id, spec, entry, index=i, total=max(len(entries), 1), needs=needs, fail_fast=fail_fast)
            results.append(job.run())
        return tuple(results)


def _evaluate_deep(value: Any, contexts: Mapping[str, Any]) -> Any:
    if isinstance(value, Mapping):
        return {k: _evaluate_deep(v, contexts) for k, v in value.items()}
    if isinstance(value, list):
        return [_evaluate_deep(v, contexts) for v in value]
    return evaluate_template(value, contexts)


def _env_string(value: Any) -> str:
    return to_string(value) if not isinstance(value, str) else value


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "step"


def _run_process(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log: IO[str], timeout: float) -> str:
    """Run a step's process; '' when it succeeded, else why not."""
    log.flush()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = proc.wait(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the step's own process group
        proc.wait()
        return f"timed out after {timeout / 60:.1f} min"
    return "" if rc == 0 else f"exit code {rc}"


class _Job:
    """One job (one matrix entry) on a fresh runner of its own."""

    def __init__(self, runner: _Runner, job_id: str, spec: Mapping[str, Any], entry: Mapping[str, Any] | None, *,
                 index: int, total: int, needs: Strict, fail_fast: bool) -> None:
        self.runner, self.job_id, self.spec = runner, job_id, spec
        self.dir = runner.root / "jobs" / (job_id if entry is None else f"{job_id}-{index + 1}")
        self.workspace = self.dir / "work" / runner.repo / runner.repo
        self.temp, self.tool, self.logs = self.dir / "temp", self.dir / "tool", self.dir / "logs"
        for d in (self.workspace, self.temp, self.tool, self.logs):
            d.mkdir(parents=True, exist_ok=False)
        self.entry = entry
        self.path_prefix: list[str] = []
        self.exported: dict[str, str] = {}
        self.failed = False
        self.steps_ctx = Strict("steps (the steps with an id that ran before this one)")
        arch = {"x86_64": "X64", "aarch64": "ARM64", "arm64": "ARM64"}.get(platform.machine(), platform.machine())
        self.contexts: dict[str, Any] = {
            "github": {**runner.github_base, "job": job_id, "workspace": str(self.workspace)},
            "needs": needs, "vars": runner.vars, "inputs": runner.inputs, "secrets": {},
            "matrix": Strict("matrix (this job's entry)" if entry is not None else "matrix (this job has none)",
                             entry or {}),
            "strategy": {"fail-fast": fail_fast, "job-index": index, "job-total": total, "max-parallel": total},
            "runner": {"os": "Linux", "arch": arch, "name": "gha-local", "environment": "self-hosted",
                       "temp": str(self.temp), "tool_cache": str(self.tool), "debug": ""},
            "steps": self.steps_ctx}
        self.defaults = {
            "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(self.workspace),
            "GITHUB_EVENT_NAME": runner.event.name, "GITHUB_EVENT_PATH": str(runner.event_path),
            "GITHUB_JOB": job_id, "GITHUB_RUN_ID": runner.run_id, "GITHUB_RUN_NUMBER": "1", "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_REPOSITORY": f"local/{runner.repo}", "GITHUB_REPOSITORY_OWNER": "local",
            "GITHUB_SHA": runner.github_base["sha"], "GITHUB_REF": runner.github_base["ref"],
            "GITHUB_REF_NAME": runner.github_base["ref_name"], "GITHUB_REF_TYPE": "branch",
            "GITHUB_SERVER_URL": "https://github.com", "GITHUB_API_URL": "https://api.github.com",
            "GITHUB_ACTOR": "gha-local", "GITHUB_WORKFLOW": runner.github_base["workflow"],
            "RUNNER_OS": "Linux", "RUNNER_ARCH": arch, "RUNNER_NAME": "gha-local",
            "RUNNER_TEMP": str(self.temp), "RUNNER_TOOL_CACHE": str(self.tool)}
        self.env: dict[str, str] = {}

    def env_context(self, step_env: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self.env, **self.exported, **(step_env or {})}

    def ctx(self, step_env: Mapping[str, str] | None = None) -> dict[str, Any]:
        return {**self.contexts, "env": self.env_context(step_env),
                "job": {"status": "failure" if self.failed else "success"}}

    def step_status(self, name: str) -> bool:
        return {"success": not self.failed, "failure": self.failed, "cancelled": False, "always": True}[name]

    def run(self) -> JobResult:
        start = time.monotonic()
        spec = self.spec
        name, runs_on, error = self.job_id, spec.get("runs-on"), ""
        steps: list[StepResult] = []
        outputs: dict[str, str] = {}
        try:
            self.env = {k: _env_string(evaluate_template(v, {**self.contexts, "env": {}}))
                        for k, v in self.runner.workflow_env.items()}
            self.env.update({str(k): _env_string(evaluate_template(v, {**self.contexts, "env": self.env}))
                             for k, v in (spec.get("env") or {}).items()})
            name = to_string(evaluate_template(spec.get("name", self.job_id), self.ctx()))
            runs_on = evaluate_template(spec.get("runs-on"), self.ctx())
            minutes = to_number(evaluate_template(spec.get("timeout-minutes", 360), self.ctx()))
        except ExpressionError as e:
            error, minutes = str(e), 0.0
        self.runner.log(f"{name}: job {self.job_id} in {self.workspace} (runs-on {runs_on}: run here)")
        deadline = start + minutes * 60
        if not error:
            for i, step in enumerate(spec["steps"]):
                steps.append(self.run_step(i + 1, step, deadline))
            try:
                outputs = {k: to_string(evaluate_template(v, self.ctx())) for k, v in (spec.get("outputs") or {}).items()}
            except ExpressionError as e:
                error = f"outputs: {e}"
            if time.monotonic() > deadline:
                error = f"exceeded timeout-minutes ({minutes:g})"
        result = "failure" if error or self.failed else "success"
        seconds = round(time.monotonic() - start, 1)
        self.runner.log(f"{name}: {result} in {seconds:.1f} s" + (f": {error}" if error else ""))
        return JobResult(job=self.job_id, name=name, result=result, matrix=self.entry, runs_on=runs_on,
                         steps=tuple(steps), outputs=outputs, workspace=self.workspace, seconds=seconds, error=error)

    def process_env(self, step_env: Mapping[str, str], files: Mapping[str, Path]) -> dict[str, str]:
        env = {**self.runner.host_env, **self.env_context(step_env), **self.defaults,
               **{k: str(v) for k, v in files.items()}}
        if self.path_prefix:
            env["PATH"] = os.pathsep.join([*self.path_prefix, env.get("PATH", "")])
        return env

    def run_step(self, number: int, step: Mapping[str, Any], deadline: float) -> StepResult:
        start = time.monotonic()
        step_id = step.get("id")
        name = str(step.get("name") or (f"Run {str(step['run']).strip().splitlines()[0]}" if "run" in step
                                        else f"Run {step['uses']}"))
        outputs: dict[str, str] = {}
        error = ""
        continue_on_error = False
        step_env: dict[str, str] = {}
        ctx = self.ctx()
        minutes = 360.0
        try:
            if not evaluate_condition(step.get("if"), self.ctx(), self.step_status):
                self.runner.log(f"  step {number} {name}: skipped")
                return self.record(StepResult(number, name, step_id, "skipped", "skipped", 0.0, None, {}))
            step_env = {str(k): _env_string(evaluate_template(v, self.ctx())) for k, v in (step.get("env") or {}).items()}
            ctx = self.ctx(step_env)
            if "name" in step:
                name = to_string(evaluate_template(step["name"], ctx))
            continue_on_error = truthy(evaluate_template(step.get("continue-on-error", False), ctx))
            minutes = to_number(evaluate_template(step.get("timeout-minutes", 360), ctx))
        except ExpressionError as e:
            error = str(e)
        log_path = self.logs / f"{number:02d}-{_slug(name)}.log"
        self.runner.log(f"  step {number} {name} ... (log: {log_path})")
        files = {kind: self.temp / f"{kind.lower()}_{number}" for kind in
                 ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_STATE")}
        for f in files.values():
            f.write_text("")
        with log_path.open("a", encoding="utf-8") as log:
            try:
                if error:
                    raise StepFailed(error)
                timeout = min(minutes * 60, deadline - time.monotonic())
                env = self.process_env(step_env, files)
                if "run" in step:
                    script = to_string(evaluate_template(step["run"], ctx))
                    error = self.run_script(number, step, script, env, log, timeout)
                else:
                    inputs = {str(k): to_string(evaluate_template(v, ctx)) for k, v in (step.get("with") or {}).items()}
                    action = _action(str(step["uses"]), f"jobs.{self.job_id}.steps[{number - 1}]")
                    outputs.update(action.run(self, inputs, log))
                outputs.update(parse_file_commands(files["GITHUB_OUTPUT"]))
                self.exported.update(parse_file_commands(files["GITHUB_ENV"]))
                added = [p for p in files["GITHUB_PATH"].read_text(encoding="utf-8").splitlines() if p.strip()]
                self.path_prefix[:0] = reversed(added)
            except StepFailed as e:
                error = str(e)
                log.write(f"\n##[error]{error}\n")
            except (ExpressionError, OSError, subprocess.SubprocessError) as e:
                error = f"{type(e).__name__}: {e}"
                log.write(f"\n##[error]{error}\n")
        outcome = "failure" if error else "success"
        conclusion = "success" if continue_on_error else outcome
        if conclusion == "failure":
            self.failed = True
        result = StepResult(number, name, step_id, outcome, conclusion, round(time.monotonic() - start, 1), log_path,
                            outputs, error)
        self.runner.log(f"  step {number} {name}: {outcome} in {result.seconds:.1f} s" + (f" ({error})" if error else ""))
        return self.record(result)

    def record(self, result: StepResult) -> StepResult:
        if result.id:
            self.steps_ctx[result.id] = {"outputs": dict(result.outputs), "outcome": result.outcome,
                                         "conclusion": result.conclusion}
        return result

    def run_script(self, number: int, step: Mapping[str, Any], script: str, env: Mapping[str, str], log: IO[str],
                   timeout: float) -> str:
        defaults = (self.spec.get("defaults") or self.runner.doc.get("defaults") or {}).get("run") or {}
        shell = step.get("shell") or defaults.get("shell") or "bash"
        cwd = _inside(self.workspace, str(evaluate_template(step.get("working-directory")
                                                              or defaults.get("working-directory") or ".", self.ctx())))
        argv = list(SHELLS[shell])
        program = shutil.which(argv[0], path=env.get("PATH"))
        if program is None:
            return f"{argv[0]} not found on PATH"
        path = self.temp / f"step_{number}{'.py' if shell == 'python' else '.sh'}"
        path.write_text(script, encoding="utf-8")
        log.write(f"##[group]Run ({shell} in {cwd})\n" + "".join(f"| {line}\n" for line in script.splitlines())
                  + "##[endgroup]\n")
        return _run_process([program, *argv[1:], str(path)], cwd=cwd, env=env, log=log, timeout=timeout)


def _default_log(message: str) -> None:
    print(f"[gha-local] {message}", file=sys.stderr, flush=True)


def run_workflow(workflow: Path, *, source: Path, root: Path, event: Event | None = None,
                 variables: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
                 entries: EntryPicker | None = None, jobs: Sequence[str] | None = None,
                 artifacts: Mapping[str, Path] | None = None,
                 log: Callable[[str], None] = _default_log) -> WorkflowRun:
    """Run ``workflow``'s jobs (``jobs``: a subset closed under ``needs``) from the repository at
    ``source`` into ``root`` (a new, empty directory: job workspaces, logs and artifacts).

    :param event: what triggered the run (default: workflow_dispatch with the default inputs).
    :param variables: the ``vars`` context (repository variables; unset ones are null).
    :param env: variables every job's processes get on top of this host's (see :func:`host_environment`).
    :param entries: ``entries(job_id, matrix_entries) -> entries to run``, to pick or adjust entries.
    :param artifacts: artifacts present before the run (name -> directory), as if uploaded by
        jobs not run here (another host's matrix entry).
    """
    if root.exists() and any(root.iterdir()):
        msg = f"{root} is not empty: each run gets a fresh directory"
        raise WorkflowError(msg)
    runner = _Runner(workflow, source=source, root=root, event=event or Event(), variables=variables or {},
                     env=env or {}, entries=entries, log=log)
    for name, directory in (artifacts or {}).items():
        shutil.copytree(directory, runner.artifacts / name)
    return runner.run(jobs)
