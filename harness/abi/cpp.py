"""The C++ declarations the binding uses, recorded in the committed surface and compared between pins.

The C surface (:mod:`harness.abi.snapshot`) covers the engine's C headers. A binding also calls C++ APIs
(llama.cpp's ``common``: ``common_chat_parse``, ``common_chat_params::parser``, ...). ``abi snapshot``
records which of them the binding touches (libclang over the binding's own translation units, compiled
against the pin's headers through the stand-in artifact of :mod:`harness.abi.binding`): every function by
its qualified name with the signatures its overloads have, every class with the members the binding
touches (fields with their types, methods and constructors with their signatures), every enum with the
enumerators it names. ``abi diff --used`` resolves the same names in two pins' headers and names what
changed, first, before the C differences: the part of a pin move that breaks the binding's C++.

Declarations the C surface already covers (files under ``abi.include_dirs``) are left to it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core import progress
from harness.core.errors import AbiError

if TYPE_CHECKING:
    import clang.cindex as ci

    from harness.core.types import EngineSpec

Record = dict[str, Any]
_FUNCS = frozenset({"FUNCTION_DECL", "FUNCTION_TEMPLATE"})
_METHODS = frozenset({"CXX_METHOD", "CONSTRUCTOR", "DESTRUCTOR", "CONVERSION_FUNCTION"})
_CLASSES = frozenset({"STRUCT_DECL", "CLASS_DECL", "CLASS_TEMPLATE", "UNION_DECL"})
_SCOPES = frozenset({"NAMESPACE", *_CLASSES, "ENUM_DECL"})


def _builtin_include() -> list[str]:
    """GCC's own builtin headers (stddef.h, ...): the libclang wheel ships no resource directory."""
    for cc in ("gcc", "cc", "clang"):
        try:
            r = subprocess.run([cc, "-print-file-name=include"], capture_output=True, text=True, timeout=30, check=False)
        except OSError:
            continue
        path = r.stdout.strip()
        if r.returncode == 0 and os.path.isabs(path) and os.path.isdir(path):
            return ["-isystem", path]
    return []


def _qualified(c: ci.Cursor) -> str:
    parts = [str(c.spelling)]
    p = c.semantic_parent
    while p is not None and p.kind.name in _SCOPES:
        parts.append(str(p.spelling))
        p = p.semantic_parent
    return "::".join(reversed(parts))


def _file(c: ci.Cursor) -> str:
    return str(c.location.file) if c.location.file is not None else ""


def _parse_args(entry: Mapping[str, Any]) -> list[str]:
    from harness.abi.binding import _syntax_argv

    unit = str(Path(entry.get("directory", ".")) / entry["file"])
    argv = _syntax_argv(dict(entry))[1:]  # the compiler itself is not an argument
    keep: list[str] = []
    for a in argv:
        if a in ("-fsyntax-only", unit, entry["file"]) or a.startswith(("-flto", "-fvisibility", "-fno-fat-lto")):
            continue
        keep.append(a)
    return [*keep, *_builtin_include()]


def _c_owned(name: str, c_dirs: Sequence[str]) -> bool:
    return any(name == d or name.startswith(d.rstrip("/") + "/") for d in c_dirs)


def used_names(entries: Sequence[Mapping[str, Any]], include: Path, names: Mapping[str, str], source_dir: Path,
               c_dirs: Sequence[str]) -> Record:
    """What the binding's units reference in the pinned tree (outside the C surface's directories)."""
    import clang.cindex as ci

    inc = str(include) + os.sep
    own = (str(source_dir.resolve()) + os.sep, str((source_dir.parent.parent / "_shared").resolve()) + os.sep)

    def one(entry: Mapping[str, Any]) -> Record:
        unit = str(Path(entry.get("directory", ".")) / entry["file"])
        tu = ci.Index.create().parse(unit, args=_parse_args(entry))
        errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
        if errors:
            shown = "; ".join(f"{d.location.file}:{d.location.line}: {d.spelling}" for d in errors[:5])
            msg = f"libclang could not parse {unit} ({len(errors)} errors: {shown}); run `harness abi check` first"
            raise AbiError(msg)
        found: Record = {"functions": set(), "members": {}, "enums": {}, "headers": set()}
        for c in tu.cursor.walk_preorder():
            if not _file(c).startswith(own):
                continue
            r = c.referenced
            if r is None or not _file(r).startswith(inc):
                continue
            header = names.get(_file(r)[len(inc):], _file(r)[len(inc):])
            if _c_owned(header, c_dirs) or str(r.spelling).startswith("__"):
                continue
            kind = r.kind.name
            if kind in _FUNCS:
                found["functions"].add(_qualified(r))
            elif kind in _METHODS or kind == "FIELD_DECL":
                owner = r.semantic_parent
                if owner is not None and owner.kind.name in _CLASSES:
                    found["members"].setdefault(_qualified(owner), set()).add(str(r.spelling))
            elif kind in _CLASSES:
                found["members"].setdefault(_qualified(r), set())
            elif kind == "ENUM_CONSTANT_DECL":
                owner = r.semantic_parent
                found["enums"].setdefault(_qualified(owner) if owner is not None else "", set()).add(str(r.spelling))
            else:
                continue
            found["headers"].add(header)
        return found

    with ThreadPoolExecutor(max_workers=max(1, min(len(entries), os.cpu_count() or 1))) as pool:
        parts = list(pool.map(one, entries))
    merged: Record = {"functions": set(), "members": {}, "enums": {}, "headers": set()}
    for part in parts:
        merged["functions"] |= part["functions"]
        merged["headers"] |= part["headers"]
        for key in ("members", "enums"):
            for k, v in part[key].items():
                merged[key].setdefault(k, set()).update(v)
    return merged


