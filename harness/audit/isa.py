"""Static ISA audit: does each CPU level's library use only what the loader checked?

ggml loads the CPU level whose score is best for the host; the score checks a set of
CPUID features (read from the pinned source, :class:`~harness.core.types.CpuLevel`). If the
library's code needs a feature outside that set, some CPU that passes the check dies
with SIGILL. This module decodes every executable section of each level's library with
iced-x86 (which reports the CPUID feature of each instruction), attributes instructions
to functions through the ELF symbol table (pyelftools), and compares.

It also checks every ``ldtilecfg`` (AMX): the 64-byte config it loads must configure
tiles (palette 1, non-zero rows and column bytes). A config the compiler left with only
zeros and the palette byte is the Sapphire Rapids SIGILL of patch 0002.

Runs on any host, whatever its CPU: nothing here executes the libraries.
"""

from __future__ import annotations

import bisect
import struct
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import iced_x86 as ix
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from harness.core.errors import AuditError
from harness.core.types import CpuLevel
from harness.runtime.levels import level_libraries

FEATURE_NAMES: dict[int, str] = {
    v: k for k, v in vars(ix.CpuidFeature).items() if not k.startswith("_") and isinstance(v, int)
}

#: What every x86-64 CPU runs (the psABI baseline, x86-64-v1), plus hint encodings that
#: older CPUs execute as NOPs (endbr64: CET_IBT).
BASELINE: dict[str, frozenset[str]] = {
    "x86_64": frozenset({
        "INTEL8086", "INTEL186", "INTEL286", "INTEL386", "INTEL486", "X64", "FPU", "FPU287", "FPU387",
        "CMOV", "CX8", "MMX", "SSE", "SSE2", "FXSR", "SYSCALL", "TSC", "CPUID", "MULTIBYTENOP", "PAUSE",
        "CLFSH", "CET_IBT",
    }),
}

#: Feature A implies B: architectural (AMX-INT8 operates on AMX tiles) or how compilers
#: enable them (GCC's -mavx512f implies -mavx2 -mfma -mf16c; -mavx implies -msse4.2).
IMPLIES: dict[str, tuple[str, ...]] = {
    "SSE3": ("SSE2",), "SSSE3": ("SSE3",), "SSE4_1": ("SSSE3",), "SSE4_2": ("SSE4_1",),
    "AVX": ("SSE4_2",), "AVX2": ("AVX",), "FMA": ("AVX",), "F16C": ("AVX",),
    "AVX512F": ("AVX2", "FMA", "F16C"),
    "AVX512CD": ("AVX512F",), "AVX512VL": ("AVX512F",), "AVX512DQ": ("AVX512F",), "AVX512BW": ("AVX512F",),
    "AVX512_VBMI": ("AVX512BW",), "AVX512_VNNI": ("AVX512F",), "AVX512_BF16": ("AVX512BW",),
    "AVX_VNNI": ("AVX2",), "AMX_INT8": ("AMX_TILE",), "AMX_BF16": ("AMX_TILE",),
}


def closure(features: Iterable[str]) -> frozenset[str]:
    out: set[str] = set()
    todo = list(features)
    while todo:
        f = todo.pop()
        if f not in out:
            out.add(f)
            todo.extend(IMPLIES.get(f, ()))
    return frozenset(out)


@dataclass(frozen=True, kw_only=True)
class FeatureUse:
    feature: str
    count: int
    functions: dict[str, int]
    """function -> instructions needing the feature (most first)"""


@dataclass(frozen=True, kw_only=True)
class TileConfig:
    """One ``ldtilecfg`` and what the config it loads holds."""

    function: str
    address: int
    operand: str
    storage: str
    """static (read from the file) | stack (reconstructed from the stores before it)"""
    palette: int | None
    tiles: dict[int, tuple[int, int]]
    """tile -> (rows, colsb) for every tile with either non-zero"""
    ok: bool
    detail: str


