"""Cross-built rows (``target: <GNU triple>`` in the matrix): Debian's cross toolchain, a generated
CMake toolchain file, and qemu-user to run the result on the build host.

Debian ships one cross toolchain per triple (``g++-aarch64-linux-gnu`` installs
``aarch64-linux-gnu-gcc``/``-g++`` and the target's libc under ``/usr/aarch64-linux-gnu``, which is
also the sysroot qemu-user reads the target's loader and libraries from: ``-L``). A row may name
another compiler (``extra.cross_compiler: {cc, cxx}``, a clang): it is driven with ``--target`` and
uses the same cross libc, libstdc++ and binutils. The toolchain
file is content-addressed under ``$HARNESS_CACHE/toolchains/``: its path is one of the build's
defines, so a changed toolchain file means a new build dir. ccache works unchanged: the compiler
launcher wraps the cross compiler like any other.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.types import EngineSpec, HostInfo, Variant
from harness.engine.plugin import hookimpl

INSTALL_HINT = {"aarch64-linux-gnu": "bash scripts/install-system-deps.sh --cross-aarch64"}
#: CMake's CMAKE_SYSTEM_PROCESSOR for the first field of a triple (what ggml's arch detection reads).
_PROCESSOR = {"aarch64": "aarch64", "arm": "arm", "riscv64": "riscv64", "powerpc64le": "ppc64le", "s390x": "s390x"}


@dataclass(frozen=True, kw_only=True)
class CrossToolchain:
    triple: str
    cc: str | None
    cxx: str | None
    sysroot: Path
    qemu: str | None
    compiler_version: str | None
    cxx_name: str = ""
    """The compiler asked for (``aarch64-linux-gnu-g++``, ``clang++-19``), found or not."""
    why_compiler: str = ""

    @property
    def is_clang(self) -> bool:
        return "clang" in Path(self.cxx_name).name

    @property
    def compiler_args(self) -> list[str]:
        """What the compiler needs to target the triple (a clang: ``--target``; a GNU cross compiler: nothing)."""
        return [f"--target={self.triple}"] if self.is_clang else []

    @property
    def processor(self) -> str:
        first = self.triple.split("-", 1)[0]
        return _PROCESSOR.get(first, first)

    def missing(self) -> list[str]:
        """What is missing to build (compilers, the target's libc in the sysroot)."""
        hint = INSTALL_HINT.get(self.triple, f"install the {self.triple} cross toolchain")
        out = []
        if self.cxx is None or self.cc is None:
            why = f" ({self.why_compiler})" if self.why_compiler else ""
            out.append(f"{self.cxx_name} not found (the {self.triple} cross compiler{why}): {hint}")
        if self.is_clang and shutil.which(f"{self.triple}-g++") is None:
            out.append(f"{self.triple}-g++ not found ({self.cxx_name} links with its libstdc++ and binutils): {hint}")
        if not (self.sysroot / "lib" / "libc.so.6").is_file() or not (self.sysroot / "include" / "stdio.h").is_file():
            out.append(f"no {self.triple} libc in {self.sysroot} (Debian: libc6-dev-"
                       f"{_debian_arch(self.triple)}-cross): {hint}")
        return out

    def emulator_missing(self) -> str | None:
        if self.qemu is None:
            hint = INSTALL_HINT.get(self.triple, "install qemu-user-static")
            return f"{_qemu_name(self.triple)} not found: builds, but cannot run here ({hint})"
        return None

    def run_argv(self, cpu_model: str | None = None) -> list[str]:
        """The qemu-user prefix that runs a target program here (``-L`` the cross sysroot)."""
        if self.qemu is None:
            msg = f"no {_qemu_name(self.triple)} on this host: {INSTALL_HINT.get(self.triple, 'install qemu-user')}"
            from harness.core.errors import HostError

            raise HostError(msg)
        return [self.qemu, *(["-cpu", cpu_model] if cpu_model else []), "-L", str(self.sysroot)]


def _debian_arch(triple: str) -> str:
    return {"aarch64": "arm64", "x86_64": "amd64", "arm": "armhf"}.get(triple.split("-", 1)[0], triple.split("-", 1)[0])


def _qemu_name(triple: str) -> str:
    return f"qemu-{triple.split('-', 1)[0]}-static"


def toolchain(triple: str, compiler: dict[str, str] | None = None) -> CrossToolchain:
    """What this host has for ``triple``: compilers (Debian's ``<triple>-gcc/g++``, or ``compiler``'s
    ``cc``/``cxx``), sysroot, qemu-user."""
    cc_name = (compiler or {}).get("cc") or f"{triple}-gcc"
    cxx_name = (compiler or {}).get("cxx") or f"{triple}-g++"
    cc, cxx = shutil.which(cc_name), shutil.which(cxx_name)
    version = None
    if cxx:
        r = subprocess.run([cxx, "-dumpversion"], capture_output=True, text=True, check=False)
        version = r.stdout.strip() or None
    qemu = shutil.which(_qemu_name(triple)) or shutil.which(_qemu_name(triple).removesuffix("-static"))
    return CrossToolchain(triple=triple, cc=cc, cxx=cxx, sysroot=Path("/usr") / triple, qemu=qemu,
                          compiler_version=version, cxx_name=cxx_name, why_compiler=(compiler or {}).get("why", ""))


def row_toolchain(variant: Variant) -> CrossToolchain:
    """The toolchain a cross-built row asks for (its ``extra.cross_compiler``, else Debian's)."""
    return toolchain(variant.target, dict(variant.extra.get("cross_compiler") or {}) or None)


def toolchain_text(tc: CrossToolchain) -> str:
    """A CMake toolchain file: target system, cross compilers, the sysroot as the only find root,
    and qemu-user as the emulator for anything CMake runs at configure time."""
    emulator = " ".join([*tc.run_argv()[0:1], "-L", str(tc.sysroot)]) if tc.qemu else ""
    lines = [
        f"# generated by harness for {tc.triple}; do not edit (content-addressed)",
        "set(CMAKE_SYSTEM_NAME Linux)",
        f"set(CMAKE_SYSTEM_PROCESSOR {tc.processor})",
        f"set(CMAKE_C_COMPILER {tc.cc})",
        f"set(CMAKE_CXX_COMPILER {tc.cxx})",
        *([f"set(CMAKE_C_COMPILER_TARGET {tc.triple})", f"set(CMAKE_CXX_COMPILER_TARGET {tc.triple})"]
          if tc.is_clang else []),
        f"set(CMAKE_FIND_ROOT_PATH {tc.sysroot})",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)",
    ]
    if emulator:
        lines.append(f'set(CMAKE_CROSSCOMPILING_EMULATOR "{emulator.replace(" ", ";")}")')
    return "\n".join(lines) + "\n"