def _signature(c: ci.Cursor) -> str:
    result = c.result_type.spelling if c.kind.name not in ("CONSTRUCTOR", "DESTRUCTOR") else ""
    args = ", ".join(a.type.spelling for a in c.get_arguments() or ())
    const = " const" if c.kind.name == "CXX_METHOD" and c.is_const_method() else ""
    return f"{result} ({args}){const}".strip()


def declarations(include: Path, include_dirs: Sequence[str], headers: Iterable[str], names: Mapping[str, str],
                 used: Record, std: str = "c++17") -> Record:
    """The declarations of the ``used`` names in one pin's headers: functions -> sorted signatures of every
    overload; classes -> member -> sorted types/signatures; enums -> enumerator -> value. A name the pin
    lacks is absent."""
    import clang.cindex as ci

    back = {v: k for k, v in names.items()}
    present = [back[h] for h in sorted(headers) if h in back]
    inc = str(include) + os.sep
    with tempfile.TemporaryDirectory(prefix="harness-cpp-") as tmp:
        umbrella = Path(tmp) / "umbrella.cpp"
        umbrella.write_text("".join(f'#include "{(include / h).as_posix()}"\n' for h in present))
        args = ["-x", "c++", f"-std={std}", *(f"-I{include.parent / d}" for d in include_dirs), *_builtin_include()]
        tu = ci.Index.create().parse(str(umbrella), args=args, options=ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES)
    functions = set(used.get("functions", ()))
    members = {k: set(v) for k, v in dict(used.get("members", {})).items()}
    enums = {k: set(v) for k, v in dict(used.get("enums", {})).items()}
    out: Record = {"functions": {}, "classes": {}, "enums": {}}
    for c in tu.cursor.walk_preorder():
        if not _file(c).startswith(inc):
            continue
        kind = c.kind.name
        if kind in _FUNCS and _qualified(c) in functions:
            out["functions"].setdefault(_qualified(c), set()).add(_signature(c))
        elif kind in _CLASSES and c.is_definition() and _qualified(c) in members:
            out["classes"].setdefault(_qualified(c), {})
        elif kind in (*_METHODS, "FIELD_DECL") and c.semantic_parent is not None:
            owner = _qualified(c.semantic_parent)
            if str(c.spelling) in members.get(owner, ()):
                what = c.type.spelling if kind == "FIELD_DECL" else _signature(c)
                out["classes"].setdefault(owner, {}).setdefault(str(c.spelling), set()).add(what)
        elif kind == "ENUM_CONSTANT_DECL" and c.semantic_parent is not None:
            owner = _qualified(c.semantic_parent)
            if str(c.spelling) in enums.get(owner, ()):
                out["enums"].setdefault(owner, {})[str(c.spelling)] = int(c.enum_value)
    return {
        "functions": {k: sorted(v) for k, v in sorted(out["functions"].items())},
        "classes": {k: {m: sorted(t) for m, t in sorted(v.items())} for k, v in sorted(out["classes"].items())},
        "enums": {k: dict(sorted(v.items())) for k, v in sorted(out["enums"].items())},
    }


