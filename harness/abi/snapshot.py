"""Parse public C headers with libclang, once per target triple, into a flat ABI surface.

No system headers are used: ``-nostdinc`` plus a tiny shim of the few libc
headers llama.cpp/ggml include. The libclang wheel ships no resource headers,
and a host's ``/usr/include`` would describe the host, not ``arm64-apple-darwin``;
the shim defines every type through clang's per-target predefined macros
(``__INT64_TYPE__``, ``__SIZE_TYPE__``), so one shim is right for every target and
the result is the same on every machine.
"""

from __future__ import annotations

import ast
import operator
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import clang.cindex as ci

from harness.abi.surface import DEFAULT_TARGETS, Flat, Surface, build_surface, empty_flat
from harness.core.errors import AbiError

#: Object-like macros recorded as constants: version numbers, file magics, the default seed.
CONSTANT_PATTERN = r"(_VERSION|_MAGIC(_[A-Z0-9]+)?|_DEFAULT_SEED)$"

_STDINT = "\n".join(
    [f"typedef __{s}INT{n}_TYPE__ {s.lower()}int{n}_t;" for s in ("", "U") for n in (8, 16, 32, 64)]
    + [f"#define INT{n}_MAX __INT{n}_MAX__\n#define UINT{n}_MAX __UINT{n}_MAX__" for n in (8, 16, 32, 64)]
    + [f"#define INT{n}_MIN (-__INT{n}_MAX__ - 1)" for n in (8, 16, 32, 64)]
    + [
        "typedef __INTPTR_TYPE__ intptr_t;",
        "typedef __UINTPTR_TYPE__ uintptr_t;",
        "typedef __INTMAX_TYPE__ intmax_t;",
        "typedef __UINTMAX_TYPE__ uintmax_t;",
        "#define SIZE_MAX __SIZE_MAX__",
    ]
)
SHIM: dict[str, str] = {
    "stdint.h": _STDINT,
    "inttypes.h": '#include "stdint.h"',
    "stddef.h": "typedef __SIZE_TYPE__ size_t;\ntypedef __PTRDIFF_TYPE__ ptrdiff_t;\n"
    "typedef __WCHAR_TYPE__ wchar_t;\n#define NULL ((void *)0)\n"
    "#define offsetof(t, m) __builtin_offsetof(t, m)",
    # A typedef, not the usual macro, so types read `bool` rather than `_Bool`.
    "stdbool.h": "typedef _Bool bool;\n#define true 1\n#define false 0",
    "stdarg.h": "typedef __builtin_va_list va_list;",
    "stdio.h": '#include "stddef.h"\n#include "stdarg.h"\ntypedef struct _harness_FILE FILE;',
    "stdlib.h": '#include "stddef.h"',
    "string.h": '#include "stddef.h"',
    "limits.h": "#define INT_MAX __INT_MAX__\n#define INT_MIN (-__INT_MAX__ - 1)\n"
    "#define LONG_MAX __LONG_MAX__\n#define CHAR_BIT __CHAR_BIT__",
}