@dataclass(frozen=True, kw_only=True)
class LevelAudit:
    level: str
    library: str
    present: bool
    checked: tuple[str, ...]
    allowed: tuple[str, ...]
    used: dict[str, int] = field(default_factory=dict)
    outside: list[FeatureUse] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tile_configs: list[TileConfig] = field(default_factory=list)
    instructions: int = 0
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return self.present and not self.outside and all(t.ok for t in self.tile_configs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level, "library": self.library, "present": self.present, "clean": self.clean,
            "checked": list(self.checked), "used": dict(self.used),
            "outside": [{"feature": u.feature, "count": u.count, "functions": u.functions} for u in self.outside],
            "notes": list(self.notes),
            "tile_configs": [{"function": t.function, "address": hex(t.address), "operand": t.operand,
                              "storage": t.storage, "palette": t.palette,
                              "tiles": {str(k): list(v) for k, v in t.tiles.items()}, "ok": t.ok, "detail": t.detail}
                             for t in self.tile_configs],
            "instructions": self.instructions, "seconds": self.seconds,
        }


class _Symbols:
    """Address -> function name, from .symtab (or .dynsym when stripped)."""

    def __init__(self, elf: ELFFile) -> None:
        spans: list[tuple[int, int, str]] = []
        for name in (".symtab", ".dynsym"):
            sec = elf.get_section_by_name(name)
            if isinstance(sec, SymbolTableSection):
                for s in sec.iter_symbols():
                    if s["st_info"]["type"] == "STT_FUNC" and s["st_value"] and s["st_size"]:
                        spans.append((s["st_value"], s["st_value"] + s["st_size"], s.name))
                if spans:
                    break
        spans.sort()
        self.starts = [s[0] for s in spans]
        self.spans = spans

    def at(self, addr: int) -> tuple[str, int, int]:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and self.spans[i][0] <= addr < self.spans[i][1]:
            return self.spans[i][2], self.spans[i][0], self.spans[i][1]
        return f"<no symbol @{addr:#x}>", addr, addr + 1


def demangle(names: Iterable[str]) -> dict[str, str]:
    """C++ names as people read them (binutils' c++filt; the raw name when it is missing)."""
    import shutil
    import subprocess

    names = list(dict.fromkeys(names))
    exe = shutil.which("c++filt")
    if not exe or not names:
        return {n: n for n in names}
    r = subprocess.run([exe], input="\n".join(names), capture_output=True, text=True, check=False)
    out = r.stdout.splitlines()
    return dict(zip(names, out, strict=False)) if len(out) == len(names) else {n: n for n in names}


def _read_vaddr(elf: ELFFile, addr: int, size: int) -> bytes | None:
    for sec in elf.iter_sections():
        start = sec["sh_addr"]
        if start and start <= addr and addr + size <= start + sec["sh_size"]:
            if sec["sh_type"] == "SHT_NOBITS":
                return bytes(size)
            return bytes(sec.data()[addr - start:addr - start + size])
    return None