def toolchain_file(tc: CrossToolchain) -> Path:
    """Write the toolchain file once under ``<cache>/toolchains/``; its name holds its hash."""
    from harness.core import paths
    text = toolchain_text(tc)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = paths.cache_root() / "toolchains" / f"cross-{tc.triple}-{digest}.cmake"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def reasons(variant: Variant) -> tuple[list[str], list[str]]:
    """(reasons the row cannot be built here, notes) for a cross-built row; empty for a host row."""
    if not variant.target:
        return [], []
    tc = row_toolchain(variant)
    notes = [f"cross-built for {variant.target} with {tc.cxx} {tc.compiler_version}"] if tc.cxx else []
    emu = tc.emulator_missing()
    if emu:
        notes.append(emu)
    else:
        notes.append(f"runs here under {Path(tc.qemu or '').name} (-L {tc.sysroot})")
    return tc.missing(), notes


def runnable(variant: Variant) -> bool:
    return not variant.target or row_toolchain(variant).qemu is not None


@hookimpl
def harness_variant_configure(engine: EngineSpec, variant: Variant, host: HostInfo) -> dict[str, str] | None:
    if not variant.target:
        return None
    return {"CMAKE_TOOLCHAIN_FILE": str(toolchain_file(row_toolchain(variant)))}