_K = ci.CursorKind
_RECORDS = (_K.STRUCT_DECL, _K.UNION_DECL)
_ANON = re.compile(r"(?:[\w:]*::)?\((?:anonymous|unnamed)[^()]*? at [^()]*\)")
_NAME = re.compile(r"[A-Za-z_]\w*")
_INT = re.compile(r"^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9]\d*)[uUlL]*$")
_OPS: dict[type, Callable[..., int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
    ast.USub: operator.neg, ast.Invert: operator.invert, ast.UAdd: operator.pos,
}


def _unnamed(cursor: Any) -> bool:
    """No usable name: clang spells unnamed declarations as ``(anonymous ... at file:line)``."""
    return not _NAME.fullmatch(str(cursor.spelling))


def _spell(t: Any) -> str:
    """A type's spelling without the file paths clang puts in anonymous types."""
    return _ANON.sub("(anonymous)", str(t.spelling))


# --------------------------------------------------------------------------- constants


def _int_literal(tok: str) -> int | None:
    m = _INT.match(tok)
    if not m:
        return None
    digits = m.group(1)
    if digits.startswith(("0x", "0X")):
        return int(digits, 16)
    return int(digits, 8) if len(digits) > 1 and digits[0] == "0" else int(digits)


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError("not an integer constant expression")


def evaluate_macros(bodies: Mapping[str, Sequence[str]]) -> dict[str, int | str]:
    """Evaluate object-like macro bodies that are literals or integer expressions of them.

    Names resolve through other macros (``LLAMA_SESSION_MAGIC`` ->
    ``LLAMA_FILE_MAGIC_GGSN`` -> ``0x6767736eu``); anything else is skipped.
    """
    done: dict[str, int | str | None] = {}

    def value(name: str, depth: int = 0) -> int | str | None:
        if name in done:
            return done[name]
        done[name] = None  # guards against self-reference
        toks = list(bodies.get(name, ()))
        result: int | str | None = None
        if len(toks) == 1 and toks[0].startswith('"') and toks[0].endswith('"'):
            result = toks[0][1:-1]
        elif toks and depth < 16:
            parts: list[str] = []
            for tok in toks:
                lit = _int_literal(tok)
                if lit is not None:
                    parts.append(str(lit))
                elif tok in bodies:
                    sub = value(tok, depth + 1)
                    if isinstance(sub, str) or sub is None:
                        parts = []
                        break
                    parts.append(f"({sub})")
                elif tok in ("(", ")", "+", "-", "*", "/", "<<", ">>", "|", "&", "^", "~"):
                    parts.append("//" if tok == "/" else tok)
                else:
                    parts = []
                    break
            if len(toks) == 1 and toks[0] in bodies and parts:
                result = value(toks[0], depth + 1)
            elif parts:
                try:
                    result = _eval(ast.parse(" ".join(parts), mode="eval"))
                except (ValueError, SyntaxError, TypeError, ZeroDivisionError):
                    result = None
        done[name] = result
        return result

    out: dict[str, int | str] = {}
    for name in bodies:
        v = value(name)
        if v is not None:
            out[name] = v
    return out


def _macro_body(cursor: Any) -> list[str] | None:
    """Body tokens of an object-like macro; None for a function-like one."""
    toks = list(cursor.get_tokens())
    # Function-like iff a parenthesis touches the name (``F(x)``, not ``F (x)``).
    if len(toks) > 1 and toks[1].spelling == "(" and toks[1].extent.start.offset == toks[0].extent.end.offset:
        return None
    return [t.spelling for t in toks[1:]]


# --------------------------------------------------------------------------- declarations


class _Collector:
    """Walks one translation unit and keeps declarations from files under ``root``."""

    def __init__(self, root: Path, constant_only: set[Path]) -> None:
        self.root = root
        self.constant_only = constant_only
        self.flat = empty_flat()
        self.macros: dict[str, list[str]] = {}
        self.macro_names: set[str] = set()
        self._file_ok: dict[str, tuple[bool, bool]] = {}
        self._tag_names: dict[tuple[str, int], str] = {}

    def _where(self, cursor: Any) -> tuple[bool, bool]:
        """(declarations wanted, macros wanted) for the cursor's file."""
        f = cursor.location.file
        if f is None:
            return False, False
        name = str(f.name)
        if name not in self._file_ok:
            p = Path(name).resolve()
            inside = p.is_relative_to(self.root)
            self._file_ok[name] = (inside and p not in self.constant_only, inside)
        return self._file_ok[name]

    @staticmethod
    def _key(cursor: Any) -> tuple[str, int]:
        loc = cursor.location
        return (str(loc.file.name) if loc.file else "", int(loc.offset))

    def _tag(self, cursor: Any) -> str | None:
        """The name a struct/enum is known by: its tag, else the typedef naming it."""
        if not _unnamed(cursor):
            return str(cursor.spelling)
        return self._tag_names.get(self._key(cursor))

    def run(self, tu: Any) -> Flat:
        top = list(tu.cursor.get_children())
        # Typedefs first, so `typedef struct { ... } name;` records are named before use.
        for c in top:
            if c.kind == _K.TYPEDEF_DECL:
                decl = c.underlying_typedef_type.get_declaration()
                if decl.kind in (*_RECORDS, _K.ENUM_DECL) and _unnamed(decl):
                    self._tag_names[self._key(decl)] = str(c.spelling)
        for c in top:
            decls, macros = self._where(c)
            if c.kind == _K.MACRO_DEFINITION:
                if macros:
                    body = _macro_body(c)
                    if body is not None:
                        self.macros[str(c.spelling)] = body
                continue
            if not decls:
                continue
            if c.kind == _K.FUNCTION_DECL:
                self._function(c)
            elif c.kind in _RECORDS:
                self._record(c)
            elif c.kind == _K.ENUM_DECL:
                self._enum(c)
            elif c.kind == _K.TYPEDEF_DECL:
                self._typedef(c)
        return self.flat

    def _function(self, c: Any) -> None:
        if c.storage_class == ci.StorageClass.STATIC:
            return  # static inline helpers are compiled into the caller: no symbol, no ABI
        item: dict[str, Any] = {
            "return": _spell(c.result_type),
            "params": [{"name": str(a.spelling), "type": _spell(a.type)} for a in c.get_arguments()],
            "variadic": bool(c.type.kind == ci.TypeKind.FUNCTIONPROTO and c.type.is_function_variadic()),
        }
        if c.availability == ci.AvailabilityKind.DEPRECATED:
            item["deprecated"] = True
        self.flat["functions"][str(c.spelling)] = item

    def _fields(self, record: Any, base_bits: int, prefix: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for f in record.type.get_fields():
            bits = base_bits + int(f.get_field_offsetof())
            decl = f.type.get_declaration()
            nested = decl.kind in _RECORDS and _unnamed(decl)
            if nested and _unnamed(f):
                # C11 anonymous struct/union member: its fields belong to the parent.
                out.extend(self._fields(decl, bits, prefix))
                continue
            name = prefix + str(f.spelling)
            field: dict[str, Any] = {"name": name, "type": _spell(f.type), "offset": bits // 8}
            if f.is_bitfield():
                field["bits"] = int(f.get_bitfield_width())
                field["bit_offset"] = bits
            out.append(field)
            if nested:
                out.extend(self._fields(decl, bits, name + "."))
        return out

    def _record(self, c: Any) -> None:
        for child in c.get_children():  # C hoists nested named records to file scope
            if child.kind in _RECORDS and child.is_definition() and not _unnamed(child):
                self._record(child)
        name = self._tag(c)
        if not c.is_definition() or name is None:
            return
        size, align = int(c.type.get_size()), int(c.type.get_align())
        if size < 0:
            return
        self.flat["structs"][name] = {
            "kind": "union" if c.kind == _K.UNION_DECL else "struct",
            "size": size,
            "align": align,
            "fields": self._fields(c, 0, ""),
        }

    def _enum(self, c: Any) -> None:
        if not c.is_definition():
            return
        consts = {str(e.spelling): int(e.enum_value) for e in c.get_children()
                  if e.kind == _K.ENUM_CONSTANT_DECL}
        name = self._tag(c) or f"<anonymous {next(iter(consts), '')}>"
        self.flat["enums"][name] = {"type": _spell(c.enum_type), "constants": consts}

    def _typedef(self, c: Any) -> None:
        under = c.underlying_typedef_type
        decl = under.get_declaration()
        if decl.kind in (*_RECORDS, _K.ENUM_DECL) and (_unnamed(decl) or decl.spelling == c.spelling):
            # `typedef struct {..} T;` and `typedef struct T {..} T;` read the same: `struct T`.
            kind = {"STRUCT_DECL": "struct", "UNION_DECL": "union"}.get(decl.kind.name, "enum")
            spelling = f"{kind} {c.spelling}"
            if decl.kind in _RECORDS:
                self._record(decl)
            else:
                self._enum(decl)
        else:
            spelling = _spell(under)
        self.flat["typedefs"][str(c.spelling)] = spelling


# --------------------------------------------------------------------------- entry points


def _write_shim(directory: Path) -> None:
    for name, text in SHIM.items():
        (directory / name).write_text(text + "\n")


def parse_target(
    root: Path,
    headers: Sequence[str],
    include_dirs: Sequence[str],
    target: str,
    *,
    shim_dir: Path,
    defines: Sequence[str] = (),
    constant_headers: Sequence[str] = (),
    constant_pattern: str = CONSTANT_PATTERN,
    keep_constants: Sequence[str] = (),
) -> Flat:
    """One target's flat surface. Raises :class:`AbiError` on any parse error.

    Macros named in ``keep_constants`` (the engine's declared ABI version) are kept whatever
    ``constant_pattern`` says.
    """
    root = root.resolve()
    umbrella = root.parent / f".harness-abi-umbrella-{root.name}.c"
    wanted = [*headers, *constant_headers]
    missing = [h for h in wanted if not (root / h).is_file()]
    if missing:
        msg = (f"ABI headers not found under {root}: {', '.join(missing)}. "
               "Fix abi.headers / abi.constant_headers in the engine descriptor")
        raise AbiError(msg)
    text = "".join(f'#include "{(root / h).as_posix()}"\n' for h in wanted)
    args = ["-target", target, "-x", "c", "-std=c11", "-nostdinc", "-isystem", str(shim_dir)]
    args += [f"-I{root / d}" for d in include_dirs]
    args += [f"-D{d}" for d in defines]
    opts = ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD | ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES
    try:
        tu = ci.Index.create().parse(str(umbrella), args=args, unsaved_files=[(str(umbrella), text)], options=opts)
    except ci.TranslationUnitLoadError as e:
        msg = (f"libclang failed on the ABI headers for {target} ({e}): it gives up on a file it cannot read "
               "whole (an endless file or a device a header includes, such as /dev/zero) and when it crashes")
        raise AbiError(msg) from None
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        shown = "\n".join(f"  {d.location.file}:{d.location.line}: {d.spelling}" for d in errors[:10])
        msg = (f"libclang could not parse the ABI headers for {target} ({len(errors)} errors):\n{shown}\n"
               "A missing system header needs an entry in harness.abi.snapshot.SHIM; "
               "a platform #if may need abi.defines in the engine descriptor")
        raise AbiError(msg)
    col = _Collector(root, {(root / h).resolve() for h in constant_headers})
    flat = col.run(tu)
    pattern = re.compile(constant_pattern)
    keep = set(keep_constants)
    flat["constants"] = {k: v for k, v in evaluate_macros(col.macros).items() if k in keep or pattern.search(k)}
    return flat


def snapshot_headers(
    root: Path,
    headers: Sequence[str],
    include_dirs: Sequence[str],
    targets: Iterable[str] = DEFAULT_TARGETS,
    *,
    defines: Sequence[str] = (),
    constant_headers: Sequence[str] = (),
    constant_pattern: str = CONSTANT_PATTERN,
    keep_constants: Sequence[str] = (),
    meta: Mapping[str, Any] | None = None,
) -> Surface:
    """The merged, fingerprinted surface of ``headers`` (relative to ``root``) on ``targets``.

    ``constant_headers`` contribute only macros (e.g. ``ggml/src/ggml-backend-impl.h``
    for ``GGML_BACKEND_API_VERSION``, which no public header defines).
    """
    targets = list(dict.fromkeys(targets))
    with tempfile.TemporaryDirectory(prefix="harness-abi-shim-") as tmp:
        shim = Path(tmp)
        _write_shim(shim)
        flats = {
            t: parse_target(root, headers, include_dirs, t, shim_dir=shim, defines=defines,
                            constant_headers=constant_headers, constant_pattern=constant_pattern,
                            keep_constants=keep_constants)
            for t in targets
        }
    info: dict[str, Any] = {"headers": list(headers), "include_dirs": list(include_dirs)}
    if constant_headers:
        info["constant_headers"] = list(constant_headers)
    if defines:
        info["defines"] = list(defines)
    return build_surface(flats, {**info, **(meta or {})})


def snapshot_request(*, root: str, headers: Sequence[str], include_dirs: Sequence[str], targets: Sequence[str],
                     defines: Sequence[str], constant_headers: Sequence[str], constant_pattern: str,
                     keep_constants: Sequence[str], meta: Mapping[str, Any] | None) -> Surface:
    """:func:`snapshot_headers` over JSON values: the parse :mod:`harness.abi.sandboxed` runs here or in the sandbox."""
    return snapshot_headers(Path(root), headers, include_dirs, targets, defines=defines,
                            constant_headers=constant_headers, constant_pattern=constant_pattern,
                            keep_constants=keep_constants, meta=meta)
