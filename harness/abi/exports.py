"""A built artifact against the committed surface: what its libraries export, what it ships as headers.

The ABI check (:mod:`harness.abi.check`) reads the pinned headers for every target triple of the
surface, the cross targets included. For an artifact built for one of them (a cross-built row)
this module closes the loop on the binary side: every function of the surface the binding uses
must be exported (defined, global or weak, in ``.dynsym``) by one of the artifact's libraries, and
the headers the artifact ships must be the ones the check read. ELF is read with pyelftools, so
an aarch64 library is read on an x86_64 host without the cross binutils.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection


def exported_symbols(lib: Path) -> set[str]:
    """Defined global/weak functions and objects in a shared library's ``.dynsym``."""
    out: set[str] = set()
    try:
        with lib.open("rb") as f:
            sec = ELFFile(f).get_section_by_name(".dynsym")
            if not isinstance(sec, SymbolTableSection):
                return out
            for s in sec.iter_symbols():
                if s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK") \
                        and s["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT", "STT_GNU_IFUNC"):
                    out.add(s.name)
    except (ELFError, OSError):
        return set()
    return out


def elf_machine(lib: Path) -> str | None:
    try:
        with lib.open("rb") as f:
            return str(ELFFile(f).get_machine_arch())
    except (ELFError, OSError):
        return None


@dataclass(frozen=True, kw_only=True)
class ExportCheck:
    machine: str | None
    """pyelftools' name of the libraries' machine (``AArch64``, ``x64``)."""
    used_functions: int
    missing: list[str] = field(default_factory=list)
    """used functions no library of the artifact exports"""
    exported_by: dict[str, int] = field(default_factory=dict)
    """library -> how many of the used functions it exports"""
    headers: dict[str, str] = field(default_factory=dict)
    """shipped header -> "same" | "differs" | "not in the tree\""""

    @property
    def ok(self) -> bool:
        return not self.missing and all(v == "same" for v in self.headers.values())

    def as_dict(self) -> dict[str, Any]:
        return {"machine": self.machine, "used_functions": self.used_functions, "missing": list(self.missing),
                "exported_by": self.exported_by, "headers": self.headers, "ok": self.ok}


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def check_artifact(artifact: Path, committed: dict[str, Any], *, tree: Path | None = None,
                   header_dirs: list[str] | None = None) -> ExportCheck:
    """The used functions of ``committed`` against ``artifact``'s libraries, and (with ``tree``)
    the artifact's ``include/*.h`` against the same files under ``header_dirs`` of the tree."""
    used = set(committed.get("used") or [])
    functions = sorted(used & set(committed.get("functions") or {}))
    libs = sorted(p for p in (artifact / "lib").glob("lib*.so*") if p.is_file() and not p.is_symlink())
    exports = {p.name: exported_symbols(p) for p in libs}
    missing = [fn for fn in functions if not any(fn in e for e in exports.values())]
    by = {name: len(set(functions) & e) for name, e in exports.items() if set(functions) & e}
    headers: dict[str, str] = {}
    if tree is not None:
        for h in sorted((artifact / "include").glob("*.h")):
            src = next((tree / d / h.name for d in header_dirs or ["include"] if (tree / d / h.name).is_file()), None)
            headers[h.name] = "not in the tree" if src is None else ("same" if _sha(src) == _sha(h) else "differs")
    return ExportCheck(machine=elf_machine(libs[0]) if libs else None, used_functions=len(functions),
                       missing=missing, exported_by=by, headers=headers)
