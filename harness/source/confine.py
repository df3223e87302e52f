"""Patches stay inside the working copy they patch.

A patch of the series is untrusted input (a recipe outside the checkout brings its own): before
``git apply`` writes anything, every path a patch names is checked, in git's format and the
traditional one alike, twice over:

- as written in its headers (``diff --git``, ``---``/``+++``, ``rename``/``copy from``/``to``):
  git strips a leading ``/`` of a traditional patch's ``--- /etc/x`` and would write ``etc/x``,
  so an absolute name is refused as written, before git rewrites it;
- as git will write it (``git apply --numstat -z``, which lists without applying).

Refused: an absolute path, a ``..`` component, a path whose parent is a symlink (in the tree, or
made by this patch or an earlier one), a symlink whose target is absolute or leads out of the
tree (``new file mode 120000``, an edited link, a link renamed or copied to where its relative
target leads out), a type change not written as a deletion and a creation, a binary symlink.
After the series is applied, :func:`check_links_inside` resolves every symlink of the tree: none
may lead outside it.

The header scan is linear: hunk lines are counted from their ``@@`` ranges, so a removed line
that reads ``--- x`` is never taken for a header.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness.core.errors import PatchError

LINK_MODE = "120000"
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_MODE_LINE = re.compile(r"^(new file mode|deleted file mode|old mode|new mode) ([0-7]+)\s*$")
_INDEX = re.compile(r"^index [0-9a-fA-F]+\.\.[0-9a-fA-F]+(?: ([0-7]+))?\s*$")
_NAMED = ("rename from ", "rename to ", "copy from ", "copy to ", "rename old ", "rename new ")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", '"': '"', "\\": "\\"}


def _unquote(s: str) -> str:
    """A name as git writes it: C-quoted (``"a/x\\ty"``, octal bytes) when it has to be, else bare."""
    if not s.startswith('"'):
        return s
    out = bytearray()
    i = 1
    while i < len(s) and s[i] != '"':
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt in "0123" and re.match(r"[0-7]{3}", s[i + 1:i + 4]):
                out.append(int(s[i + 1:i + 4], 8))
                i += 4
                continue
            out += _ESCAPES.get(nxt, nxt).encode("utf-8", "surrogateescape")
            i += 2
            continue
        out += c.encode("utf-8", "surrogateescape")
        i += 1
    return out.decode("utf-8", "surrogateescape")


def _header_name(rest: str) -> str:
    """The name of a ``---``/``+++`` line: quoted, or up to a tab (a traditional diff's date follows one)."""
    return _unquote(rest) if rest.startswith('"') else rest.split("\t", 1)[0].rstrip("\r")


def _strip_one(name: str) -> str:
    """The name git writes for a header name (``-p1``: the first component goes)."""
    return name.split("/", 1)[1] if "/" in name else name


@dataclass
class _Section:
    """One file of a git-format patch, as far as links are concerned."""

    line: int
    new_name: str = ""
    modes: dict[str, str] = field(default_factory=dict)
    index_mode: str = ""
    renamed_from: str = ""
    renamed_to: str = ""
    copied: bool = False
    added: list[str] = field(default_factory=list)
    hunks: int = 0
    binary: bool = False

    @property
    def link(self) -> bool:
        return LINK_MODE in (self.modes.get("new file mode"), self.modes.get("new mode"), self.index_mode)


@dataclass
class Scan:
    """What the headers of a patch say: ``(line, name as written)`` of every path, and the
    git-format sections."""

    names: list[tuple[int, str]] = field(default_factory=list)
    sections: list[_Section] = field(default_factory=list)


def scan(text: str) -> Scan:
    """The names and sections of a patch, in one pass over its lines."""
    out = Scan()
    old_left = new_left = 0
    section: _Section | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if old_left > 0 or new_left > 0:
            c = line[:1]
            if c == "\\":
                continue
            if c in (" ", ""):
                old_left, new_left = old_left - 1, new_left - 1
                continue
            if c == "-" and old_left > 0:
                old_left -= 1
                continue
            if c == "+" and new_left > 0:
                new_left -= 1
                if section is not None:
                    section.added.append(line[1:])
                continue
            old_left = new_left = 0  # not a hunk line: git calls the patch corrupt; read it as a header
        m = _HUNK.match(line)
        if m:
            old_left = int(m.group(1)) if m.group(1) is not None else 1
            new_left = int(m.group(2)) if m.group(2) is not None else 1
            if section is not None:
                section.hunks += 1
            continue
        if line.startswith("diff --git "):
            section = _Section(line=n)
            out.sections.append(section)
            rest = line[len("diff --git "):]
            if rest.startswith('"'):
                out.names += [(n, _unquote(t)) for t in re.findall(r'"(?:[^"\\]|\\.)*"', rest)]
            else:
                out.names += [(n, rest)] + [(n, t) for t in rest.split(" ")]
        elif line.startswith(("--- ", "+++ ")):
            name = _header_name(line[4:])
            out.names.append((n, name))
            if line.startswith("+++ ") and section is not None and name != "/dev/null":
                section.new_name = _strip_one(name)
        elif line.startswith(_NAMED):
            name = _unquote(line.split(" ", 2)[2].rstrip("\r"))
            out.names.append((n, name))
            if section is not None:
                if line.startswith(("rename from ", "copy from ", "rename old ")):
                    section.renamed_from = name
                    section.copied = line.startswith("copy")
                else:
                    section.renamed_to = name
        elif section is not None and (mm := _MODE_LINE.match(line)):
            section.modes[mm.group(1)] = mm.group(2)
        elif section is not None and (mi := _INDEX.match(line)):
            section.index_mode = mi.group(1) or ""
        elif section is not None and line.startswith("GIT binary patch"):
            section.binary = True
    return out


def _bad_name(name: str) -> str:
    """Why a name as written is refused, or ``""``."""
    if name == "/dev/null":
        return ""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", name):
        return "an absolute path"
    if ".." in re.split(r"[\\/]", name):
        return "a '..' component"
    if "\0" in name:
        return "a NUL byte"
    return ""


def git_paths(tree: Path, data: bytes) -> list[str]:
    """The paths ``git apply`` would write for the patch ``data``, listed by git without applying."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    r = subprocess.run(["git", "apply", "--numstat", "-z", "-"], cwd=tree, input=data, capture_output=True,
                       check=False, env=env)
    if r.returncode != 0:
        return []  # not a patch git can read: `git apply` itself says why when the patch is applied
    paths = []
    for record in r.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if record:
            paths.append(record.split("\t", 2)[-1])
    return paths


def _through_link(tree: Path, rel: str, links: dict[str, str]) -> str:
    """The first parent of ``rel`` that is a symlink (in ``tree``, or in ``links``: made by the
    series so far), or ``""``."""
    parts = PurePosixPath(rel).parts
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i])
        if prefix in links or (tree / prefix).is_symlink():
            return prefix
    return ""


def leads_out(rel: str, target: str) -> str:
    """Why the symlink ``rel -> target`` leads out of its tree, judged by its text, or ``""``."""
    if not target:
        return "an empty target"
    if target.startswith("/"):
        return f"an absolute target ({target[:200]})"
    joined = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        return f"a target outside the tree ({target[:200]}, from {rel})"
    return ""


def _refuse(patch: Path, line: int | None, what: str) -> PatchError:
    where = f" (line {line})" if line else ""
    msg = (f"patch {patch}{where} {what}; refusing it before anything is applied. A patch of the "
           "series changes files inside the source tree only: relative paths with no '..', no symlink "
           "on the way, symlinks that point inside the tree. Fix or remove the patch")
    return PatchError(msg)


def check_patch(tree: Path, patch: Path, data: bytes, links: dict[str, str]) -> list[str]:
    """Refuse the patch ``data`` (of the file ``patch``) unless every path it names stays in
    ``tree`` (see the module doc); ``links`` (path -> target: symlinks earlier patches of the
    series make) is checked against and extended with this patch's. Returns the paths of
    ``tree`` the patch reads or writes (what a scratch copy needs)."""
    text = data.decode("utf-8", "surrogateescape")
    found = scan(text)
    for line, name in found.names:
        why = _bad_name(name)
        if why:
            raise _refuse(patch, line, f"names {name[:200]!r}: {why}")
    made: dict[str, str] = {}
    for s in found.sections:
        kinds = {s.modes.get("old mode"), s.modes.get("new mode")} - {None}
        if LINK_MODE in kinds and len(kinds) > 1:
            raise _refuse(patch, s.line, "changes a file's type to or from a symlink in place (git writes that "
                                         "as a deletion and a creation)")
        if s.link and s.binary:
            raise _refuse(patch, s.line, "writes a symlink as a binary patch, whose target cannot be checked")
        link_path, target = _section_link(tree, s, links)
        if link_path:
            why = leads_out(link_path, target)
            if why:
                raise _refuse(patch, s.line, f"makes the symlink {link_path} with {why}")
            made[link_path] = target
    written = git_paths(tree, data)
    for rel in [*written, *(_strip_one(n) for _, n in found.names if n != "/dev/null")]:
        why = _bad_name(rel)
        if why:
            raise _refuse(patch, None, f"makes git write {rel[:200]!r}: {why}")
    for rel in [*written, *(s.renamed_from for s in found.sections if s.renamed_from),
                *(s.renamed_to for s in found.sections if s.renamed_to)]:
        via = _through_link(tree, rel, {**links, **made})
        if via:
            raise _refuse(patch, None, f"writes {rel[:200]!r} through the symlink {via}")
    links.update(made)
    return sorted({*written, *(s.renamed_from for s in found.sections if s.renamed_from)})


def _section_link(tree: Path, s: _Section, links: dict[str, str]) -> tuple[str, str]:
    """``(path, target)`` of the symlink a section makes, or ``("", "")`` when it makes none."""
    if s.link:
        path = s.new_name or s.renamed_to
        if not path or not s.hunks:
            return path or "(unnamed)", ""  # a link whose target the patch does not carry: refused
        return path, "\n".join(s.added)
    if s.renamed_from and s.renamed_to:  # a link moved or copied keeps its text: where does it lead now?
        old = s.renamed_from
        target = links.get(old)
        if target is None and (tree / old).is_symlink():
            target = os.readlink(tree / old)
        if target is not None:
            return s.renamed_to, target
    return "", ""


def check_links_inside(tree: Path) -> None:
    """After the series: every symlink of ``tree`` resolves inside it (through other links too)."""
    root = os.path.realpath(tree)
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in (*dirnames, *filenames):
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                continue
            resolved = os.path.realpath(p)
            if resolved != root and not resolved.startswith(root + os.sep):
                rel = os.path.relpath(p, tree)
                msg = (f"after the patch series, the symlink {rel} in {tree} leads outside the tree (to {resolved}); "
                       "the patched tree must hold only its own files: fix the patch that makes or moves it")
                raise PatchError(msg)
