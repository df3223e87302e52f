"""What the compiler said about the binding's translation units, read (:mod:`harness.abi.binding` runs it).

Each error keeps where it is, the upstream declarations its notes point to, the ``#include`` chain that led
from the binding unit into an upstream header, and every unit that hit it: one header's error reached from
seven units is one problem naming seven units, not seven problems. A header that is missing from the stand-in
artifact but present in the pinned tree is the descriptor's gap, not the binding's: :func:`locate_missing`
finds it in the tree and names the ``artifacts.include`` entry that collects it.

Both compilers' words are read: GCC's (``x.h: No such file or directory``; ``In file included from a.h:2,``
then ``                 from unit.cpp:1:``, innermost first) and Clang's (``'x.h' file not found``; one
``In file included from ...:`` line per level, outermost first).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.core import paths
from harness.sandbox.confined import ConfinementError, Tree

#: A compiler diagnostic line, as GCC and Clang both print it.
_DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<kind>fatal error|error|note|warning): "
                   r"(?P<text>.*)$")
#: One level of the include stack printed before a diagnostic (GCC: ``In file included from a.h:2,`` then
#: ``                 from b.cpp:1:``; Clang: ``In file included from b.cpp:1:`` per level).
_CHAIN = re.compile(r"^(?P<lead>In file included from|\s+from) (?P<file>.+?):(?P<line>\d+)(?::\d+)?[,:]$")
#: A header the compiler could not find (Clang, then GCC).
_MISSING = re.compile(r"^'(?P<clang>[^']+)' file not found|^(?P<gcc>[^:']+): No such file or directory$")
#: The class or struct a diagnostic names (GCC: 'class common_peg_arena', curly-quoted in a UTF-8 locale;
#: Clang: 'common_peg_arena'). The compilers run with LC_ALL=C, so plain quotes are what they print here.
_NAMED_TYPE = re.compile(r"(?:class|struct)\s+[\u2018'`\"]?(?P<name>[A-Za-z_][\w:]*)")
_QUOTED = re.compile(r"[\u2018'`\"](?P<name>[A-Za-z_][\w:]*)[\u2019'`\"]")
_QUOTED_INCLUDE = re.compile(r'^\s*#\s*(?:include|include_next|import)\s*"')


@dataclass(frozen=True, kw_only=True)
class CompileProblem:
    """One error of the binding's translation units (the same error of several units is one problem)."""

    file: str
    """The binding file, relative to the checkout (or absolute outside it); a path in the pinned tree for an
    upstream header."""
    line: int
    column: int
    message: str
    upstream: tuple[str, ...] = ()
    """The upstream declarations it met: ``common/chat.h:366: <the compiler's note>``, paths in the pinned tree."""
    units: tuple[str, ...] = ()
    """The binding's translation units that hit it."""
    included_from: tuple[str, ...] = ()
    """How the first of ``units`` reached ``file``: ``path:line`` of each ``#include``, the unit first."""
    missing_header: str = ""
    """The header an ``#include`` named that the compiler did not find (the unit stopped there)."""
    artifact_include: str = ""
    """The ``artifacts.include`` entry that collects ``missing_header`` from the pinned tree, which has it: the
    descriptor must change, not the binding."""
    hint: str = ""
    """What to do about ``missing_header``."""
    retried_with: tuple[str, ...] = ()
    """Found only once these directories of the pinned tree were added to the unit's include path (it had
    stopped at a header missing from the artifact)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CompileProblem:
        tuples = ("upstream", "units", "included_from", "retried_with")
        fields: dict[str, Any] = {k: tuple(v) if k in tuples else v for k, v in d.items()}
        return cls(**fields)

    def __str__(self) -> str:
        lines = [f"{self.file}:{self.line}:{self.column}: {self.message}"]
        if len(self.units) > 1 or (self.units and self.units[0] != self.file):
            lines.append(f"    {units_text(self.units)}")
        if self.included_from:
            lines.append(f"    included from: {' -> '.join(self.included_from)}")
        lines += [f"    upstream: {u}" for u in self.upstream]
        if self.hint:
            lines.append(f"    {self.hint}")
        if self.retried_with:
            dirs = ", ".join(f"{d}/" for d in self.retried_with)
            lines.append(f"    found once the pinned tree's {dirs} was added to the include path (the unit had stopped "
                         "at a header missing from the artifact)")
        return "\n".join(lines)


def units_text(units: tuple[str, ...]) -> str:
    """``in 3 units (engines/x/binding/src/): a.cpp, b.cpp, c.cpp``."""
    if len(units) == 1:
        return f"in 1 unit: {units[0]}"
    try:
        common = os.path.commonpath(units)
    except ValueError:  # absolute and relative names mixed
        common = ""
    if common and common not in units:
        return f"in {len(units)} units ({common}/): {', '.join(os.path.relpath(u, common) for u in units)}"
    return f"in {len(units)} units: {', '.join(units)}"


def shown_path(path: str) -> str:
    """A path as messages show it: relative to the checkout when inside it."""
    root = str(paths.project_root())
    return os.path.relpath(path, root) if path.startswith(root + os.sep) else path


def _header_text(shown: str, *, rel: str, include: Path, tree: Path | None) -> str | None:
    """A collected header's text, read from the pinned tree (``shown``: its path there) when known: the stand-in's
    entries are links into it, which the confined accessor does not follow; else from the stand-in (``rel``)."""
    try:
        if tree is not None:
            inside = Tree(tree, what="the pinned tree")
            return inside.read_text(inside.resolve(shown))
        return Tree(include, what="the stand-in artifact's headers").read_text(rel)  # the recipe's CMake could write it
    except (OSError, ConfinementError):
        return None


def _declaration_of(name: str, include: Path, names: Mapping[str, str], tree: Path | None) -> str | None:
    """Where the pinned headers define class/struct ``name`` (``common/peg-parser.h:333: class common_peg_arena``)."""
    short = name.rsplit("::", 1)[-1]
    pattern = re.compile(rf"^\s*(?:class|struct)\s+(?:\w+\s+)*{re.escape(short)}\b(?![^;{{]*;)")
    for rel, shown in sorted(names.items()):
        text = _header_text(shown, rel=rel, include=include, tree=tree)
        for n, line in enumerate((text or "").splitlines(), 1):
            if pattern.match(line):
                return f"{shown}:{n}: {line.strip().rstrip('{').strip()}"
    return None


def parse_diagnostics(output: str, *, include: Path, names: Mapping[str, str], unit: str,
                      tree: Path | None = None) -> list[CompileProblem]:
    """The errors of one compiler run, each with the notes that point into the pinned tree and the include chain
    that led to it.

    ``names``: path below the stand-in ``include/`` -> its path in the pinned tree (what is shown); ``tree``: the
    pinned tree, whose files a retried unit reaches directly (shown relative to it)."""
    inc = str(include) + os.sep
    tops = [str(t) + os.sep for t in dict.fromkeys([tree, tree.resolve()])] if tree is not None else []

    def where(file: str) -> tuple[str, str, bool]:
        absolute = os.path.normpath(file if os.path.isabs(file) else os.path.join(os.path.dirname(unit), file))
        if absolute.startswith(inc):
            rel = absolute[len(inc):]
            return absolute, names.get(rel, rel), True
        for top in tops:
            if absolute.startswith(top):
                return absolute, absolute[len(top):], True
        return absolute, shown_path(absolute), False

    problems: list[dict[str, Any]] = []
    chains: dict[str, tuple[str, ...]] = {}  # GCC and Clang print a file's include stack once, when it changes
    pending: list[str] = []
    innermost_first = in_block = False
    for raw in output.splitlines():
        c = _CHAIN.match(raw.rstrip())
        if c:
            if not in_block:
                pending, innermost_first = [], False
            innermost_first |= c.group("lead") != "In file included from"  # GCC's continuation lines
            pending.append(f"{where(c.group('file'))[1]}:{c.group('line')}")
            in_block = True
            continue
        in_block = False
        m = _DIAG.match(raw.strip())
        if not m:
            continue
        absolute, shown, upstream = where(m.group("file"))
        if pending:
            chains[absolute] = tuple(reversed(pending) if innermost_first else pending)
            pending = []
        kind, text = m.group("kind"), m.group("text")
        if kind in ("error", "fatal error"):
            missing = _MISSING.match(text)
            problems.append({"file": shown, "line": int(m.group("line")), "column": int(m.group("col")),
                             "message": text, "upstream": [], "included_from": chains.get(absolute, ()),
                             "missing_header": (missing.group("clang") or missing.group("gcc")) if missing else ""})
        elif kind == "note" and problems and upstream:
            problems[-1]["upstream"].append(f"{shown}:{m.group('line')}: {text}")
    out = []
    for p in problems:
        if not p["upstream"] and not p["missing_header"]:
            for m2 in (_NAMED_TYPE.search(p["message"]), *_QUOTED.finditer(p["message"])):
                found = _declaration_of(m2.group("name"), include, names, tree) if m2 else None
                if found:
                    p["upstream"].append(found)
                    break
        out.append(CompileProblem(**{**p, "upstream": tuple(dict.fromkeys(p["upstream"]))}))
    return out


def merge(per_unit: Iterable[Iterable[CompileProblem]]) -> tuple[CompileProblem, ...]:
    """One problem per distinct error (same file:line:column and message), naming every unit that hit it, in
    the order first seen."""
    merged: dict[tuple[str, int, int, str], CompileProblem] = {}
    for problems in per_unit:
        for p in problems:
            key = (p.file, p.line, p.column, p.message)
            first = merged.get(key)
            merged[key] = p if first is None else replace(first, units=tuple(dict.fromkeys(first.units + p.units)))
    return tuple(merged.values())


class TreeFiles:
    """The pinned tree's files by base name, walked once (on first use, from any thread): where a header the
    stand-in artifact lacks really is. Links to directories are not entered; ``.git`` is skipped."""

    def __init__(self, tree: Path) -> None:
        self.root = Path(os.path.realpath(tree))
        self._by_name: dict[str, list[str]] | None = None
        self._lock = threading.Lock()

    def _index(self) -> dict[str, list[str]]:
        with self._lock:
            if self._by_name is None:
                by_name: dict[str, list[str]] = {}
                for here, dirs, files in os.walk(self.root):
                    dirs[:] = sorted(d for d in dirs if d != ".git")
                    rel = os.path.relpath(here, self.root)
                    for f in files:
                        by_name.setdefault(f, []).append(f if rel == "." else f"{rel}/{f}".replace(os.sep, "/"))
                self._by_name = by_name
            return self._by_name

    def has(self, rel: str) -> bool:
        """Whether ``rel`` is a regular file of the tree (a link in it followed only while it stays inside)."""
        if rel.startswith("../") or os.path.isabs(rel) or rel not in self._index().get(os.path.basename(rel), ()):
            return False
        real = os.path.realpath(self.root / rel)
        return real.startswith(str(self.root) + os.sep) and os.path.isfile(real)

    def ending_with(self, name: str) -> list[str]:
        """The tree's files whose path is ``name`` or ends with ``/name``, shortest path first."""
        found = [p for p in self._index().get(os.path.basename(name), ()) if p == name or p.endswith("/" + name)]
        return sorted((p for p in found if self.has(p)), key=lambda p: (p.count("/"), p))


