"""Which engine symbols the binding uses: from its binary or from its sources.

The committed surface is restricted to these, so an upstream change to an API
the module never calls does not fail the check (the full report is `abi diff`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from harness.core.errors import AbiError, HostError, SubprocessError, UsageError
from harness.core.inputs import open_input, read_bytes
from harness.engine.confine import recipe_regex

#: Every C identifier: the default ``abi.used_pattern``; the surface's own names filter the result.
#: An engine with prefixed names may narrow it in its descriptor (fewer names to intersect).
SOURCE_IDENT = re.compile(r"\b[A-Za-z_]\w*")
SOURCE_SUFFIXES = frozenset({".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx", ".inl"})
_ELF = b"\x7fELF"
_MACHO = {b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe"}


def undefined_symbols(binary: Path) -> set[str]:
    """Undefined dynamic symbols of a shared module (ELF via ``nm -D``, Mach-O via ``nm -u``)."""
    nm = shutil.which("nm")
    if nm is None:
        msg = "nm (binutils) is needed to read a module's undefined symbols; install binutils or pass its sources"
        raise HostError(msg)
    macho = _magic(binary) in _MACHO
    argv = [nm, "-u", "-j", str(binary)] if macho else [nm, "-D", "--undefined-only", str(binary)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SubprocessError(argv, proc.returncode, proc.stdout + proc.stderr)
    names: set[str] = set()
    for line in proc.stdout.splitlines():
        parts = line.split()
        if not parts:
            continue
        # ELF: "  U llama_decode" (version suffixes like @GLIBC_2.2.5 dropped); Mach-O: "_llama_decode".
        sym = parts[-1].split("@", 1)[0]
        names.add(sym[1:] if macho and sym.startswith("_") else sym)
    return names


def source_identifiers(paths: Iterable[Path], pattern: str | None = None) -> set[str]:
    """Engine-looking identifiers in C/C++ sources (files, or directories walked recursively).

    :param pattern: regex of identifiers to collect (the descriptor's ``abi.used_pattern``);
        default :data:`SOURCE_IDENT`, every identifier.
    """
    ident = recipe_regex(pattern, where="abi.used_pattern") if pattern else SOURCE_IDENT
    names: set[str] = set()
    for p in paths:
        files = sorted(f for f in p.rglob("*") if f.suffix in SOURCE_SUFFIXES) if p.is_dir() else [p]
        for f in files:
            text = read_bytes(f, kind="source", error=UsageError).decode("utf-8", "replace")
            names.update(ident.findall(text))
    return names


def _magic(path: Path) -> bytes:
    with open_input(path, kind="source", error=UsageError, head=True) as f:
        return f.read(4)


def _is_binary(path: Path) -> bool:
    magic = _magic(path)
    return magic == _ELF or magic in _MACHO


def used_from(path: Path, pattern: str | None = None) -> set[str]:
    """The used set from a built module (.so/.dylib) or from a source file or directory.

    Unfiltered: the caller intersects with the surface's names, which drops libc
    symbols and identifiers that only look like engine names.
    """
    if not path.exists():
        msg = f"--used-from {path}: no such file or directory (expected the built binding or its sources)"
        raise UsageError(msg)
    if path.is_file() and _is_binary(path):
        return undefined_symbols(path)
    return source_identifiers([path], pattern)


def recipe_identifiers(root: Path, rel: str, pattern: str | None = None) -> set[str]:
    """:func:`used_from` for a recipe's ``abi.used_from``: ``rel`` (a built module, a source file or a directory
    of them) below ``root`` (the recipe's project), read through the confined accessor. A link, a FIFO or a
    device there is an :class:`AbiError` naming it, never followed; a file over the source limit too (the
    recipe may point anywhere: ``/proc/self/pagemap``, a file of the host)."""
    from harness.core.inputs import limit
    from harness.sandbox.confined import ConfinementError, Tree

    ident = recipe_regex(pattern, where="abi.used_pattern") if pattern else SOURCE_IDENT
    tree = Tree(root, what="the recipe")
    names: set[str] = set()
    try:
        kind = tree.kind(rel)
        entries = [(p, e.kind) for p, e in tree.walk(rel)] if kind == "dir" else [(rel, kind)]
        for path, what in entries:
            if what == "dir" or (kind == "dir" and Path(path).suffix not in SOURCE_SUFFIXES):
                continue
            if what != "file":
                msg = (f"{tree.root / path} (abi.used_from) is {'a symbolic link' if what == 'link' else 'not a regular file'}"
                       ": a recipe's binding sources are read as regular files inside it, never through a link")
                raise AbiError(msg)
            data = tree.read_bytes(path, limit=limit("source"))
            if kind != "dir" and (data[:4] == _ELF or data[:4] in _MACHO):
                return undefined_symbols(tree.root / path)
            names.update(ident.findall(data.decode("utf-8", "replace")))
    except ConfinementError as e:
        raise AbiError(str(e)) from None
    return names