@hookimpl
def harness_artifact_manifest(engine: EngineSpec, variant: Variant, manifest: dict[str, Any]) -> dict[str, Any] | None:
    if not variant.target:
        return None
    tc = row_toolchain(variant)
    tfile = Path(manifest.get("defines", {}).get("CMAKE_TOOLCHAIN_FILE", ""))
    return {"cross": {
        "triple": variant.target, "cc": tc.cc, "compiler": tc.cxx, "compiler_version": tc.compiler_version,
        "sysroot": str(tc.sysroot), "emulator": tc.qemu,
        "toolchain_file": tfile.read_text() if tfile.is_file() else None,
    }}


def elf_machine(path: Path) -> str | None:
    """``AArch64``, ``x64``, ... of an ELF file (pyelftools' names), None when it is not one."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with path.open("rb") as f:
            return str(ELFFile(f).get_machine_arch())
    except (ELFError, OSError):
        return None


_CPU_LINE = re.compile(r"^\s+(\S+)\s*$")


def cpu_models(tc: CrossToolchain) -> list[str]:
    """The CPU models this qemu-user offers (``-cpu help``), in its order."""
    r = subprocess.run([*tc.run_argv()[:1], "-cpu", "help"], capture_output=True, text=True, check=False)
    return [m.group(1) for line in r.stdout.splitlines() if (m := _CPU_LINE.match(line))]


# ---------------------------------------------------------------- which CPU model runs which level
@dataclass(frozen=True, kw_only=True)
class ModelChoice:
    level: str
    model: str | None
    isolated: bool
    """The model has exactly the level's features among those any level checks."""
    extra: tuple[str, ...] = ()
    """Checked features the model has beyond the level's."""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"qemu_model": self.model, "isolated": self.isolated, "extra": list(self.extra),
                "isolation_note": self.note}


def choose_cpu_models(levels: dict[str, frozenset[str]], models: dict[str, frozenset[str]]) -> dict[str, ModelChoice]:
    """For each level (name -> the features its loader check needs), the CPU model to run it under.

    Best: a model with exactly the level's features (among the features any level checks): a
    level using an instruction beyond its check dies there. Next: one where the loader would still
    pick this level (it lacks what every richer level needs). Last: any model with the level's
    features, said plainly: it cannot show the level needs nothing beyond its check. ``models``
    is in preference order (qemu's list order).
    """
    universe = frozenset().union(*levels.values()) if levels else frozenset()
    order = list(models)
    out: dict[str, ModelChoice] = {}
    for name, need in levels.items():
        ranked = []
        for m in order:
            has = models[m] & universe
            if not need <= has:
                continue
            surplus = has - need
            runnable = [lv for lv, f in levels.items() if f <= has]
            picked = max(runnable, key=lambda lv: len(levels[lv])) == name and \
                all(len(levels[lv]) < len(need) for lv in runnable if lv != name)
            tier = 0 if not surplus else (1 if picked else 2)
            ranked.append((tier, len(surplus), order.index(m), m, tuple(sorted(surplus))))
        if not ranked:
            out[name] = ModelChoice(level=name, model=None, isolated=False,
                                    note=f"no QEMU CPU model has {', '.join(sorted(need))}: not run")
            continue
        tier, _, _, model, extra = min(ranked)
        if tier == 0:
            note = ""
        elif tier == 1:
            note = (f"no QEMU model has exactly this level's features; {model} also has {', '.join(extra)} "
                    "(the loader still picks this level there)")
        else:
            richer = [lv for lv, f in levels.items() if need < f and f <= (models[model] & universe)]
            note = (f"no QEMU model isolates this level: {model} also has {', '.join(extra)}"
                    + (f" (what {', '.join(richer)} check)" if richer else "")
                    + "; run forced, so it shows the level works, not that it needs nothing beyond its check")
        out[name] = ModelChoice(level=name, model=model, isolated=tier == 0, extra=extra, note=note)
    return out