def _parse_config(raw: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    colsb = struct.unpack_from("<16H", raw, 16)
    rows = raw[48:64]
    return raw[0], {i: (rows[i], colsb[i]) for i in range(16) if rows[i] or colsb[i]}


def _judge(palette: int | None, tiles: dict[int, tuple[int, int]]) -> tuple[bool, str]:
    if palette != 1:
        return False, f"palette {palette}, expected 1"
    if not tiles:
        return False, "rows and column bytes are all zero: every tile is unconfigured (first tile instruction: SIGILL)"
    half = [t for t, (r, c) in tiles.items() if not r or not c]
    if half:
        return False, f"tiles {half} have zero rows or zero column bytes"
    return True, f"{len(tiles)} tiles configured"


_STORE_SIZES = {ix.MemorySize.UINT8: 1, ix.MemorySize.INT8: 1, ix.MemorySize.UINT16: 2, ix.MemorySize.INT16: 2,
                ix.MemorySize.UINT32: 4, ix.MemorySize.INT32: 4, ix.MemorySize.UINT64: 8, ix.MemorySize.INT64: 8}


def _stack_config(fn_code: bytes, fn_start: int, target: ix.Instruction) -> tuple[int | None, dict[int, tuple[int, int]], str]:
    """Replay the stores into the config's 64 bytes before ``ldtilecfg`` (straight-line approximation).

    Immediate stores give bytes; a store of a register zeroed by xor gives zeros; any other
    store into the rows/colsb bytes is "unknown" and the config cannot be judged statically.
    """
    base, disp = target.memory_base, target.memory_displacement
    disp = disp - (1 << 64) if disp >= 1 << 63 else disp
    mem: dict[int, int | None] = {}
    zero_regs: set[int] = set()
    for ins in ix.Decoder(64, fn_code, ip=fn_start):
        if ins.ip >= target.ip:
            break
        m = ins.mnemonic
        if m in (ix.Mnemonic.PXOR, ix.Mnemonic.VPXOR, ix.Mnemonic.VPXORD, ix.Mnemonic.VPXORQ, ix.Mnemonic.XORPS,
                 ix.Mnemonic.VXORPS, ix.Mnemonic.XOR) and ins.op_count >= 2 \
                and ins.op0_kind == ix.OpKind.REGISTER and all(
                    ins.op_kind(i) == ix.OpKind.REGISTER and ins.op_register(i) == ins.op0_register
                    for i in range(1, ins.op_count)):
            zero_regs.add(ix.RegisterExt.full_register(ins.op0_register))
            continue
        if ins.op_count and ins.op0_kind == ix.OpKind.REGISTER:
            zero_regs.discard(ix.RegisterExt.full_register(ins.op0_register))
        if ins.op_count < 2 or ins.op0_kind != ix.OpKind.MEMORY or ins.memory_base != base \
                or ins.memory_index != ix.Register.NONE:
            continue
        d = ins.memory_displacement
        d = d - (1 << 64) if d >= 1 << 63 else d
        size = ix.MemorySizeExt.size(ins.memory_size) if ins.memory_size != ix.MemorySize.UNKNOWN else 0
        off = d - disp
        if size == 0 or off + size <= 0 or off >= 64:
            continue
        src = ins.op1_kind
        if src in (ix.OpKind.IMMEDIATE8, ix.OpKind.IMMEDIATE16, ix.OpKind.IMMEDIATE32,
                   ix.OpKind.IMMEDIATE8TO16, ix.OpKind.IMMEDIATE8TO32, ix.OpKind.IMMEDIATE8TO64,
                   ix.OpKind.IMMEDIATE32TO64):
            value = ins.immediate(1) & ((1 << (8 * size)) - 1)
            data: list[int | None] = list(value.to_bytes(size, "little"))
        elif src == ix.OpKind.REGISTER and ix.RegisterExt.full_register(ins.op1_register) in zero_regs:
            data = [0] * size
        else:
            data = [None] * size
        for i, b in enumerate(data):
            if 0 <= off + i < 64:
                mem[off + i] = b
    raw = bytes((mem.get(i) or 0) for i in range(64))
    unknown = [i for i in range(16, 64) if i in mem and mem[i] is None]
    palette = mem.get(0)
    pal, tiles = _parse_config(raw)
    note = f"{len(unknown)} rows/colsb bytes written from registers (not known statically)" if unknown else ""
    return (palette if palette is not None else pal) if 0 in mem else None, ({} if unknown else tiles), note


def audit_library(lib: Path, level: CpuLevel | None, *, arch: str = "x86_64") -> LevelAudit:
    """Decode ``lib`` and compare the features its instructions need with ``level``'s checked set."""
    t0 = time.perf_counter()
    checked = tuple(level.checked) if level else ()
    allowed = closure([*BASELINE.get(arch, frozenset()), *checked])
    name = level.name if level else lib.name
    if not lib.is_file():
        return LevelAudit(level=name, library=lib.name, present=False, checked=checked, allowed=tuple(sorted(allowed)),
                          notes=["library missing from the artifact"])
    used: Counter[str] = Counter()
    outside: dict[str, Counter[str]] = defaultdict(Counter)
    tile_ins: list[ix.Instruction] = []
    cache: dict[int, tuple[str, ...]] = {}
    n = 0
    with lib.open("rb") as f:
        elf = ELFFile(f)
        if elf.get_machine_arch() != "x64":
            msg = f"{lib} is {elf.get_machine_arch()}, not x86-64: the ISA audit decodes x86-64 only"
            raise AuditError(msg)
        syms = _Symbols(elf)
        for sec in elf.iter_sections():
            if not sec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR or sec["sh_type"] == "SHT_NOBITS":
                continue
            for ins in ix.Decoder(64, sec.data(), ip=sec["sh_addr"]):
                n += 1
                code = ins.code
                feats = cache.get(code)
                if feats is None:
                    feats = cache[code] = tuple(FEATURE_NAMES.get(x, str(x)) for x in ins.cpuid_features()) \
                        if code != ix.Code.INVALID else ()
                for ft in feats:
                    used[ft] += 1
                    if ft not in allowed:
                        outside[ft][syms.at(ins.ip)[0]] += 1
                if ins.mnemonic == ix.Mnemonic.LDTILECFG:
                    tile_ins.append(ins)
        tiles = [_tile_config(elf, syms, ins) for ins in tile_ins]
    names = demangle([fn for c in outside.values() for fn in c] + [t.function for t in tiles])
    uses = [FeatureUse(feature=ft, count=sum(c.values()),
                       functions={names.get(fn, fn): k for fn, k in c.most_common()})
            for ft, c in sorted(outside.items(), key=lambda kv: -sum(kv[1].values()))]
    tiles = [TileConfig(**{**t.__dict__, "function": names.get(t.function, t.function)}) for t in tiles]
    notes = []
    if level is not None:
        for opt in level.unchecked_options:
            via = sorted(f for f in checked if opt in closure([f]) and f != opt)
            notes.append(f"option {opt} has no loader check of its own"
                         + (f"; implied by {', '.join(via)}" if via else "; nothing checked implies it"))
    return LevelAudit(level=name, library=lib.name, present=True, checked=checked, allowed=tuple(sorted(allowed)),
                      used=dict(used.most_common()), outside=uses, notes=notes, tile_configs=tiles,
                      instructions=n, seconds=round(time.perf_counter() - t0, 2))


def _tile_config(elf: ELFFile, syms: _Symbols, ins: ix.Instruction) -> TileConfig:
    fn, start, end = syms.at(ins.ip)
    operand = ix.Formatter(ix.FormatterSyntax.GAS).format(ins)
    if ins.is_ip_rel_memory_operand:
        addr = ins.ip_rel_memory_address
        raw = _read_vaddr(elf, addr, 64)
        if raw is None:
            return TileConfig(function=fn, address=ins.ip, operand=operand, storage="static", palette=None, tiles={},
                              ok=False, detail=f"config address {addr:#x} is not in any section of the file")
        static_palette, tiles = _parse_config(raw)
        ok, detail = _judge(static_palette, tiles)
        return TileConfig(function=fn, address=ins.ip, operand=operand, storage="static", palette=static_palette,
                          tiles=tiles, ok=ok, detail=detail)
    code = _read_vaddr(elf, start, end - start) or b""
    palette, tiles, note = _stack_config(code, start, ins)
    if note:
        return TileConfig(function=fn, address=ins.ip, operand=operand, storage="stack", palette=palette, tiles={},
                          ok=True, detail=f"built at run time; {note}")
    ok, detail = _judge(palette, tiles)
    return TileConfig(function=fn, address=ins.ip, operand=operand, storage="stack", palette=palette, tiles=tiles,
                      ok=ok, detail=("built on the stack: " + detail))


def audit_artifact(lib_dir: Path, levels: list[CpuLevel]) -> list[LevelAudit]:
    """Every defined level's library in ``lib_dir`` (x86-64 levels), plus libraries no definition names."""
    out = [audit_library(lib_dir / lvl.library, lvl, arch=lvl.arch) for lvl in levels if lvl.arch == "x86_64"]
    known = {lvl.library for lvl in levels}
    for p in level_libraries(lib_dir):
        if p.name not in known:
            a = audit_library(p, None)
            out.append(LevelAudit(**{**a.__dict__, "notes": [*a.notes, "not a level the pinned source defines"]}))
    return out
