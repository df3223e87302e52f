"""The static ISA audit of one engine's built artifact: every CPU level library against the
features its loader checks (the work behind ``harness audit isa`` and qualify's isa-audit stage)."""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any

from harness.core.errors import ArtifactError, AuditError
from harness.core.types import EngineSpec


def audit_engine(engine: EngineSpec, variant: str = "cpu", artifact: Path | None = None) -> dict[str, Any]:
    """Audit one engine's artifact; returns the report (``clean``, ``levels``) without raising on findings."""
    from harness.audit.isa import audit_artifact
    from harness.build import pipeline
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant
    from harness.core.host import normalize_arch
    from harness.engine.plugin import get_manager
    from harness.runtime.levels import level_libraries

    t0 = time.perf_counter()
    art = artifact or artifact_dir(engine, get_variant(variant))
    lib = art / "lib"
    if not lib.is_dir():
        msg = (f"no artifact at {art}: run harness build {engine.name} --variant {variant} first "
               "(or pass --artifact DIR)")
        raise ArtifactError(msg)
    pm = get_manager()
    tree = pipeline.patched_tree(engine, pm)
    arch = _artifact_arch(lib) or normalize_arch(platform.machine())
    if arch != "x86_64":
        msg = (f"{art} holds {arch} code: the static ISA audit decodes x86-64 only. A cross-built row's levels "
               f"are run instead, each under the emulated CPU model that has its features: harness emulate "
               f"--variant {variant}")
        raise AuditError(msg)
    levels = pm.hook.harness_artifact_cpu_levels(tree=tree.path, arch=arch)
    if levels is None:
        msg = f"no plugin defines the CPU levels of {engine.name} for {arch}; nothing to audit"
        raise AuditError(msg)
    built = {p.name for p in level_libraries(lib)}
    if not built:
        msg = f"{lib} holds no CPU level libraries: the {variant} artifact has one built-in level; nothing to audit"
        raise AuditError(msg)
    audits = audit_artifact(lib, [lvl for lvl in levels if lvl.library in built or lvl.arch == arch])
    return {"engine": engine.name, "pin": engine.pin, "variant": variant, "artifact": str(art), "arch": arch,
            "clean": all(a.clean for a in audits), "seconds": round(time.perf_counter() - t0, 2),
            "levels": [a.as_dict() for a in audits],
            "definitions": {lvl.name: lvl.source for lvl in levels}}


def _artifact_arch(lib: Path) -> str | None:
    from elftools.elf.elffile import ELFFile

    from harness.runtime.levels import level_libraries

    for p in level_libraries(lib)[:1]:
        with p.open("rb") as f:
            return {"x64": "x86_64", "AArch64": "aarch64"}.get(ELFFile(f).get_machine_arch())
    return None


def findings_lines(levels: list[dict[str, Any]], top: int = 3) -> list[str]:
    """One line per finding: "sapphirerapids: AMX ldtilecfg in f(): rows and column bytes are all zero"."""
    out = []
    for a in levels:
        if not a["present"]:
            out.append(f"{a['level']}: library missing")
        for u in a["outside"]:
            fns = ", ".join(f"{fn} ({n})" for fn, n in list(u["functions"].items())[:top])
            more = len(u["functions"]) - top
            out.append(f"{a['level']}: {u['feature']} outside the checked set, {u['count']} instructions in "
                       f"{fns}" + (f" and {more} more functions" if more > 0 else ""))
        for t in a["tile_configs"]:
            if not t["ok"]:
                out.append(f"{a['level']}: AMX ldtilecfg in {t['function']} ({t['operand']}): {t['detail']}")
    return out