def record_request(*, entries: Sequence[Mapping[str, Any]], include: str, names: Mapping[str, str], source_dir: str,
                   c_dirs: Sequence[str], include_dirs: Sequence[str]) -> Record:
    """:func:`used_names` and then :func:`declarations` of them, over JSON values (sets as sorted lists): the parse
    :mod:`harness.abi.sandboxed` runs here or in the sandbox."""
    used = used_names(entries, Path(include), names, Path(source_dir), c_dirs)
    decls = declarations(Path(include), include_dirs, used["headers"], names, used)
    return {"used": {"functions": sorted(used["functions"]), "headers": sorted(used["headers"]),
                     "members": {k: sorted(v) for k, v in used["members"].items()},
                     "enums": {k: sorted(v) for k, v in used["enums"].items()}},
            "declarations": decls}


def declarations_request(*, include: str, include_dirs: Sequence[str], headers: Sequence[str],
                         names: Mapping[str, str], used: Record) -> Record:
    """:func:`declarations` over JSON values: the parse :mod:`harness.abi.sandboxed` runs here or in the sandbox."""
    return declarations(Path(include), include_dirs, headers, names, used)


def _include_dirs(entries: Sequence[Mapping[str, Any]], artifact: Path) -> list[str]:
    """The binding's -I directories inside the stand-in artifact, relative to it (``include``, ``include/common``)."""
    from harness.abi.binding import _syntax_argv

    root = str(artifact) + os.sep
    dirs: list[str] = []
    for entry in entries[:1]:
        argv = _syntax_argv(dict(entry))
        for i, a in enumerate(argv):
            path = a[2:] if a.startswith("-I") and len(a) > 2 else (argv[i + 1] if a in ("-I", "-isystem") else "")
            if path.startswith(root):
                dirs.append(path[len(root):])
    return list(dict.fromkeys(dirs)) or ["include"]


def record(spec: EngineSpec, tree: Path, source_dir: Path | None = None) -> Record | None:
    """The ``cpp`` section of the surface: what the binding uses of the pin's C++ headers, as declared there."""
    from harness.abi import sandboxed
    from harness.abi.binding import stand_in
    from harness.binding.wheel import binding_source
    from harness.sandbox.bwrap import python_paths

    source_dir = source_dir or binding_source(spec)
    if not (source_dir / "CMakeLists.txt").is_file():
        return None
    c_dirs = [str(d) for d in spec.abi.get("include_dirs", [])]
    with progress.spinner(f"binding {spec.name}: the C++ declarations it uses (libclang)"), \
            stand_in(spec, tree, source_dir) as si:
        dirs = _include_dirs(si.entries, si.artifact)
        # the units are the recipe's, and so are their compile commands (CMake ran its CMakeLists.txt)
        found = sandboxed.parse(
            spec, record_request,
            {"entries": [dict(e) for e in si.entries], "include": str(si.include), "names": dict(si.names),
             "source_dir": str(source_dir), "c_dirs": c_dirs, "include_dirs": dirs},
            tree=tree, work=si.artifact.parent,
            shown=[source_dir, source_dir.parent.parent / "_shared", *map(Path, python_paths().values())])
        used, decls = found["used"], found["declarations"]
    return {"headers": sorted(used["headers"]), "include_dirs": dirs,
            "used": {"functions": sorted(used["functions"]),
                     "members": {k: sorted(v) for k, v in sorted(used["members"].items())},
                     "enums": {k: sorted(v) for k, v in sorted(used["enums"].items())}},
            **decls}


def at_tree(spec: EngineSpec, tree: Path, committed: Mapping[str, Any], *, recipe: EngineSpec | None = None) -> Record:
    """The committed ``cpp`` record's used names resolved in another tree's headers. ``recipe``: whose tree it is
    (default ``spec``); an untrusted recipe's headers are parsed in the sandbox."""
    from harness.abi import sandboxed
    from harness.abi.binding import _stand_in

    with tempfile.TemporaryDirectory(prefix="harness-cpp-pin-") as tmp:
        names = _stand_in(spec, tree, Path(tmp) / "artifact")
        # the record comes from a recipe's surface.json: only directories inside the stand-in artifact
        dirs = [str(d) for d in committed.get("include_dirs") or ["include"]
                if not Path(str(d)).is_absolute() and ".." not in Path(str(d)).parts] or ["include"]
        args = {"include": str(Path(tmp) / "artifact" / "include"), "include_dirs": dirs,
                "headers": [str(h) for h in committed.get("headers") or ()], "names": names,
                "used": dict(committed.get("used") or {})}
        found: Record = sandboxed.parse(recipe or spec, declarations_request, args, tree=tree, work=Path(tmp))
        return found


