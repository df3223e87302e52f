"""Variant platform ``cpu``: the portable run-time-dispatched build and ``cpu-native``.

Rows say what they want (``intent: {cpu_levels: runtime | native}``); the engine's descriptor
says how it is spelled. On macOS a CPU row also intends ``gpu: none`` (engines that enable Metal
by default map it to switching Metal off).
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.core.errors import AuditError
from harness.core.types import Buildability, CpuLevel, EngineSpec, HostInfo, Variant
from harness.engine.plugin import hookimpl
from harness_plugins import cross_gnu


@hookimpl
def harness_variant_requirements(variant: Variant, host: HostInfo) -> Buildability | None:
    from harness.build.matrix import generic_reasons
    if variant.platform != "cpu":
        return None
    reasons = generic_reasons(variant, host)
    cross_reasons, notes = cross_gnu.reasons(variant)
    reasons += cross_reasons
    if variant.intent.get("cpu_levels") == "native":
        notes.append(f"tuned for this host ({host.microarch}); not portable")
    if not host.tool("ccache").found:
        notes.append("ccache not found: cold builds every time (bash scripts/install-system-deps.sh)")
    return Buildability(variant=variant.name, buildable=not reasons, runnable=not reasons and cross_gnu.runnable(variant),
                        reasons=tuple(reasons), notes=tuple(notes))


@hookimpl
def harness_variant_configure(engine: EngineSpec, variant: Variant, host: HostInfo) -> dict[str, str] | None:
    from harness.build.matrix import intent_defines
    if variant.platform != "cpu":
        return None
    # Metal is on by default on macOS; a CPU row must not pick it up silently.
    return (intent_defines(engine, "gpu", "none") or {}) if host.os == "darwin" else {}


# ---------------------------------------------------------------- CPU levels (ggml's CPU backend)
# ggml defines each level of a GGML_CPU_ALL_VARIANTS build in ggml/src/CMakeLists.txt
# (`ggml_add_cpu_backend_variant(<name> <OPTION>...)`: option X compiles with GGML_X) and
# the loader's check in ggml-cpu/arch/<arch>/cpu-feats.cpp (x86: `#ifdef GGML_X ... is.Y()`;
# ARM: `#ifdef GGML_USE_X ... af.has_y`, the Linux hwcaps ggml-feats.h reads).

_VARIANT_RE = re.compile(r"ggml_add_cpu_backend_variant\(\s*([\w.]+)([^)]*)\)")
_IFDEF_RE = re.compile(r"#ifdef\s+GGML_(?:USE_)?(\w+)(.*?)#endif", re.S)
_CHECK_RE = {"x86": re.compile(r"\bis\.(\w+)\(\)"), "arm": re.compile(r"\baf\.has_(\w+)\b")}
#: our arch name -> (GGML_SYSTEM_ARCH in ggml's CMake, the ggml-cpu/arch/ folder)
_ARCH_BLOCK = {"x86_64": ("x86", "x86"), "aarch64": ("ARM", "arm")}
#: The ARM level set differs per OS (Linux, Android, Apple): the sub-block for Linux.
_OS_BLOCK = {"ARM": "Linux"}
#: cpuid_x86 method names in cpu-feats.cpp whose iced-x86 CpuidFeature name differs.
_METHOD_TO_FEATURE = {"SSE42": "SSE4_2", "SSE41": "SSE4_1", "SSE3": "SSE3", "AVX512_FP16": "AVX512_FP16"}


def _ggml_root(tree: Path) -> Path | None:
    for cand in (tree / "ggml", tree):
        if (cand / "src" / "ggml-cpu").is_dir() and (cand / "src" / "CMakeLists.txt").is_file():
            return cand
    return None


def _arch_block(text: str, system_arch: str) -> tuple[str, int]:
    start = text.find("if (GGML_CPU_ALL_VARIANTS)")
    m = re.compile(rf'(?:if|elseif)\s*\(\s*GGML_SYSTEM_ARCH STREQUAL "{system_arch}"\s*\)').search(text, max(start, 0))
    if start < 0 or m is None:
        return "", 0
    nxt = re.compile(r"\n    (?:elseif|else|endif)\b").search(text, m.end())
    body, first = text[m.end():nxt.start() if nxt else len(text)], text.count("\n", 0, m.end()) + 1
    os_name = _OS_BLOCK.get(system_arch)
    if os_name:
        sub = re.compile(rf'\n        if \(CMAKE_SYSTEM_NAME MATCHES "{os_name}"\)').search(body)
        if sub is None:
            return "", 0
        end = re.compile(r"\n        (?:elseif|else|endif)\b").search(body, sub.end())
        first += body.count("\n", 0, sub.end())
        body = body[sub.end():end.start() if end else len(body)]
    return body, first


@hookimpl
def harness_artifact_cpu_levels(tree: Path, arch: str) -> list[CpuLevel] | None:
    ggml = _ggml_root(tree)
    if ggml is None or arch not in _ARCH_BLOCK:
        return None
    system_arch, folder = _ARCH_BLOCK[arch]
    cmake = ggml / "src" / "CMakeLists.txt"
    feats = ggml / "src" / "ggml-cpu" / "arch" / folder / "cpu-feats.cpp"
    if not feats.is_file():
        msg = f"{feats} is missing: cannot tell what the loader checks for each {arch} CPU level"
        raise AuditError(msg)
    body, first_line = _arch_block(cmake.read_text(), system_arch)
    text = feats.read_text()
    score = text[text.find("_score("):] if "_score(" in text else text
    checks: dict[str, list[str]] = {}
    for m in _IFDEF_RE.finditer(score):
        checks.setdefault(m.group(1), []).extend(_CHECK_RE[folder].findall(m.group(2)))
    levels = []
    for m in _VARIANT_RE.finditer(body):
        name, options = m.group(1), tuple(m.group(2).split())
        checked: list[str] = []
        unchecked: list[str] = []
        for opt in options:
            methods = checks.get(opt)
            if not methods:
                unchecked.append(opt)
                continue
            checked += [_METHOD_TO_FEATURE.get(x, x) for x in methods]
        line = first_line + body.count("\n", 0, m.start())
        levels.append(CpuLevel(name=name, library=f"libggml-cpu-{name}.so", arch=arch, options=options,
                               checked=tuple(dict.fromkeys(checked)), unchecked_options=tuple(unchecked),
                               source=f"{cmake.relative_to(tree)}:{line}"))
    if not levels:
        msg = f"no ggml_add_cpu_backend_variant(...) for {system_arch} in {cmake}: the level definitions moved"
        raise AuditError(msg)
    return levels
