"""GitHub's expression language as the runner evaluates it, and the file commands a step leaves.

``${{ }}`` is tokenized and parsed by recursive descent over GitHub's expression grammar
(:func:`parse`), then evaluated with GitHub's loose equality, truthiness and functions
(:func:`evaluate`); :func:`evaluate_template` and :func:`evaluate_condition` are what a workflow's
strings and ``if:`` keys go through. :func:`parse_file_commands` reads ``$GITHUB_OUTPUT`` and
``$GITHUB_ENV`` back after a step.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeAlias


class WorkflowError(Exception):
    """The workflow asks for something this runner does not do, or is not a valid workflow."""


class ExpressionError(WorkflowError):
    """An expression that does not parse, or a value it cannot take."""


class StepFailed(Exception):
    """A step failed for a reason of its own (a stand-in action, a file command): the step's error."""


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
