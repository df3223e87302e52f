"""The static ISA audit on small libraries compiled here with the CPU levels' flags.

The AMX snippet is ggml's tile-config code (ggml-cpu/amx/mmq.cpp at the pin) before and
after patch 0002: built on the stack, GCC drops the rows/colsb stores; from static
storage the whole config reaches ldtilecfg.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.audit.isa import audit_library, closure
from harness.core.types import CpuLevel

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (scripts/install-system-deps.sh)")

CONFIG = """
#include <immintrin.h>
#include <stdint.h>
struct tile_config_t {
    uint8_t palette_id = 0;
    uint8_t start_row = 0;
    uint8_t reserved_0[14] = {0};
    uint16_t colsb[16] = {0};
    uint8_t rows[16] = {0};
};
"""

STACK = CONFIG + """
void ggml_tile_config_init(void) {
    static thread_local bool done = false;
    if (done) return;
    alignas(64) tile_config_t tc = {};
    tc.palette_id = 1;
    tc.rows[0] = 8;   tc.colsb[0] = 64;
    tc.rows[4] = 16;  tc.colsb[4] = 64;
    _tile_loadconfig(&tc);
    done = true;
}
"""

STATIC = CONFIG + """
static constexpr tile_config_t make(void) {
    tile_config_t tc = {};
    tc.palette_id = 1;
    tc.rows[0] = 8;   tc.colsb[0] = 64;
    tc.rows[4] = 16;  tc.colsb[4] = 64;
    return tc;
}
alignas(64) static constexpr tile_config_t cfg = make();
void ggml_tile_config_init(void) {
    static thread_local bool done = false;
    if (done) return;
    _tile_loadconfig(&cfg);
    done = true;
}
"""

AVX2 = """
#include <immintrin.h>
__attribute__((target("avx2"))) void add8(int *a, const int *b) {
    __m256i x = _mm256_loadu_si256((const __m256i *) a);
    _mm256_storeu_si256((__m256i *) a, _mm256_add_epi32(x, _mm256_loadu_si256((const __m256i *) b)));
}
"""

SAPPHIRE = CpuLevel(name="sapphirerapids", library="x.so", arch="x86_64", options=("AMX_TILE", "AMX_INT8"),
                    checked=("AVX512F", "AVX512BW", "AMX_INT8"), unchecked_options=("AMX_TILE",))


def _build(tmp_path: Path, name: str, source: str, *flags: str) -> Path:
    src = tmp_path / f"{name}.cpp"
    src.write_text(source)
    out = tmp_path / f"lib{name}.so"
    subprocess.run(["g++", "-O2", "-std=c++17", "-fPIC", "-shared", *flags, str(src), "-o", str(out)], check=True)
    return out


AMX_FLAGS = ("-mavx512f", "-mavx512bw", "-mamx-tile", "-mamx-int8")


def test_stack_tile_config_is_caught(tmp_path: Path) -> None:
    a = audit_library(_build(tmp_path, "stack", STACK, *AMX_FLAGS), SAPPHIRE)
    [t] = a.tile_configs
    if t.storage == "stack" and t.tiles:  # a compiler that keeps the stores: nothing to catch
        pytest.skip(f"this g++ keeps the rows/colsb stores ({t.detail})")
    assert not t.ok and "every tile is unconfigured" in t.detail
    assert t.palette == 1
    assert not a.clean


def test_static_tile_config_passes(tmp_path: Path) -> None:
    a = audit_library(_build(tmp_path, "static", STATIC, *AMX_FLAGS), SAPPHIRE)
    [t] = a.tile_configs
    assert t.storage == "static" and t.ok
    assert t.tiles == {0: (8, 64), 4: (16, 64)}
    assert a.clean
    assert a.notes == ["option AMX_TILE has no loader check of its own; implied by AMX_INT8"]


def test_instruction_outside_the_checked_set(tmp_path: Path) -> None:
    lib = _build(tmp_path, "avx2", AVX2)
    sse42 = CpuLevel(name="sse42", library=lib.name, arch="x86_64", options=("SSE42",), checked=("SSE4_2",))
    a = audit_library(lib, sse42)
    assert not a.clean
    assert {u.feature for u in a.outside} == {"AVX", "AVX2"}
    [avx2] = [u for u in a.outside if u.feature == "AVX2"]
    assert list(avx2.functions) == ["add8(int*, int const*)"]
    haswell = CpuLevel(name="haswell", library=lib.name, arch="x86_64", options=("AVX2",), checked=("AVX2",))
    assert audit_library(lib, haswell).clean


def test_implications() -> None:
    assert {"AVX2", "AVX", "SSE4_2", "SSE2"} <= closure(["AVX512F"])
    assert "AMX_TILE" in closure(["AMX_INT8"])
    assert "AVX512F" not in closure(["AVX2"])