@dataclass(frozen=True)
class Located:
    """Where a header missing from the stand-in artifact is in the pinned tree, and what collects it."""

    path: str
    """Its path in the pinned tree."""
    entry: str
    """The ``artifacts.include`` entry (``DIR:GLOB``) that puts it where the ``#include`` looks."""
    include_dir: Path
    """The directory of the pinned tree that makes the ``#include`` resolve, for a retry of the unit."""


def _quoted_include(text: str | None, line: int) -> bool:
    """Whether line ``line`` of ``text`` is an ``#include "..."`` (looked up beside its header first)."""
    lines = (text or "").splitlines()
    return 0 < line <= len(lines) and bool(_QUOTED_INCLUDE.match(lines[line - 1]))


def locate_missing(p: CompileProblem, *, include: Path, names: Mapping[str, str], files: TreeFiles) -> Located | None:
    """Where the header ``p`` did not find is in the pinned tree, with the ``artifacts.include`` entry that puts it
    where the ``#include`` looks; None when the tree has no such file (then it is a real error)."""
    name = os.path.normpath(p.missing_header).replace(os.sep, "/")
    if not p.missing_header or os.path.isabs(name) or name.startswith("../") or name == ".." or \
            any(ch in name for ch in "*?[:"):
        return None
    rel_of = {shown: rel for rel, shown in names.items()}
    rel = rel_of.get(p.file)
    if rel is not None and p.file.endswith(rel) and \
            _quoted_include(_header_text(p.file, rel=rel, include=include, tree=files.root), p.line):
        # ``#include "x.h"`` in a collected header: beside that header, where the tree has it too
        beside = os.path.normpath(os.path.join(os.path.dirname(p.file), name))
        there = os.path.normpath(os.path.join(os.path.dirname(rel), name))
        if files.has(beside) and there not in names:
            base = p.file[:-len(rel)].rstrip("/") or "."
            return Located(beside, f"{base}:{there}", files.root / os.path.dirname(p.file))
    if name in names:  # collected where the entry would put it: the binding's include path misses it, not the artifact
        return None
    for path in files.ending_with(name):
        base = path[:-len(name)].rstrip("/")
        return Located(path, f"{base or '.'}:{name}", files.root / base)
    return None


def descriptor_hint(found: Located, *, descriptor: str) -> str:
    """What to do about a header the pinned tree has and the artifact's ``artifacts.include`` does not collect."""
    base, _, pattern = found.entry.partition(":")
    folder, ext = os.path.dirname(pattern), os.path.splitext(pattern)[1]
    whole = f' (or "{base}:{folder}/*{ext}" for its whole directory)' if folder and ext else ""
    return (f"not in the artifact: the pinned tree has {found.path}, but `artifacts.include` does not collect it. "
            f'This is not the binding\'s error: add it to `artifacts.include` in {descriptor}: "{found.entry}"{whole}')


def nowhere_hint(name: str) -> str:
    """What to say about a header that is neither in the artifact nor anywhere in the pinned tree."""
    return (f"{name} is nowhere in the pinned tree: drop or fix the #include, or install what provides it. The unit "
            "stopped here: its other errors are unknown until this #include resolves")