def merge_used(a: Mapping[str, Any], b: Mapping[str, Any]) -> Record:
    """Two ``cpp`` records' used names together (headers and include dirs of both): what either binding uses."""
    if not b:
        return dict(a)
    if not a:
        return dict(b)
    ua, ub = dict(a.get("used") or {}), dict(b.get("used") or {})
    members: dict[str, set[str]] = {}
    enums: dict[str, set[str]] = {}
    for u in (ua, ub):
        for k, v in dict(u.get("members") or {}).items():
            members.setdefault(k, set()).update(v)
        for k, v in dict(u.get("enums") or {}).items():
            enums.setdefault(k, set()).update(v)
    return {"headers": sorted({*a.get("headers", ()), *b.get("headers", ())}),
            "include_dirs": list(dict.fromkeys([*a.get("include_dirs", ()), *b.get("include_dirs", ())])),
            "used": {"functions": sorted({*ua.get("functions", ()), *ub.get("functions", ())}),
                     "members": {k: sorted(v) for k, v in sorted(members.items())},
                     "enums": {k: sorted(v) for k, v in sorted(enums.items())}}}


def _diff_named(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``name: removed/added/old -> new`` for each name whose declarations (a list of spellings) differ."""
    lines = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            lines.append(f"{prefix}{name}: removed (was {' | '.join(a[name])})")
        elif name not in a:
            lines.append(f"{prefix}{name}: added ({' | '.join(b[name])})")
        elif a[name] != b[name]:
            lines.append(f"{prefix}{name}: {' | '.join(a[name])} -> {' | '.join(b[name])}")
    return lines


def diff_records(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """One line per used C++ declaration that differs between two resolved records."""
    lines = _diff_named(dict(a.get("functions", {})), dict(b.get("functions", {})))
    ca, cb = dict(a.get("classes", {})), dict(b.get("classes", {}))
    for cls in sorted(set(ca) | set(cb)):
        if cls not in cb or cls not in ca:
            lines.append(f"{cls}: class {'removed' if cls not in cb else 'added'}")
            continue
        lines += _diff_named(dict(ca[cls]), dict(cb[cls]), prefix=f"{cls}::")
    ea, eb = dict(a.get("enums", {})), dict(b.get("enums", {}))
    for enum in sorted(set(ea) | set(eb)):
        xa, xb = dict(ea.get(enum, {})), dict(eb.get(enum, {}))
        for k in sorted(set(xa) | set(xb)):
            if xa.get(k) != xb.get(k):
                lines.append(f"{enum}::{k}: {xa.get(k, 'absent')} -> {xb.get(k, 'absent')}")
    return lines


def diff_pins(spec: EngineSpec, pin_a: str, pin_b: str) -> list[str]:
    """The committed record's used C++ names, resolved in both pins' trees, compared."""
    from harness.abi.check import load_committed
    from harness.abi.revisions import locate

    committed = load_committed(spec.name, spec.surface_path).get("cpp") or {}
    for pin in (pin_a, pin_b):  # a pin that is a recipe of this repository adds what its binding used
        recipe = _recipe_of(spec, pin)
        if recipe is not None:
            committed = merge_used(committed, recipe_used(recipe))
    if not committed:
        return []
    with progress.spinner(f"{spec.name}: the binding's C++ declarations in {pin_a} and {pin_b}"):
        found_a, found_b = locate(pin_a, spec), locate(pin_b, spec)
        a = at_tree(spec, found_a.path, committed, recipe=found_a.recipe)
        b = at_tree(spec, found_b.path, committed, recipe=found_b.recipe)
    return diff_records(a, b)


def recipe_used(recipe: EngineSpec) -> Record:
    """What a recipe's binding uses of its pin's C++: its committed ``cpp`` record, else (a recipe from before
    the record existed) computed now from its own binding sources against its own patched tree."""
    from harness.abi.check import load_committed

    if recipe.surface_path.is_file():
        found = load_committed(recipe.name, recipe.surface_path).get("cpp")
        if found:
            return dict(found)
    from harness.binding.wheel import binding_source
    from harness.build.pipeline import patched_tree

    return record(recipe, patched_tree(recipe).path, binding_source(recipe)) or {}


def _recipe_of(spec: EngineSpec, pin: str) -> EngineSpec | None:
    from harness.abi.revisions import _recipe
    from harness.build.recipes import RecipeError

    if Path(pin).expanduser().is_dir() or pin.startswith("pypi:"):
        return None
    try:
        return _recipe(spec, pin)
    except RecipeError:
        return None


def render_markdown(lines: Sequence[str]) -> str:
    head = "### C++ declarations the binding uses"
    if not lines:
        return f"{head}\n\nNo differences in the C++ declarations the binding uses.\n"
    return "\n".join([head, "", f"{len(lines)} differences (the binding must change where it uses these):", "",
                      *(f"- `{x}`" for x in lines), ""])
